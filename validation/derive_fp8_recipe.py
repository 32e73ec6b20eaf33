"""One-off: state the FP8 recipe of the rows that ran MXFP8 (plan option ``fp8_recipe=mx``).

Run once (2026-12-02) on validation/training_runs.csv and validation/extra_training_runs.csv. The rule, fixed
before the rows were predicted with it: an FP8 row whose notes give its precision as the FP8-MX recipe
(Megatron-Bridge's tables: 'FP8-MX recipe', written for the tables' FP8-MX / MXFP8 cells) or as MXFP8 (the
Megatron-Core MoE report's rows, arXiv 2603.07685) states ``fp8_recipe=mx``; every other FP8 row keeps the
per-tensor recipe (FP8-CS, delayed scaling, or a recipe not stated). Nothing else in a row changes.

    python validation/derive_fp8_recipe.py validation/training_runs.csv validation/extra_training_runs.csv
"""

from __future__ import annotations

import re
import sys

from csv_columns import main

MX = re.compile(r"FP8-MX recipe|(?:^|; )MXFP8(?:;|$)")
OPTION = "fp8_recipe=mx"


def runs_mx(row: dict) -> bool:
    return row.get("precision") == "fp8" and bool(MX.search(row.get("notes", "")))


def _state_mx(fields: list[str], rows: list[dict]) -> int:
    changed = 0
    for row in rows:
        options = [o for o in (row.get("plan_options") or "").split(",") if o]
        if runs_mx(row) and OPTION not in options:
            row["plan_options"] = ",".join([*options, OPTION])
            changed += 1
    return changed


if __name__ == "__main__":
    raise SystemExit(main(sys.argv, _state_mx, "state fp8_recipe=mx"))

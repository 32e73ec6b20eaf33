"""Write each Megatron-Bridge row's traced recipe into its `recipe_options` column.

Run: `.venv/bin/python validation/state_recipes.py` (a second or two; rewrites the two CSVs in place, atomically).

The Megatron-Bridge performance tables publish the parallel layout of each run, not its kernel paths. What the
release's recipe ran (dispatcher, CUDA-graph scope, EP overlap, recomputation, fused grouped MLP, FP8 attention,
TP communication overlap) is traced from Megatron-Bridge's `scripts/performance` presets at the release's tag into
validation/bridge_recipes.csv (method in extra_training_runs_NOTES.md). Every row whose layout matches its preset
(`layout_matches_row` 'yes') states those fields in `recipe_options`, in --plan syntax, which the validator applies
over `plan_options` (windtunnel.validation.training). A row whose layout does not match keeps the stack defaults.
The mapping from recipe fields to plan fields is recipe_trial.FIELDS; validation/recipe_trial.py measures what
each field does to the predictions.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from recipe_trial import FIELDS, recipes, stated_options

from windtunnel.specs.yamlio import write_atomic

HERE = Path(__file__).parent
FILES = ["extra_training_runs.csv", "training_runs.csv"]


def recipe_column(name: str, rows: list[dict]) -> list[str]:
    """The `recipe_options` value of each of ``rows`` (of CSV file ``name``): the matching recipe's fields."""
    table = recipes()
    return [",".join(stated_options(table[(name, row["id"])], list(FIELDS))) if (name, row["id"]) in table else ""
            for row in rows]


def main() -> None:
    for name in FILES:
        path = HERE / name
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            fields, rows = list(reader.fieldnames or []), list(reader)
        if "recipe_options" not in fields:
            fields.append("recipe_options")
        for row, value in zip(rows, recipe_column(name, rows), strict=True):
            row["recipe_options"] = value
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        write_atomic(path, out.getvalue())
        print(f"{name}: {sum(1 for row in rows if row['recipe_options'])} rows state their recipe")


if __name__ == "__main__":
    main()

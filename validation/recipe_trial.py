"""What the Megatron-Bridge MoE rows predict with each release's recipe stated. Writes validation/RECIPE_TRIAL.md.

Run: `.venv/bin/python validation/recipe_trial.py` (under a minute).

The Megatron-Bridge performance tables (validation/extra_training_runs.csv, training_runs.csv) publish the
parallel layout, not the kernel paths. validation/bridge_recipes.csv holds, per MoE row, what the release's recipe ran, read from Megatron-Bridge's `scripts/performance` presets at
the tag the release shipped (25.09 v0.1.0rc4, 25.11 v0.2.0, 26.02 v0.3.0, 26.02.01 v0.3.1, 26.04 v0.4.0,
26.04.01 v0.4.2, 26.06 v0.5.0, 26.06.01 v0.5.1; column `source` names the files, extra_training_runs_NOTES.md
the method). Only rows whose layout matches a preset (`layout_matches_row` 'yes') are stated.

Each recipe field becomes the plan field that models it (FIELDS below). The rows ship every field stated (column
`recipe_options`, written by validation/state_recipes.py). Each variant here states none of them (the stack
defaults), one field, or all but one; every other row and field stays as the CSVs have it. Nothing here changes a
prediction the other reports make: it measures what each recipe field does.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from windtunnel.specs.yamlio import write_atomic
from windtunnel.validation.fidelity import SLICE_LEVELS, slice_stats
from windtunnel.validation.rows import RowResult
from windtunnel.validation.training import read_rows, validate_rows

HERE = Path(__file__).parent
CSVS = ["training_runs.csv", "training_runs_2.csv", "extra_training_runs.csv", "more_training_runs.csv",
        "dgxc_training_runs.csv"]
RECIPES = HERE / "bridge_recipes.csv"


def _dispatcher(recipe: dict) -> list[str]:
    # Flex (DeepEP or HybridEP) reorders on arrival only; with the permutation fused into HybridEP, not at all.
    if recipe["dispatcher"].startswith("flex-"):
        return ["dispatcher=" + ("hybridep" if recipe["permute_fusion_into_hybridep"] == "true" else "deepep")]
    return ["dispatcher=alltoall"]


def _graphs(recipe: dict) -> list[str]:
    if recipe["cuda_graph_impl"] == "full_iteration":
        return ["cuda_graphs=full"]
    if recipe["cuda_graph_impl"] == "transformer_engine" and recipe["cuda_graph_scope"]:
        return ["cuda_graphs=" + recipe["cuda_graph_scope"]]
    return []


def _recompute(recipe: dict) -> list[str]:
    # Selective recomputation of the named modules; a selective recipe with no modules recomputes nothing.
    modules, granularity = recipe["recompute_modules"], recipe["recompute_granularity"]
    if granularity == "selective" and modules:
        return ["recompute=selective", "recompute_modules=" + modules]
    if granularity == "full":
        return ["recompute=full"]
    return ["recompute=none"]


FIELDS = {  # recipe columns -> plan options
    "dispatcher": _dispatcher,
    "cuda graphs": _graphs,
    "EP overlap": lambda r: ["ep_overlap=true"] if r["moe_a2a_overlap"] == "true" else [],
    "recompute": _recompute,
    "fused MLP, FP8 attention": lambda r: (["expert_gemm=fused_mlp"] if r["cutedsl_fused_grouped_mlp"] == "true" else [])
    + (["fp8_attention=true"] if r["fp8_dot_product_attention"] == "true" else []),
    # TP communication overlap (userbuffers), traced where the plan has TP > 1 (blank at TP 1, where it does nothing).
    "TP overlap": lambda r: {"false": ["tp_overlap=false"], "true": ["tp_overlap=true"]}.get(r["tp_comm_overlap"], []),
}


def stated_options(recipe: dict, fields: list[str]) -> list[str]:
    """The plan options a recipe states for the named FIELDS."""
    return [option for name in fields for option in FIELDS[name](recipe)]


def recipes() -> dict[tuple[str, str], dict]:
    """Recipe rows whose layout matches a preset, by (CSV file name, row id)."""
    with RECIPES.open(newline="") as handle:
        return {(r["file"], r["id"]): r for r in csv.DictReader(handle) if r["layout_matches_row"].startswith("yes")}


def _median(results: list[RowResult]) -> float:
    return statistics.median(abs(r.error) for r in results) if results else float("nan")


def _slice_cell(stats: dict) -> str:
    """A slice's median |error| and, where its rows have a step time, its median measured / predicted ratio."""
    ratio = stats["median_step_time_ratio"]
    return f"{100 * stats['median_abs_error']:.1f}%" + (f" ({ratio:.3f})" if ratio is not None else "")


def main() -> None:
    table = recipes()
    # Each field alone, each left out, then all of them (the last variant, whose rows the tables below list).
    variants = [[name] for name in FIELDS] + [[f for f in FIELDS if f != name] for name in FIELDS] + [list(FIELDS)]
    base: dict[tuple[str, str], RowResult] = {}
    trial: dict[int, dict[tuple[str, str], RowResult]] = {i: {} for i in range(len(variants))}
    for name in CSVS:
        rows = [dict(row, recipe_options="") for row in read_rows(HERE / name)]  # the stack defaults
        for r in validate_rows(rows):
            base[(name, r.id)] = r
        ids = {row["id"] for row in rows if (name, row["id"]) in table}
        for i, fields in enumerate(variants):
            stated = []
            for row in rows:
                recipe = table.get((name, row["id"]))
                extra = stated_options(recipe, fields) if recipe else []
                if extra:
                    row = dict(row, recipe_options=",".join(extra))
                stated.append(row)
            for r in validate_rows(stated, only=ids):
                trial[i][(name, r.id)] = r
    scored = {k: r for k, r in base.items() if r.role == "validation" and r.error is not None}
    lines = ["# The Megatron-Bridge recipes stated on their rows: a trial", "",
             "Generated by `.venv/bin/python validation/recipe_trial.py` (method in its docstring). Errors are signed as in",
             "the other reports (a throughput row predicted high, or a step-time row predicted low, is too fast).", "",
             f"{len([k for k in table if k in scored])} validation rows have a recipe whose layout matches a preset.", "",
             "## Medians of |error| over the validation rows", "",
             "| variant | all rows | MoE rows | the stated rows |", "|---|---|---|---|"]
    stated_keys = [k for k in table if k in scored]
    rows_at = [("stack defaults", {})] + [(" + ".join(f), trial[i]) for i, f in enumerate(variants)]
    rows_at = [(label.replace(" + ".join(FIELDS), "all of them (as shipped)"), by) for label, by in rows_at]
    for label, override in rows_at:
        merged = {k: override.get(k, r) for k, r in scored.items()}
        merged = {k: r for k, r in merged.items() if r.error is not None}
        lines.append(f"| {label} | {100 * _median(list(merged.values())):.1f}% | "
                     f"{100 * _median([r for r in merged.values() if r.arch == 'moe']):.1f}% | "
                     f"{100 * _median([merged[k] for k in stated_keys if k in merged]):.1f}% |")
    everything = trial[len(variants) - 1]
    lines += ["", "## By slice, every field stated", "",
              "The slices (stack x chip generation/precision x dense/MoE, as validation/ACCURACY.md cuts them) whose",
              "median moves; in brackets the median measured / predicted step time (above 1: too fast).", "",
              "| slice | rows | median abs error at the defaults | stated |", "|---|---|---|---|"]
    by_slice = SLICE_LEVELS["stack x chip generation/precision x dense/MoE"]
    merged_all = [everything.get(k, r) for k, r in scored.items()]
    before = {s["slice"]: s for s in slice_stats(scored.values(), by_slice)}
    after = {s["slice"]: s for s in slice_stats(merged_all, by_slice)}
    for name, b in before.items():
        a = after[name]
        if a["median_abs_error"] != b["median_abs_error"]:
            lines.append(f"| {name} | {b['rows']} | {_slice_cell(b)} | {_slice_cell(a)} |")
    lines += ["", "## By release, every field stated", "", "| release | rows | median abs error at the defaults | stated |",
              "|---|---|---|---|"]
    releases = sorted({table[k]["release"] for k in stated_keys})
    for release in releases:
        keys = [k for k in stated_keys if table[k]["release"] == release and everything.get(k) and everything[k].error is not None]
        lines.append(f"| {release} | {len(keys)} | {100 * _median([scored[k] for k in keys]):.1f}% | "
                     f"{100 * _median([everything[k] for k in keys]):.1f}% |")
    lines += ["", "## Rows", "", "| row | release | chip | model | stated | error at the defaults | stated |",
              "|---|---|---|---|---|---|---|"]
    for k in stated_keys:
        r, s = scored[k], everything.get(k)
        after = f"{100 * s.error:+.1f}%" if s is not None and s.error is not None else "n/a"
        lines.append(f"| {k[0]}:{k[1]} | {table[k]['release']} | {r.chip} | {r.model} | "
                     f"`{','.join(stated_options(table[k], list(FIELDS)))}` | "
                     f"{100 * r.error:+.1f}% | {after} |")
    write_atomic(HERE / "RECIPE_TRIAL.md", "\n".join(lines) + "\n")
    print("written: validation/RECIPE_TRIAL.md")


if __name__ == "__main__":
    main()

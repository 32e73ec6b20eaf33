"""Where the MoE validation rows lose time the model does not see: the unexplained seconds per MoE layer and
micro-batch, and per local expert. Writes validation/MOE_GAP.md.

Run: `.venv/bin/python validation/moe_gap_report.py` (a few seconds).

A diagnostic, not a fit: it changes no prediction. For every MoE validation row of the five training CSVs the
script rebuilds the row's job as `windtunnel validate training` does, and

- measured and predicted step time: the predicted step from the simulation, the measured one from the row's
  metric (validation/bands.py step_time_ratio: measured / predicted step time);
- layer micro-batches of one pipeline rank: global batch / (micro-batch x data-parallel size) micro-batches
  times ceil(layers / pp) layers. The step's difference over that count is the row's unexplained time per MoE
  layer and micro-batch (an approximation: pipeline bubbles and a first dense layer are spread over it too);
- per local expert: that time over the rank's local experts (experts / EP);
- the model's own time of one MoE layer and micro-batch (forward plus backward as the row recomputes), split
  into its host (framework and library-call issue), compute and expert-parallel streams' busy time.

Megatron-Bridge rows whose release recipe matches a preset (validation/bridge_recipes.csv, as
validation/recipe_trial.py reads it) ship with every recipe field stated (column `recipe_options`); the report
costs each MoE row at the stack defaults (no recipe stated) and, where a recipe is traced, as shipped. What the rows
share when they are too fast is the signature this report shows: the unexplained time grows with the local
experts, not with the tokens.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path

from recipe_trial import CSVS, FIELDS, recipes, stated_options

from windtunnel.specs.yamlio import write_atomic
from windtunnel.train.step import TrainingJob, _StepBuilder
from windtunnel.validation.bands import STEP_TIME_METRICS, THROUGHPUT_METRICS
from windtunnel.validation.training import _predict, _row_facts, build_job, read_rows

HERE = Path(__file__).parent
REPORT = HERE / "MOE_GAP.md"
STREAMS = ("host", "compute", "ep")  # the layer's streams whose busy time the report splits


def layer_microbatches(job: TrainingJob) -> int:
    """Layer micro-batches one pipeline rank runs in a step: micro-batches x ceil(layers / pp)."""
    plan = job.plan
    dp = job.cluster.devices // (plan.tp * plan.pp * plan.cp)
    return job.global_batch // (plan.mbs * dp) * math.ceil(job.model.layers / plan.pp)


def moe_layer_ms(job: TrainingJob) -> dict[str, float]:
    """The model's time of one MoE layer and micro-batch (ms): its wall time and each stream's busy time,
    forward plus backward as the plan recomputes."""
    builder = _StepBuilder(job)
    mode = builder.recompute_modes(1)[0]
    out = {"wall": 0.0, **{name: 0.0 for name in STREAMS}}
    for phase in ("fwd", f"bwd-{mode}"):
        played = builder.coster.play(builder.phase_graphs("moe", phase))
        timeline = played.timeline
        out["wall"] += played.time * 1e3
        for i, stream in enumerate(timeline.streams):
            if stream in out:
                out[stream] += (timeline.end[i] - timeline.start[i]) * 1e3
    return out


def gap(row: dict) -> dict | None:
    """A row's job facts and its unexplained time per layer micro-batch (ms), or None when it is not costed."""
    job, _, skip = build_job(row)
    if skip or job is None:
        return None
    value, result = _predict(row, job)
    if not result.feasible or not result.step_time_s:
        return None
    measured = float(row["value"])
    # A throughput is a fixed amount of work over the step time: its ratio is the inverse.
    ratio = measured / value if row["metric"] in STEP_TIME_METRICS else value / measured
    count = layer_microbatches(job)
    local = job.model.moe.experts // job.plan.ep
    unexplained = (ratio - 1.0) * result.step_time_s / count * 1e3
    return {"ratio": ratio, "local": local, "unexplained_ms": unexplained,
            "per_expert_ms": unexplained / local, "layer": moe_layer_ms(job), "ep": job.plan.ep,
            "dispatcher": job.plan.dispatcher, "graphs": job.plan.cuda_graphs,
            "tokens": job.plan.mbs * job.seq_len // job.plan.cp}


def rows() -> list[dict]:
    """Every MoE validation row: its facts, its gap at the stack defaults and, where a recipe is traced, as
    shipped (stated).
    (The split rule makes every MoE row a validation row; only step-time and throughput metrics have a gap.)"""
    table = recipes()
    out = []
    for name in CSVS:
        for row in read_rows(HERE / name):
            if row.get("arch") != "moe" or row.get("metric") not in STEP_TIME_METRICS + THROUGHPUT_METRICS:
                continue
            shipped = gap(dict(row, recipe_options=""))  # the stack defaults
            if shipped is None:
                continue
            recipe = table.get((name, row["id"]))
            stated = None
            if recipe:
                stated = gap(dict(row, recipe_options=",".join(stated_options(recipe, list(FIELDS)))))
            facts = _row_facts(row)
            out.append({"row": f"{name}:{row['id']}", "stack": facts["framework"], "chip": facts["chip"],
                        "precision": row["precision"], "model": facts["model"], "shipped": shipped, "stated": stated})
    return out


def _ms(value: float) -> str:
    return f"{value:+.2f}"


def _summary(items: list[dict]) -> list[str]:
    """Median unexplained time per local expert by chip and local-expert count, at the stack defaults and with
    the recipe stated where one is traced (the defaults' figure otherwise)."""
    by: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for item in items:
        by[(item["chip"], item["shipped"]["local"])].append(item)
    lines = ["| chip | local experts | rows | median unexplained per layer micro-batch, ms (stack defaults) | "
             "per local expert, ms (stack defaults) | per local expert, ms (recipe stated where traced) |",
             "|---|---|---|---|---|---|"]
    for (chip, local), members in sorted(by.items()):
        shipped = [m["shipped"] for m in members]
        best = [m["stated"] or m["shipped"] for m in members]
        lines.append(f"| {chip} | {local} | {len(members)} | "
                     f"{_ms(statistics.median(g['unexplained_ms'] for g in shipped))} | "
                     f"{_ms(statistics.median(g['per_expert_ms'] for g in shipped))} | "
                     f"{_ms(statistics.median(g['per_expert_ms'] for g in best))} |")
    return lines


def main() -> None:
    items = rows()
    lines = ["# MoE rows: the time per layer and micro-batch the model does not see", "",
             "Generated by `.venv/bin/python validation/moe_gap_report.py` (method in its docstring). A diagnostic: no",
             "prediction uses it. Unexplained = measured minus predicted step time over the layer micro-batches of one",
             "pipeline rank, in ms (positive: the model is too fast; measured / predicted step time above 1 says the",
             "same). Model columns: one MoE layer and micro-batch,",
             "forward and backward, its wall time and the busy time of its host, compute and expert-parallel streams.",
             "", f"{len(items)} MoE validation rows; "
             f"{sum(1 for i in items if i['stated'])} with a traced Megatron-Bridge recipe.", "",
             "## By chip and local experts", ""]
    lines += _summary(items)
    lines += ["", "## Rows", "",
              "| row | stack | chip | precision | model | EP | local experts | tokens per micro-batch | dispatcher | "
              "measured / predicted step | model wall / host / compute / EP, ms | unexplained, ms | "
              "per local expert, ms | recipe stated: measured / predicted step, per local expert ms (dispatcher; CUDA graphs) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for item in sorted(items, key=lambda i: (i["chip"], i["shipped"]["local"], i["row"])):
        g, s = item["shipped"], item["stated"]
        layer = g["layer"]
        stated = f"{s['ratio']:.3f}, {_ms(s['per_expert_ms'])} ({s['dispatcher']}; graphs {s['graphs']})" if s else ""
        lines.append(f"| {item['row']} | {item['stack']} | {item['chip']} | {item['precision']} | {item['model']} | "
                     f"{g['ep']} | {g['local']} | {g['tokens']} | {g['dispatcher']} | {g['ratio']:.3f} | "
                     f"{layer['wall']:.2f} / {layer['host']:.2f} / {layer['compute']:.2f} / {layer['ep']:.2f} | "
                     f"{_ms(g['unexplained_ms'])} | {_ms(g['per_expert_ms'])} | {stated} |")
    write_atomic(REPORT, "\n".join(lines) + "\n")
    print(f"written: {REPORT.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()

"""Sim2Train plan search: the training space as a search problem, and the search result (JSON contract)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np

from windtunnel.search.runner import SearchState, ranked, run_search
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.plan import parse_plan, validate_plan
from windtunnel.train.screen import Screen
from windtunnel.train.space import SearchSpace, ShardKey, cost_shard, fixed_text, prune, refine

RESULT_KEYS = ("step_time_s", "tokens_per_s", "tokens_per_s_per_device", "mfu", "hfu", "model_tflops_per_device",
               "peak_memory_bytes", "memory_capacity_bytes", "feasible", "infeasible_reason", "breakdown")


def _shard_task(item: tuple[SearchSpace, ShardKey]):
    space, key = item
    return key, cost_shard(space, key)


class _RefineTask:
    """Picklable callable: plan string -> the engine's result as a plain dict."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space

    def __call__(self, plan: str) -> dict:
        result = refine(self.space, parse_plan(plan))
        data = result.to_json_dict()
        return {"validated_plan": data["plan"], **{key: data[key] for key in RESULT_KEYS}}


class TrainingProblem:
    """The Sim2Train plan space as a :class:`windtunnel.search.runner.Problem`."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.screen_model = Screen(space)
        self.total = space.total
        self.capacity = space.cluster.chip.hbm_bytes

    def fingerprint(self) -> str:
        return self.space.fingerprint()

    def chunk(self, start: int, stop: int) -> dict[str, np.ndarray]:
        return self.space.chunk(start, stop)

    def prune(self, chunk):
        return prune(self.space, chunk)

    def prepare(self, chunk, backend) -> None:
        keys, _ = self.screen_model.shard_keys(chunk)
        missing = self.screen_model.missing(keys)
        if missing:
            costs = dict(backend.map(_shard_task, [(self.space, key) for key in missing]))
            self.screen_model.add_shards(costs)

    def screen(self, chunk):
        keys, inverse = self.screen_model.shard_keys(chunk)
        ids = np.array([self.screen_model.ids[k] for k in keys], dtype=np.int64)[inverse]
        seconds, memory = self.screen_model.evaluate(chunk, ids)
        return seconds, memory, memory <= self.capacity

    def label(self, chunk, index: int) -> str:
        row = {key: value[index] for key, value in chunk.items()}
        return self.space.plan_of(row).to_string()

    def cell(self, chunk) -> np.ndarray:
        return (np.log2(chunk["tp"]).astype(np.int64) * 1000 + chunk["pp"]).astype(np.int64)

    def refine_task(self):
        return _RefineTask(self.space)


def search_training(space: SearchSpace, backend: Any, *, top: int = 20, refine_count: int = 32,
                    baseline: str | None = None, state_path: Path | None = None, resume: bool = False,
                    progress=None, stop_after_refined: int | None = None) -> dict:
    """Run the plan search and return the result document (the `train search --json` contract)."""
    if refine_count < 1:
        raise WindtunnelError(f"Field 'refine' must be at least 1, got {refine_count}.", field="refine")
    from windtunnel.specs.bounds import MAX_MICRO_BATCHES, MAX_SEQ_LEN, check_whole

    check_whole("refine", refine_count, 1, 100_000)
    check_whole("top", top, 1, 100_000)
    check_whole("seq_len", space.seq_len, 1, MAX_SEQ_LEN, what=" tokens")
    check_whole("global_batch", space.global_batch, 1, MAX_MICRO_BATCHES * space.cluster.devices,
                what=f" sequences ({MAX_MICRO_BATCHES:,} micro-batches per data-parallel rank)")
    problem = TrainingProblem(space)
    baseline_plan = parse_plan(baseline_text(baseline)) if baseline else None
    if baseline_plan is not None:
        # The baseline runs in the searched plans' precisions and issue mode unless it says otherwise.
        unstated = {"precision": space.precision, "cuda_graphs": space.cuda_graphs, "grads": space.grads,
                    "moments": space.moments, "dispatcher": space.dispatcher, "fp8_recipe": space.fp8_recipe,
                    **space.fixed_fields}
        baseline_plan = baseline_plan.model_copy(update={key: value for key, value in unstated.items()
                                                         if key not in baseline_plan.model_fields_set})
        # Checked before the search starts: a bad baseline must not cost a whole search.
        try:
            validate_plan(baseline_plan, space.model, space.cluster.devices, space.seq_len, space.global_batch)
        except WindtunnelError as exc:
            raise WindtunnelError(f"Field 'baseline' ({baseline}): {exc}", field="baseline") from None
    state = run_search(problem, backend, refine=refine_count, capacity_bytes=problem.capacity,
                       state_path=state_path, resume=resume, progress=progress, stop_after_refined=stop_after_refined)
    return build_document(space, state, top=top, baseline_plan=baseline_plan)


def baseline_text(baseline: str) -> str:
    """``--baseline``: a plan string, or a file holding one (a `train search --json` output or its plans.csv:
    the best plan; a plain text file: its first line)."""
    path = Path(baseline)
    if "=" in baseline or not path.is_file():
        return baseline
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix.lower() == ".json":
        import json

        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise WindtunnelError(f"Field 'baseline' is the file '{baseline}', which is not valid JSON ({exc}).",
                                  field="baseline") from None
        plan = (doc.get("plans") or [{}])[0].get("plan") if isinstance(doc, dict) and "plans" in doc else (
            doc.get("plan") if isinstance(doc, dict) else None)
    elif path.suffix.lower() == ".csv":
        import csv
        import io

        row = next(csv.DictReader(io.StringIO(text)), None) or {}
        plan = row.get("plan")
    else:
        plan = next((line.strip() for line in text.splitlines() if line.strip()), None)
    if not plan or not isinstance(plan, str):
        raise WindtunnelError(f"Field 'baseline' is the file '{baseline}', which holds no plan; give a plan such as "
                              "tp=8,pp=4 or a `train search --json` output / plans.csv.", field="baseline")
    return plan


def build_document(space: SearchSpace, state: SearchState, *, top: int, baseline_plan=None) -> dict:
    """The JSON document of a finished search."""
    plans = ranked(state)
    capacity = space.cluster.chip.hbm_bytes
    screen_estimate = {plan: est for est, plan, _ in state.shortlist + state.pareto}
    rows = []
    for rank, r in enumerate(plans, start=1):
        rows.append({
            "rank": rank, "plan": r["plan"], "step_time_s": r["step_time_s"], "tokens_per_s": r["tokens_per_s"],
            "tokens_per_s_per_device": r["tokens_per_s_per_device"], "mfu": r["mfu"],
            "peak_memory_bytes": r["peak_memory_bytes"], "memory_headroom_bytes": capacity - r["peak_memory_bytes"],
            "screen_step_time_s": screen_estimate.get(r["plan"]), "breakdown": r["breakdown"],
        })
    agreement = [abs(row["screen_step_time_s"] / row["step_time_s"] - 1) for row in rows
                 if row["screen_step_time_s"]]
    pareto = _pareto(rows)
    refined_infeasible = sum(1 for r in state.refined.values() if not r.get("feasible"))
    pruned = dict(state.pruned)
    if refined_infeasible:
        pruned["out of memory (found by the engine)"] = refined_infeasible
    document = {
        "model": space.model.id, "hardware": space.cluster.id, "chip": space.cluster.chip.id,
        "devices": space.cluster.devices, "seq_len": space.seq_len, "global_batch": space.global_batch,
        "precision": space.precision, "cuda_graphs": space.cuda_graphs, "grads": space.grads,
        "moments": space.moments, "dispatcher": space.dispatcher, "framework": space.framework,
        "fp8_recipe": space.fp8_recipe, **({"fixed": space.fixed} if space.fixed_fields else {}),
        "candidates": {"enumerated": state.enumerated, "pruned": dict(sorted(pruned.items())),
                       "screened": state.screened, "refined": len(state.refined)},
        "elapsed_s": dict(sorted(state.elapsed_s.items())),
        "plans": rows[:top],
        "pareto": pareto,
        "screen_vs_engine": {
            "median_abs_error": statistics.median(agreement) if agreement else None,
            "max_abs_error": max(agreement) if agreement else None,
            "n": len(agreement),
        },
        "heatmap_tp_pp_step_time_s": {f"tp={int(2 ** (int(k) // 1000))},pp={int(k) % 1000}": v
                                      for k, v in sorted(state.cells.items(), key=lambda kv: int(kv[0]))},
    }
    if baseline_plan is not None:
        result = _RefineTask(space)(baseline_plan.to_string())
        estimate = screen_plan(space, baseline_plan)
        best = rows[0] if rows else None
        gain = (best["tokens_per_s"] / result["tokens_per_s"] - 1.0) if best and result["tokens_per_s"] else None
        document["baseline"] = {"plan": result["validated_plan"], **{k: result[k] for k in RESULT_KEYS},
                                "gain": gain,
                                "rank_in_search": next((row["rank"] for row in rows
                                                        if row["plan"] == result["validated_plan"]), None),
                                "screen_step_time_s": estimate,
                                "screen_percentile": state.percentile_of(estimate) if estimate else None}
    return document


def screen_plan(space: SearchSpace, plan) -> float | None:
    """The screen's estimate for one plan (None when the plan is outside the space's rules)."""
    from windtunnel.specs.plan import Plan

    plan = plan if isinstance(plan, Plan) else parse_plan(plan)
    level = plan.recompute + (f":{plan.recompute_layers}" if plan.recompute == "full" and plan.recompute_layers >= 0 else "")
    pinned = SearchSpace(space.model, space.cluster, space.seq_len, space.global_batch, precision=plan.precision,
                         moe_imbalance=space.moe_imbalance, flash_attention=space.flash_attention,
                         fused_loss=space.fused_loss, cuda_graphs=plan.cuda_graphs, grads=plan.grads,
                         framework=space.framework,
                         moments=plan.moments, dispatcher=plan.dispatcher, fp8_recipe=plan.fp8_recipe,
                         fixed=fixed_text(plan),
                         choices={"tp": [plan.tp], "pp": [plan.pp], "vpp": [plan.vpp], "cp": [plan.cp], "ep": [plan.ep],
                                  "mbs": [plan.mbs], "recompute": [level], "zero": [plan.zero],
                                  "sp": [plan.sequence_parallel], "tp_overlap": [plan.tp_overlap and plan.sequence_parallel],
                                  "schedule": [plan.pipeline_schedule], "order": [plan.order]})
    if level not in pinned.values["recompute"]:
        return None
    problem = TrainingProblem(pinned)
    chunk = problem.chunk(0, 1)
    keep, _ = problem.prune(chunk)
    if not keep.all():
        return None
    from windtunnel.search.backends import LocalBackend

    problem.prepare(chunk, LocalBackend(1))
    seconds, _, _ = problem.screen(chunk)
    return float(seconds[0])


def _pareto(rows: list[dict]) -> list[dict]:
    """Refined plans on the front of tokens/s vs memory headroom (both maximised)."""
    front = []
    best_headroom = -np.inf
    for row in sorted(rows, key=lambda r: (-r["tokens_per_s"], -r["memory_headroom_bytes"], r["plan"])):
        if row["memory_headroom_bytes"] > best_headroom:
            front.append({"plan": row["plan"], "tokens_per_s": row["tokens_per_s"],
                          "memory_headroom_bytes": row["memory_headroom_bytes"], "step_time_s": row["step_time_s"]})
            best_headroom = row["memory_headroom_bytes"]
    return front

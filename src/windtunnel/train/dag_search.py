"""Plan search for an imported operator DAG (ONNX): the dimensions that apply to it, every candidate
simulated by the event engine.

A whole-model DAG has no heads, sequence or experts, so the space is tensor parallelism (powers of
two up to the first tier's size, where the DAG's sharding rules apply), pipeline parallelism (cuts of
the DAG, up to ``max_pp`` stages), the micro-batch (powers of two dividing the per-replica batch) and
ZeRO 0-3. The space is small (hundreds of plans), so there is no analytic screen: each structurally
valid candidate is simulated in full and the result has the shape of ``train search --json``
(``plans``, ``pareto``, ``candidates``). Deterministic. Units: seconds, bytes, samples per second.
"""

from __future__ import annotations

import time

from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import Cluster
from windtunnel.specs.plan import Plan
from windtunnel.train.space import _powers_of_two as _powers
from windtunnel.train.step import TrainingJob, simulate


def search_dag(spec, dag, cluster: Cluster, global_batch: int, *, precision: str = "bf16", framework: str = "megatron",
               fitted_override: dict | None = None, top: int = 20, max_pp: int = 8, max_tp: int = 8,
               zero: tuple[int, ...] = (0, 1, 2, 3), progress=None) -> dict:
    """Search tp x pp x mbs x zero for ``dag`` on ``cluster`` (global batch in samples); the JSON document."""
    started = time.perf_counter()
    devices = cluster.devices
    node = cluster.tiers[0].size or devices
    candidates, pruned = [], {}

    def drop(reason: str) -> None:
        pruned[reason] = pruned.get(reason, 0) + 1

    enumerated = 0
    for tp in _powers(min(node, max_tp)):
        for pp in _powers(max_pp):
            for mbs in _powers(global_batch):
                for z in zero:
                    enumerated += 1
                    if devices % (tp * pp):
                        drop("devices not divisible by tp*pp")
                        continue
                    dp = devices // (tp * pp)
                    if global_batch % (mbs * dp):
                        drop("global batch not divisible by mbs*dp")
                        continue
                    if pp > 1 and global_batch // (mbs * dp) < pp:
                        drop("fewer micro-batches than pipeline stages")
                        continue
                    if z and dp == 1:
                        drop("equivalent to another candidate (ZeRO with dp=1)")
                        continue
                    candidates.append(Plan(tp=tp, pp=pp, dp=dp, mbs=mbs, zero=z, sp=False, tp_overlap=False, recompute="none",
                                           precision=precision))
    if not candidates:
        raise WindtunnelError(f"No plan fits {devices} devices and a global batch of {global_batch} samples; use a "
                              "global batch divisible by the device count.", field="global_batch")
    results = []
    for index, plan in enumerate(candidates):
        job = TrainingJob(model=spec, cluster=cluster, plan=plan, seq_len=1, global_batch=global_batch, dag=dag,
                          framework=framework, fitted_override=fitted_override)
        try:
            result = simulate(job)
        except WindtunnelError as exc:  # e.g. more stages than the DAG has operators
            drop(str(exc).split(";")[0][:80])
            continue
        results.append(result)
        if progress is not None:
            progress("simulate", index + 1, len(candidates))
    capacity = cluster.chip.hbm_bytes
    feasible = [r for r in results if r.feasible]
    out_of_memory = len(results) - len(feasible)
    if out_of_memory:
        pruned["out of memory (found by the engine)"] = out_of_memory
    feasible.sort(key=lambda r: (r.step_time_s, r.peak_memory_bytes, r.plan))
    rows = [{"rank": rank, "plan": r.plan, "step_time_s": r.step_time_s, "tokens_per_s": r.tokens_per_s,
             "tokens_per_s_per_device": r.tokens_per_s_per_device, "mfu": r.mfu,
             "peak_memory_bytes": r.peak_memory_bytes, "memory_headroom_bytes": capacity - r.peak_memory_bytes,
             "screen_step_time_s": None, "breakdown": r.breakdown} for rank, r in enumerate(feasible, start=1)]
    front, best = [], float("-inf")
    for row in sorted(rows, key=lambda r: (-r["tokens_per_s"], -r["memory_headroom_bytes"], r["plan"])):
        if row["memory_headroom_bytes"] > best:
            front.append({k: row[k] for k in ("plan", "tokens_per_s", "memory_headroom_bytes", "step_time_s")})
            best = row["memory_headroom_bytes"]
    return {
        "model": spec.id, "hardware": cluster.id, "chip": cluster.chip.id, "devices": devices, "seq_len": 1,
        "global_batch": global_batch, "precision": precision, "space": "operator DAG: tp x pp x mbs x zero",
        "candidates": {"enumerated": enumerated, "pruned": dict(sorted(pruned.items())),
                       "screened": len(candidates), "refined": len(results)},
        "elapsed_s": {"simulate": time.perf_counter() - started},
        "plans": rows[:top], "pareto": front,
        "screen_vs_engine": {"median_abs_error": None, "max_abs_error": None, "n": 0},
    }

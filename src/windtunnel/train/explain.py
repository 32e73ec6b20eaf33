"""The verdict on a training plan: which resource holds the step, read off the engine's timeline.

The step's time is attributed on each pipeline rank's compute stream exactly as the step
simulation does (:func:`windtunnel.engine.attribution.attribute`, critical path by category); this
module re-reads that trace for what the step's averaged breakdown folds together:

* **bubble vs load imbalance**: a rank idles for the schedule's fill and drain, and longer when
  another stage is heavier. The least idle rank's idle time is the schedule's bubble; what other
  ranks idle beyond it is stage imbalance.
* **tensor cores vs HBM bandwidth**: the compute stream's time that disappears when the same step
  is played with unbounded HBM bandwidth is memory-bound kernel time; the rest is tensor-core (and
  launch) time.
* **MoE expert imbalance**: the compute and all-to-all time the busiest expert rank's extra tokens add
  (the step played again with balanced experts) is load imbalance too.
* **network tier and traffic kind**: each exposed communication category (TP, CP, EP, DP, PP)
  is charged to the outermost tier its group spans (where its slowest phase runs).

Shares are fractions of the step time (they sum to 1). Memory capacity is reported beside them:
headroom, or the shortfall when the plan does not fit. Units: seconds, bytes.
"""

from __future__ import annotations

from dataclasses import replace

from windtunnel.engine.attribution import attribute
from windtunnel.specs.plan import parse_plan
from windtunnel.train.placement import place_plan
from windtunnel.train.result import TrainingResult
from windtunnel.train.step import TrainingJob, simulate

GIB = float(2**30)
# Resource names of the engine's own categories; communication is named per tier (see tier_of_kind).
CATEGORY_RESOURCE = {"compute": "compute", "recompute": "recompute", "optimizer": "optimizer",
                     "host_overhead": "host", "offload": "offload", "bubble": "bubble"}
DESCRIPTIONS = {
    "compute": "tensor cores (GEMMs and attention at their compute bound, plus kernel launches)",
    "hbm_bandwidth": "HBM bandwidth (memory-bound kernels)",
    "recompute": "recomputation (forward work re-run to save activation memory)",
    "optimizer": "optimizer step",
    "host": "host issue (the device waits for kernel launches)",
    "offload": "activation offload over the host link",
    "bubble": "pipeline bubble (schedule fill and drain)",
    "imbalance": "load imbalance (pipeline stages; the busiest MoE expert rank)",
}
# Factor on HBM bandwidth that makes every kernel's memory time negligible against its compute time.
UNBOUNDED_HBM = 1e6


def tier_of_kind(job: TrainingJob, result: TrainingResult) -> dict[str, str]:
    """Traffic kind (tp, cp, ep, dp, pp) -> name of the outermost tier its group spans (groups of one
    device, which send nothing, are left out)."""
    plan = parse_plan(result.plan)
    placement = place_plan(plan, job.cluster)
    names = [tier.name for tier in job.cluster.tiers]
    dp_tier = placement.dp_outermost_tier  # sharding and HSDP replica groups, dense and expert
    tiers = {"tp": (placement.tp.size, placement.tp.outermost_tier), "cp": (placement.cp.size, placement.cp.outermost_tier),
             "ep": (placement.ep.size, placement.ep.outermost_tier),
             "dp": (max(placement.dp.size, placement.expert_dp.size, placement.dp_replica.size), dp_tier), "pp": (plan.pp, placement.pp_tier)}
    return {kind: names[tier] for kind, (size, tier) in tiers.items() if size > 1}


def resource_seconds(breakdown: dict[str, float], tiers: dict[str, str]) -> dict[str, float]:
    """The step breakdown (seconds per engine category) as seconds per resource: communication as
    ``<tier>:<kind>`` (e.g. ``scale-out:dp``), the rest under its resource name."""
    out: dict[str, float] = {}
    for category, seconds in breakdown.items():
        if category.endswith("_comm") and category[:-5] in tiers:
            name = f"{tiers[category[:-5]]}:{category[:-5]}"
        else:
            name = CATEGORY_RESOURCE.get(category, category)
        out[name] = out.get(name, 0.0) + seconds
    return out


def _rank_idle(result: TrainingResult, stages: int) -> list[float]:
    """Seconds each pipeline rank's compute stream idles with no transfer to wait on (the trace's bubble)."""
    timeline = result.trace
    by_rank: dict[str, list[int]] = {}
    for index, stream in enumerate(timeline.streams):
        by_rank.setdefault(stream.split(".", 1)[0], []).append(index)
    idle = []
    for rank in range(stages):
        parts = attribute(timeline, primary=f"r{rank}", others=(f"r{rank}.pp", f"r{rank}.dp"),
                          until=result.step_time_s, idle_label="bubble", tasks=by_rank.get(f"r{rank}", []))
        idle.append(parts.get("bubble", 0.0))
    return idle


def memory_status(result: TrainingResult) -> dict:
    """Capacity: peak and capacity per device (bytes), headroom (negative: the shortfall), the biggest item."""
    peak, capacity = result.peak_memory_bytes, result.memory_capacity_bytes
    largest = max(result.memory_breakdown.items(), key=lambda kv: kv[1])[0] if result.memory_breakdown else None
    return {"peak_memory_bytes": peak, "capacity_bytes": capacity, "headroom_bytes": capacity - peak,
            "shortfall_bytes": max(0.0, peak - capacity), "fits": result.feasible, "largest": largest,
            "breakdown": dict(result.memory_breakdown), "infeasible_reason": result.infeasible_reason}


def verdict(job: TrainingJob) -> tuple[dict, TrainingResult]:
    """The verdict document for ``job`` (without remedies) and the base result it reads."""
    result = simulate(replace(job, keep_trace=True))
    step = float(result.step_time_s)
    tiers = tier_of_kind(job, result)
    seconds = resource_seconds(result.breakdown, tiers)
    # Bubble vs stage imbalance from each rank's own idle time.
    stages = parse_plan(result.plan).pp
    idle = _rank_idle(result, stages)
    base_bubble = min(idle) if idle else 0.0
    imbalance = max(0.0, sum(idle) / max(1, len(idle)) - base_bubble)
    if imbalance > 0 and "bubble" in seconds:
        seconds["bubble"] = max(0.0, seconds["bubble"] - imbalance)
        seconds["imbalance"] = imbalance
    # MoE expert imbalance: what the busiest expert rank's extra tokens add to its compute and all-to-alls (the
    # same step played with balanced experts); it joins the stage imbalance.
    if job.model.moe and job.moe_imbalance > 1.0:
        balanced = resource_seconds(simulate(replace(job, moe_imbalance=1.0, keep_trace=False)).breakdown, tiers)
        for name in [key for key in seconds if key == "compute" or key.endswith(":ep")]:
            extra = min(seconds[name], max(0.0, seconds[name] - balanced.get(name, 0.0)))
            seconds[name] -= extra
            seconds["imbalance"] = seconds.get("imbalance", 0.0) + extra
    # Tensor cores vs HBM: the compute time that vanishes when HBM bandwidth is unbounded.
    chip = job.cluster.chip
    free = job.cluster.model_copy(update={"chip": chip.model_copy(
        update={"hbm_bandwidth": chip.hbm_bandwidth * UNBOUNDED_HBM})})
    unbounded = simulate(replace(job, cluster=free, keep_trace=False))
    raw = result.breakdown.get("compute", 0.0)
    fraction = min(1.0, max(0.0, raw - unbounded.breakdown.get("compute", 0.0)) / raw) if raw > 0 else 0.0
    compute = seconds.get("compute", 0.0)
    memory_bound = compute * fraction  # the same fraction of what is left once imbalance is taken out
    if memory_bound > 0:
        seconds["compute"] = compute - memory_bound
        seconds["hbm_bandwidth"] = memory_bound
    seconds = {key: value for key, value in seconds.items() if value > 0}
    total = sum(seconds.values()) or step
    shares = {key: value / total for key, value in sorted(seconds.items())}
    top = max(shares, key=lambda key: (shares[key], key))
    overheads = {k: v for k, v in shares.items() if k != "compute"}
    worst = max(overheads, key=lambda key: (overheads[key], key)) if overheads else top
    cluster = job.cluster
    document = {
        "model": result.model, "hardware": result.hardware, "chip": result.chip, "devices": result.devices,
        "seq_len": result.seq_len, "global_batch": result.global_batch, "framework": result.framework,
        "plan": result.plan, "feasible": result.feasible, "step_time_s": step,
        "tokens_per_s": result.tokens_per_s, "mfu": result.mfu,
        "bottleneck": {"resource": top, "share": shares[top], "seconds": seconds[top],
                       "description": describe(top)},
        "largest_overhead": {"resource": worst, "share": shares[worst], "seconds": seconds[worst],
                             "description": describe(worst)},
        "shares": shares,
        "seconds": dict(sorted(seconds.items())),
        "memory": memory_status(result),
        "tiers": {tier.name: {"link": tier.link, "bandwidth_bytes_per_s": tier.bandwidth,
                              "carries": sorted(kind for kind, name in tiers.items() if name == tier.name)}
                  for tier in cluster.tiers},
        "rank_idle_s": idle,
    }
    document["verdict"] = verdict_lines(document)
    return document, result


def describe(resource: str) -> str:
    """A resource name in words (``scale-out:dp`` -> DP traffic exposed on the scale-out tier)."""
    if ":" in resource:
        tier, kind = resource.split(":", 1)
        return f"{kind.upper()} traffic exposed on the {tier} tier"
    return DESCRIPTIONS.get(resource, resource)


def verdict_lines(document: dict) -> list[str]:
    """The verdict in words: capacity first (it decides whether the plan runs at all), then time."""
    memory = document["memory"]
    lines = []
    if not memory["fits"]:
        lines.append(f"does not fit: needs {memory['peak_memory_bytes'] / GIB:.1f} GiB per device, "
                     f"{memory['capacity_bytes'] / GIB:.1f} GiB available (short "
                     f"{memory['shortfall_bytes'] / GIB:.1f} GiB; largest item: {memory['largest']} "
                     f"{memory['breakdown'].get(memory['largest'], 0.0) / GIB:.1f} GiB)")
    else:
        lines.append(f"fits: {memory['peak_memory_bytes'] / GIB:.1f} of {memory['capacity_bytes'] / GIB:.1f} GiB "
                     f"per device ({memory['headroom_bytes'] / GIB:.1f} GiB headroom)")
    ranked = sorted(document["shares"].items(), key=lambda kv: (-kv[1], kv[0]))
    top = ", ".join(f"{name} {share:.0%}" for name, share in ranked[:4])
    lines.append(f"step {document['step_time_s']:.3g} s is held by {document['bottleneck']['resource']} "
                 f"({document['bottleneck']['description']}, {document['bottleneck']['share']:.0%}); top shares: {top}")
    worst = document["largest_overhead"]
    if worst["resource"] != document["bottleneck"]["resource"]:
        lines.append(f"largest loss: {worst['description']} ({worst['share']:.0%} of the step)")
    return lines

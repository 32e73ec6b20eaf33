"""Sensitivity of a training step to each hardware resource: the compute / bandwidth / capacity triangle.

Each resource (a what-if key, :data:`windtunnel.specs.whatif.KEYS`) is varied by a factor up and
down around the job's hardware and the step is simulated at both; the elasticity is the central
log-difference d ln(step time) / d ln(resource). A resource that buys speed (FLOP/s, bandwidths,
domain size) has elasticity <= 0; a cost (latency, host time per op) >= 0; -1 on ``flops`` is a
step entirely bound by the tensor cores. HBM capacity never changes the step time of a fixed plan,
only whether it fits: the capacity at which the plan stops fitting is its peak memory. With a
``search`` callable the best plan is re-searched at each variant (it moves with the hardware) and
the elasticity of the best step time is reported beside the fixed plan's. Units: seconds, bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.whatif import KEYS, Change, WhatIf
from windtunnel.train.step import TrainingJob, simulate
from windtunnel.train.variant import job_variant

# Resources that cost time when they grow (the rest buy speed).
COSTS = ("link_latency", "host_overhead")
# Resources varied by a whole factor (counts of devices), not by +-delta.
DISCRETE_FACTOR = {"scale_up_domain": 2.0}
# The triangle's corners: which resources each corner holds.
TRIANGLE = {"compute": ("flops", "host_overhead"),
            "bandwidth": ("hbm_bandwidth", "scale_up_bandwidth", "scale_out_bandwidth", "link_latency",
                          "scale_up_domain"),
            "capacity": ("hbm_capacity",)}


def _factors(resource: str, delta: float) -> tuple[float, float]:
    if resource in DISCRETE_FACTOR:
        step = DISCRETE_FACTOR[resource]
        return 1.0 / step, step
    return 1.0 - delta, 1.0 + delta


def _variant(job: TrainingJob, resource: str, factor: float) -> TrainingJob:
    change = Change(resource, factor=factor, text=f"{resource}=x{factor:g}")
    return job_variant(job, WhatIf((change,)))


def sensitivity(job: TrainingJob, *, delta: float = 0.1, resources: list[str] | None = None,
                search: Callable[[TrainingJob], dict | None] | None = None) -> dict:
    """Elasticities of the step time of ``job`` to each resource (the ``train sensitivity --json`` document).

    ``delta``: the relative change up and down (0 < delta < 1). ``resources``: what-if keys (default all).
    ``search``: job -> best searched result as a dict with ``step_time_s`` and ``plan`` (or None if nothing fits).
    """
    if not 0.0 < delta < 1.0:
        raise WindtunnelError(f"Field 'delta' is {delta}; give a relative change between 0 and 1 (e.g. 10%).",
                              field="delta")
    names = list(resources or KEYS)
    unknown = [name for name in names if name not in KEYS]
    if unknown:
        raise WindtunnelError(f"Unknown resource(s) {unknown} (field 'resource'); valid: {', '.join(KEYS)}.",
                              field="resource")
    job = replace(job, keep_trace=False)
    base = simulate(job)
    base_best = search(job) if search else None
    elasticities: dict[str, float | None] = {}
    searched: dict[str, float | None] = {}
    rows = []
    for name in names:
        low, high = _factors(name, delta)
        times = []
        best_times = []
        for factor in (low, high):
            try:
                variant = _variant(job, name, factor)
                result = simulate(variant)
            except WindtunnelError as exc:
                rows.append({"resource": name, "factor": factor, "error": str(exc)})
                times.append(None)
                continue
            row = {"resource": name, "factor": factor, "step_time_s": result.step_time_s,
                   "feasible": result.feasible, "peak_memory_bytes": result.peak_memory_bytes}
            if search is not None:
                best = search(variant)
                row["best_plan"] = best["plan"] if best else None
                row["best_step_time_s"] = best["step_time_s"] if best else None
                best_times.append(row["best_step_time_s"])
            rows.append(row)
            times.append(result.step_time_s)
        span = math.log(high) - math.log(low)
        elasticities[name] = (math.log(times[1]) - math.log(times[0])) / span if None not in times else None
        if search is not None:
            searched[name] = ((math.log(best_times[1]) - math.log(best_times[0])) / span
                              if len(best_times) == 2 and None not in best_times else None)
    ranked = sorted((k for k, v in elasticities.items() if v is not None), key=lambda k: (-abs(elasticities[k]), k))
    document = {
        "model": base.model, "hardware": base.hardware, "chip": base.chip, "devices": base.devices,
        "plan": base.plan, "framework": base.framework, "feasible": base.feasible, "step_time_s": base.step_time_s,
        "peak_memory_bytes": base.peak_memory_bytes, "memory_capacity_bytes": base.memory_capacity_bytes,
        "delta": delta, "elasticities": elasticities, "largest": ranked[0] if ranked else None,
        "direction": {name: ("cost" if name in COSTS else "resource") for name in names},
        "fits_down_to_capacity_bytes": base.peak_memory_bytes,
        "triangle": triangle(elasticities, searched.get("hbm_capacity")),
        "variants": rows,
    }
    if search is not None:
        document["searched"] = {"base_best_plan": base_best["plan"] if base_best else None,
                                "base_best_step_time_s": base_best["step_time_s"] if base_best else None,
                                "elasticities": searched}
    return document


def triangle(elasticities: dict[str, float | None], capacity: float | None = None) -> dict[str, float]:
    """Weights of the compute / bandwidth / capacity corners: each corner's summed |elasticity| over the total.
    A fixed plan's step does not depend on capacity (it bounds which plans run: ``fits_down_to_capacity_bytes``);
    ``capacity``, the elasticity of the re-searched best step to HBM capacity, weighs that corner when given."""
    values = dict(elasticities)
    if capacity is not None:
        values["hbm_capacity"] = capacity
    weight = {corner: sum(abs(values.get(k) or 0.0) for k in keys) for corner, keys in TRIANGLE.items()}
    total = sum(weight.values())
    return {corner: (value / total if total else 0.0) for corner, value in weight.items()}

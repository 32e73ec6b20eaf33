"""Serving: capacity availability of a deployment of identical instances, and the fraction of time its SLO
goodput stays above a target.

Each instance (``devices_per_instance`` devices) fails at the rate its devices, nodes and switches give
(planned interruptions included: they take the instance out too), is detected and restarted with the
policy's detection and restart times (a fault during recovery restarts it), and is otherwise up.
Instances fail independently and replacements are assumed available (no waiting for repair). With
``u`` instances up, the deployment serves ``min(load, u x goodput per instance)`` requests/s within the
SLO, so the goodput meets ``target`` x load while ``u >= ceil(target x load / goodput per instance)``.

The exact answer: an instance with fixed recovery time D (detection + restart) under reset semantics is
up a fraction exp(-lambda D) of the time (exponential recovery: 1 / (1 + lambda D)), and the number up
is binomial. The simulation samples every instance's faults and sweeps the count of instances down.
"""

from __future__ import annotations

import math

import numpy as np

from windtunnel.avail.events import _sorted_uniform
from windtunnel.avail.faults import FaultProfile, job_rates, load_faults
from windtunnel.avail.policy import RecoveryPolicy, parse_policy
from windtunnel.avail.sim import _ci95
from windtunnel.specs.errors import WindtunnelError


def _positive(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and 0 < value <= 1e12):
        raise WindtunnelError(f"Field '{name}' must be a positive number of at most 1e12 requests/s, got {value!r}.",
                              field=name)
    return float(value)


def serving_availability(
    *,
    instances: int,
    devices_per_instance: int,
    faults: str | FaultProfile,
    policy: str | RecoveryPolicy = "hot-spare",
    devices_per_node: int = 8,
    goodput_per_instance_rps: float = 1.0,
    load_rps: float | None = None,
    target: float = 1.0,
    horizon_s: float = 30 * 86400.0,
    replications: int = 0,
    seed: int = 0,
) -> dict:
    """Capacity availability (mean fraction of instances up) and the fraction of time the SLO goodput is at
    least ``target`` x ``load_rps`` (requests/s; default: the full deployment's goodput). Exact (binomial) and,
    with ``replications`` > 0, simulated with 95% confidence intervals over ``horizon_s`` seconds."""
    from windtunnel.specs.bounds import MAX_DEVICES, MAX_REPLICAS, check_whole

    check_whole("instances", instances, 1, MAX_REPLICAS)
    check_whole("devices-per-instance", devices_per_instance, 1, MAX_DEVICES // instances,
                what=f" ({MAX_DEVICES:,} devices in all)")
    check_whole("devices-per-node", devices_per_node, 1, MAX_DEVICES)
    check_whole("replications", replications, 0, 1_000_000)
    from scipy.stats import binom  # heavy import: only when serving is asked for

    g = _positive("goodput-per-instance", goodput_per_instance_rps)
    load = instances * g if load_rps is None else _positive("load", load_rps)
    if not 0.0 < target <= 1.0:
        raise WindtunnelError(f"Field 'target' must be in (0, 1], got {target}.", field="target")
    pol = (policy if isinstance(policy, RecoveryPolicy) else parse_policy(policy)).resolved(1)
    profile = load_faults(faults)
    rates = job_rates(profile, devices_per_instance, min(devices_per_node, devices_per_instance))
    lam = rates.failure_rate_per_s + rates.planned_rate_per_s
    recovery = float(pol.detect_s) + pol.isolate_s + float(pol.restart_s)
    exponential = pol.durations == "exponential"
    a_inst = 1.0 / (1.0 + lam * recovery) if exponential else math.exp(-lam * recovery)
    needed = min(instances, max(0, math.ceil(target * load / g - 1e-12)))
    p_ok = float(binom.sf(needed - 1, instances, a_inst)) if needed > 0 else 1.0
    out = {
        "instances": instances, "devices_per_instance": devices_per_instance, "faults": profile.id,
        "policy": pol.kind, "detect_s": pol.detect_s, "restart_s": pol.restart_s,
        "instance_failures_per_day": lam * 86400.0, "instance_availability": a_inst,
        "capacity_availability": a_inst, "instances_needed": needed, "load_rps": load,
        "goodput_per_instance_rps": g, "target": target, "fraction_time_slo_goodput_above_target": p_ok,
        "mean_instances_down": instances * (1.0 - a_inst), "method": "exact",
        "assumptions": ["instances fail independently; replacements available (no waiting for repair)",
                        "planned interruptions take an instance out like failures (restart only); job-level rates "
                        "(per: job) apply to each instance",
                        "fail-slow faults do not reduce capacity here",
                        f"recovery = detection + restart = {recovery:g} s ({pol.durations})"],
    }
    if replications > 0:
        out["simulation"] = _simulate(instances, lam, pol, needed, horizon_s, replications, seed)
    return out


def _simulate(instances: int, lam: float, pol: RecoveryPolicy, needed: int, H: float, reps: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    units = reps * instances
    counts = rng.poisson(lam * H, size=units) if lam > 0 else np.zeros(units, dtype=np.int64)
    unit, t = _sorted_uniform(rng, counts, 0.0, H)
    rec = float(pol.detect_s) + pol.isolate_s + float(pol.restart_s)
    dur = rec * rng.standard_exponential(len(t)) if pol.durations == "exponential" else np.full(len(t), rec)
    own_end = t + dur
    start = np.ones(len(t), dtype=bool)
    start[1:] = (unit[1:] != unit[:-1]) | (t[1:] >= own_end[:-1])
    last = np.ones(len(t), dtype=bool)
    last[:-1] = start[1:]
    beg, end, u_rep = t[start], np.minimum(own_end[last], H), unit[start] // instances
    span = H + 1.0
    keys = np.concatenate((u_rep * span + beg, u_rep * span + end))
    delta = np.concatenate((np.ones(len(beg)), -np.ones(len(end))))
    order = np.argsort(keys, kind="stable")
    keys, delta = keys[order], delta[order]
    down = np.cumsum(delta)
    rep_of = (keys // span).astype(np.int64)
    seg = np.diff(np.append(keys, keys[-1] if len(keys) else 0.0))
    short = (instances - down) < needed
    below = np.bincount(rep_of[short], weights=seg[short], minlength=reps)[:reps] if len(keys) else np.zeros(reps)
    down_time = np.bincount(u_rep, weights=end - beg, minlength=reps)[:reps]
    cap = 1.0 - down_time / (instances * H)
    ok = 1.0 - below / H
    return {"replications": reps, "seed": seed, "horizon_s": H, "capacity_availability": float(cap.mean()),
            "fraction_time_slo_goodput_above_target": float(ok.mean()),
            "ci95": {"capacity_availability": _ci95(cap), "fraction_time_slo_goodput_above_target": _ci95(ok)}}

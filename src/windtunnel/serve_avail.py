"""Serving availability with goodput from Sim2Infer: the fraction of time a deployment keeps its SLO under
faults, without typing a goodput per instance.

For a deployment of one or more pools (``mixed:tp=8,replicas=4`` or ``prefill:...,replicas=2;decode:...``)
and a traffic, each instance is down with the probability Sim2Availability gives (its devices' fault rates,
the policy's detection and restart; ``avail.serving``), independently. For every degraded state that
matters (up to ``max_lost`` instances lost per pool, or until the state's probability drops below 1e-9)
Sim2Infer runs the same traffic on the deployment with those replicas removed and reports its SLO
attainment and goodput. The fraction of time the SLO holds is the probability mass of the states whose
attainment reaches ``target``; the expected goodput weighs each state's goodput by its probability.
Spans two pillars, so it lives at the top of the package and calls each through its public API.
"""

from __future__ import annotations

import itertools
import math
import re

from windtunnel.specs.errors import WindtunnelError

_REPLICAS = re.compile(r"(?:^|,)\s*replicas\s*=\s*(\d+)")


def _pools(deployment: str) -> list[tuple[str, int]]:
    """(pool text, replicas) of each ``;``-separated pool of a deployment string (replicas default 1)."""
    if not isinstance(deployment, str) or deployment.endswith((".yaml", ".yml")):
        raise WindtunnelError(f"Field 'deployment' is '{deployment}'; avail serve takes a deployment string such as "
                              "mixed:tp=8,replicas=4 or prefill:ep=32,replicas=2;decode:ep=128,replicas=2.",
                              field="deployment")
    out = []
    for pool in (p.strip() for p in deployment.split(";") if p.strip()):
        if ":" not in pool.split("=", 1)[0]:
            continue  # a deployment-wide option (router=...), not a pool
        _, _, body = pool.partition(":")
        m = _REPLICAS.search(body)
        out.append((pool, int(m.group(1)) if m else 1))
    return out


def _options(deployment: str) -> list[str]:
    """The deployment-wide items of a deployment string (``router=...``), kept as given."""
    return [p.strip() for p in deployment.split(";") if p.strip() and ":" not in p.split("=", 1)[0]]


def _with_replicas(pool: str, replicas: int) -> str:
    role, _, body = pool.partition(":")
    items = [i for i in body.split(",") if i.strip() and not i.strip().startswith("replicas")]
    return f"{role}:{','.join(items + [f'replicas={replicas}'])}"


def _binom_pmf(n: int, k: int, p_down: float) -> float:
    return math.comb(n, k) * p_down ** k * (1.0 - p_down) ** (n - k)


def serve_availability(model: str, hardware: str, deployment: str, traffic: str, *, faults: str = "catalog:llama3-54day",
                       policy: str = "hot-spare", slo: str = "ttft=2s,tpot=100ms", target: float = 0.99,
                       devices_per_node: int = 8, max_lost: int = 3, seed: int = 0) -> dict:
    """Fraction of time the deployment's SLO attainment stays >= ``target`` under faults (see module docstring)."""
    from windtunnel.api import simulate_serving
    from windtunnel.avail.serving import serving_availability

    if not 0.0 < target <= 1.0:
        raise WindtunnelError(f"Field 'target' must be in (0, 1], got {target}.", field="target")
    if isinstance(max_lost, bool) or not isinstance(max_lost, int) or not 0 <= max_lost <= 100_000:
        raise WindtunnelError(f"Field 'max-lost' must be a whole number from 0 to 100,000 (instances of a pool), got "
                              f"{max_lost!r}.", field="max-lost")
    pools = _pools(deployment)
    full = simulate_serving(model, hardware, deployment, traffic, slo=slo, seed=seed)
    per_pool = []
    for (pool, n), summary in zip(pools, full.pools, strict=True):
        inst = serving_availability(instances=n, devices_per_instance=int(summary["devices_per_instance"]),
                                    faults=faults, policy=policy, devices_per_node=devices_per_node,
                                    goodput_per_instance_rps=1.0)
        p_down = 1.0 - inst["instance_availability"]
        ks = [k for k in range(0, min(n, max_lost) + 1) if k == 0 or _binom_pmf(n, k, p_down) >= 1e-9]
        per_pool.append({"pool": pool, "replicas": n, "devices_per_instance": summary["devices_per_instance"],
                         "instance_availability": inst["instance_availability"],
                         "instance_failures_per_day": inst["instance_failures_per_day"], "lost_considered": ks,
                         "p_down": p_down})
    states, ok_mass, mass, goodput_mean = [], 0.0, 0.0, 0.0
    for lost in itertools.product(*(p["lost_considered"] for p in per_pool)):
        prob = math.prod(_binom_pmf(p["replicas"], k, p["p_down"]) for p, k in zip(per_pool, lost, strict=True))
        if any(k >= p["replicas"] for p, k in zip(per_pool, lost, strict=True)):
            attainment, goodput = 0.0, 0.0
        elif not any(lost):
            attainment, goodput = full.slo_attainment, full.goodput_requests_per_s
        else:
            dep = ";".join([_with_replicas(p["pool"], p["replicas"] - k) for p, k in zip(per_pool, lost, strict=True)]
                           + _options(deployment))
            res = simulate_serving(model, hardware, dep, traffic, slo=slo, seed=seed)
            attainment, goodput = res.slo_attainment, res.goodput_requests_per_s
        meets = attainment >= target
        mass += prob
        ok_mass += prob if meets else 0.0
        goodput_mean += prob * goodput
        states.append({"instances_lost": list(lost), "probability": prob, "slo_attainment": attainment,
                       "goodput_requests_per_s": goodput, "meets_target": meets})
    tail = max(0.0, 1.0 - mass)
    return {
        "model": model, "hardware": hardware, "deployment": deployment, "traffic": full.traffic, "slo": slo,
        "faults": faults, "policy": policy, "target_slo_attainment": target, "pools": per_pool, "states": states,
        "fraction_time_slo_met": ok_mass, "fraction_time_slo_met_bounds": [ok_mass, ok_mass + tail],
        "expected_goodput_requests_per_s": goodput_mean, "fault_free_goodput_requests_per_s": full.goodput_requests_per_s,
        "offered_rate_requests_per_s": full.load.get("offered_rate"),
        "assumptions": ["instances fail independently; a failed instance is replaced after detection and restart "
                        "(no waiting for repair); the SLO is judged per degraded state in steady state (Sim2Infer "
                        "runs the whole traffic on the reduced deployment)",
                        f"states with more than {max_lost} instances lost per pool, or less likely than 1e-9, are not "
                        "simulated: their probability is the gap between the bounds",
                        *inst["assumptions"][1:]],
    }

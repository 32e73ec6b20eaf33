"""The availability question from the user's own inputs: which failure rate, detection time, restart time,
repair time, spare pool and checkpoint interval reach a target availability (and ETTR) for *this* cluster,
fault profile and policy.

Each knob is moved alone from the user's scenario (everything else as given) to the boundary where the
target is just met, by bisection on the Markov model (Richardson-extrapolated Erlang-8/16 stages for fixed
durations, exact for exponential ones). A knob that already meets the target reports how far it may
degrade; one that cannot reach it says so. The chosen point is the row that reaches the target with the
smallest relative change from the user's value (|log(new / given)|; spares as (n + 1) / (given + 1));
it is re-simulated with the step simulation, and ``meets_target`` says whether the target lies at or
below the upper end of the simulated 95% confidence interval.
"""

from __future__ import annotations

import math
from dataclasses import replace

from windtunnel.avail.faults import JobRates
from windtunnel.avail.markov import solve_markov
from windtunnel.avail.scenario import Scenario
from windtunnel.specs.errors import WindtunnelError

_ITER = 18


def scaled_rates(sc: Scenario, factor: float) -> Scenario:
    """The scenario with every fault rate (fail-stop and fail-slow) multiplied by ``factor``."""
    rates = JobRates(tuple(replace(c, rate_per_s=c.rate_per_s * factor) for c in sc.rates.stop),
                     tuple(replace(c, rate_per_s=c.rate_per_s * factor) for c in sc.rates.slow))
    return Scenario(sc.devices, sc.devices_per_node, rates, sc.policy, sc.step_time_s, sc.horizon_s, sc.profile_id,
                    sc.assumptions)


def _metrics(sc: Scenario) -> tuple[float, float]:
    """(availability, ETTR) of the Markov model, fast: exact for exponential durations, else 2 R(16) - R(8)."""
    if sc.mechanics.exponential:
        r = solve_markov(sc, 1)
        return r.availability, r.ettr
    a, b = solve_markov(sc, 8), solve_markov(sc, 16)
    return (min(1.0, 2 * b.availability - a.availability), min(1.0, 2 * b.ettr - a.ettr))


class _Goal:
    def __init__(self, availability: float, ettr: float | None) -> None:
        self.availability, self.ettr = availability, ettr

    def met(self, m: tuple[float, float]) -> bool:
        return m[0] >= self.availability and (self.ettr is None or m[1] >= self.ettr)


def _largest(f, goal: _Goal, lo: float, hi: float) -> tuple[float | None, str]:
    """Largest x in [lo, hi] (log scale) with goal met by f(x), f getting worse as x grows."""
    if not goal.met(f(lo)):
        return None, "unreachable"
    if goal.met(f(hi)):
        return hi, "met at the search bound"
    for _ in range(_ITER):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if goal.met(f(mid)) else (lo, mid)
    return lo, "boundary"


def _spares_needed(sc: Scenario, goal: _Goal) -> tuple[int | None, str]:
    def f(n: int):
        return _metrics(sc.with_policy(spares=n))

    top = sc.nodes
    if not goal.met(f(top)):
        return None, "unreachable"
    lo, hi = 0, top
    if goal.met(f(0)):
        return 0, "boundary"
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if goal.met(f(mid)) else (mid, hi)
    return hi, "boundary"


def _row(knob: str, unit: str, given: float, value, status: str, sc_at) -> dict:
    row = {"knob": knob, "unit": unit, "given": given, "value": value, "status": status}
    if value is not None:
        a, e = _metrics(sc_at(value))
        row.update(availability=a, ettr=e)
        base = (given + 1.0, value + 1.0) if knob == "spares" else (given, value)
        row["change"] = abs(math.log(base[1] / base[0])) if base[0] > 0 and base[1] > 0 else None
    return row


def availability_target(sc: Scenario, *, availability: float = 0.98, ettr: float | None = None,
                        replications: int = 100, seed: int = 0) -> dict:
    """The trade-off table for reaching ``availability`` (and ``ettr`` when given) from scenario ``sc``."""
    for name, v in (("availability", availability), ("ettr", ettr)):
        if v is not None and not 0.0 < v < 1.0:
            raise WindtunnelError(f"Field '{name}' must be a fraction between 0 and 1 (e.g. 0.98), got {v}.", field=name)
    from windtunnel.avail.sim import simulate

    goal = _Goal(availability, ettr)
    p, mech = sc.policy, sc.mechanics
    base_a, base_e = _metrics(sc)
    fail_day = sc.rates.failure_rate_per_s * 86400.0
    rows = []
    if fail_day > 0:
        x, status = _largest(lambda s: _metrics(scaled_rates(sc, s)), goal, 1e-3, 1e3)
        r = _row("failure-rate", "failures/day", fail_day, None if x is None else x * fail_day, status,
                 lambda v: scaled_rates(sc, v / fail_day))
        r["per_1000_node_days"] = None if r["value"] is None else r["value"] * 1000.0 / sc.nodes
        r["job_mtbf_s"] = None if not r["value"] else 86400.0 / r["value"]
        rows.append(r)
    for knob, attr, given in (("detection", "detect_s", float(p.detect_s)), ("restart", "restart_s", float(p.restart_s))):
        x, status = _largest(lambda v, a=attr: _metrics(sc.with_policy(**{a: v})), goal, 0.1, 1e6)
        rows.append(_row(knob, "s", given, x, status, lambda v, a=attr: sc.with_policy(**{a: v})))
    if sc.rates.hardware_rate_per_s > 0:
        x, status = _largest(lambda v: _metrics(sc.with_policy(repair_s=v)), goal, 60.0, 1e8)
        rows.append(_row("repair", "s", float(p.repair_s), x, status, lambda v: sc.with_policy(repair_s=v)))
        n, status = _spares_needed(sc, goal)
        rows.append(_row("spares", "nodes", float(p.spares), n, status, lambda v: sc.with_policy(spares=int(v))))
    rows.append(_checkpoint_row(sc, goal))
    reach = [r for r in rows if r["value"] is not None and r.get("change") is not None and r["knob"] != "checkpoint-every"]
    met_now = goal.met((base_a, base_e))
    chosen = None
    if reach:
        best = min(reach, key=lambda r: (r["change"], r["knob"]))
        point = _scenario_at(sc, best)
        sim = simulate(point, replications, seed)
        lo_a, hi_a = sim.ci95("availability")
        lo_e, hi_e = sim.ci95("ettr")
        meets = hi_a >= availability and (ettr is None or hi_e >= ettr)
        chosen = {"knob": best["knob"], "value": best["value"], "unit": best["unit"],
                  "markov_availability": best["availability"], "markov_ettr": best["ettr"],
                  "simulated_availability": sim.availability, "simulated_availability_ci95": [lo_a, hi_a],
                  "simulated_ettr": sim.ettr, "simulated_ettr_ci95": [lo_e, hi_e], "replications": replications,
                  "seed": seed, "horizon_s": sc.horizon_s, "meets_target": bool(meets)}
    from windtunnel.avail.optimize import compare_policies

    policies = [{**r, "meets_target": goal.met((r["availability"], r["ettr"]))} for r in compare_policies(sc)["rows"]]
    return {"target_availability": availability, "target_ettr": ettr, "inputs": sc.inputs(), "policies": policies,
            "baseline": {"availability": base_a, "ettr": base_e, "meets_target": met_now,
                         "checkpoint_every_s": mech.tau, "checkpoint_stall_s": mech.stall},
            "rows": rows, "chosen": chosen,
            "rule": "each knob moved alone from the given scenario to where the target is just met (Markov); the chosen "
                    "point is the smallest relative change, re-simulated",
            "assumptions": list(sc.assumptions), "warnings": sc.warnings()}


def _scenario_at(sc: Scenario, row: dict) -> Scenario:
    knob, v = row["knob"], row["value"]
    if knob == "failure-rate":
        return scaled_rates(sc, v / row["given"])
    field = {"detection": "detect_s", "restart": "restart_s", "repair": "repair_s"}.get(knob)
    return sc.with_policy(**{field: v}) if field else sc.with_policy(spares=int(v))


def _edge(ok, inside: float, outside: float) -> float:
    """The point between ``inside`` (ok) and ``outside`` (log scale) where ``ok`` stops holding, on the ok side."""
    if ok(outside):
        return outside
    for _ in range(_ITER):
        mid = math.sqrt(inside * outside)
        inside, outside = (mid, outside) if ok(mid) else (inside, mid)
    return inside


def _checkpoint_row(sc: Scenario, goal: _Goal) -> dict:
    """Checkpoint interval: the ETTR-best interval (Markov) and the range of intervals that reach the ETTR
    target (availability does not depend on it: a checkpoint stall is running time)."""
    from windtunnel.avail.optimize import markov_checkpoint_optimum

    given = sc.mechanics.tau
    best = max(markov_checkpoint_optimum(sc), sc.step_time_s)
    a_best, e_best = _metrics(sc.with_policy(checkpoint_every_s=best))
    row = {"knob": "checkpoint-every", "unit": "s", "given": given, "value": best, "availability": a_best,
           "ettr": e_best, "status": "ETTR optimum", "change": abs(math.log(best / given)),
           "ettr_at_given": _metrics(sc)[1]}
    if goal.ettr is not None:
        if e_best < goal.ettr:
            row["ettr_range_s"] = None
        else:
            def ok(t: float) -> bool:
                return _metrics(sc.with_policy(checkpoint_every_s=t))[1] >= goal.ettr

            lo = _edge(ok, best, max(sc.step_time_s, best / 1e3))
            hi = _edge(ok, best, best * 1e3)
            row["ettr_range_s"] = [lo, hi]
    return row

"""Optimisers: checkpoint interval (against Young 1974 and Daly 2006), spare pool, recovery policy, and the
failure rates and recovery times that reach an availability target (the seed's 98% on 10,000 cards)."""

from __future__ import annotations

import math

import numpy as np

from windtunnel.avail.faults import FaultComponent, FaultProfile, job_rates, single_cause_profile
from windtunnel.avail.formulas import daly_interval_s, exact_interval_s, young_interval_s
from windtunnel.avail.markov import solve_markov
from windtunnel.avail.policy import POLICY_KINDS, parse_policy
from windtunnel.avail.scenario import Scenario, make_scenario
from windtunnel.avail.sim import simulate_variants
from windtunnel.specs.errors import WindtunnelError


def _refine_peak(x: np.ndarray, y: np.ndarray) -> float:
    """Arg-max of y(x) on a log grid, refined by a parabola through the best point and its neighbours."""
    i = int(np.argmax(y))
    lo, hi = max(0, i - 3), min(len(x), i + 4)
    if hi - lo < 3:
        return float(x[i])
    lx = np.log(x[lo:hi])
    a, b, _ = np.polyfit(lx, y[lo:hi], 2)
    if a >= 0:
        return float(x[i])
    peak = -b / (2 * a)
    return float(np.exp(np.clip(peak, lx[0], lx[-1])))


def simulated_checkpoint_optimum(scenario: Scenario, replications: int, seed: int, *, points: int = 31,
                                 span: tuple[float, float] = (0.35, 2.5)) -> dict:
    """The checkpoint interval (s) that maximises the simulated ETTR: a log grid around Daly's value, every
    interval evaluated on the same sampled faults (common random numbers), the peak refined by a parabola."""
    mech = scenario.mechanics
    m = 1.0 / scenario.rates.failure_rate_per_s if scenario.rates.failure_rate_per_s > 0 else scenario.horizon_s
    center = daly_interval_s(mech.stall, m) if mech.stall > 0 else mech.tau
    grid = np.unique(np.maximum(scenario.step_time_s,
                                np.round(np.geomspace(center * span[0], center * span[1], points) / scenario.step_time_s)
                                * scenario.step_time_s))
    variants = [scenario.with_policy(checkpoint_every_s=float(t)) for t in grid]
    runs = simulate_variants(scenario, [v.mechanics for v in variants], replications, seed)
    ettr = np.array([float(np.mean(r["ettr"])) for r in runs])
    return {"simulated_optimum_s": _refine_peak(grid, ettr), "grid_s": grid.tolist(), "ettr": ettr.tolist()}


def markov_checkpoint_optimum(scenario: Scenario) -> float:
    """The checkpoint interval (s) that maximises the Markov model's useful rate while running (the time in
    recovery does not depend on the interval): scipy bounded scalar search."""
    from scipy.optimize import minimize_scalar

    rates = scenario.rates
    lam_f, lam_p = rates.failure_rate_per_s, rates.planned_rate_per_s
    base = scenario.mechanics

    def neg(tau: float) -> float:
        from dataclasses import replace

        return -replace(base, tau=tau).up_rates(lam_f, lam_p)[0]

    hi = 20.0 / lam_f if lam_f > 0 else scenario.horizon_s
    res = minimize_scalar(neg, bounds=(max(1e-3, base.stall * 1e-3), hi), method="bounded")
    return float(res.x)


def checkpoint_interval(mtbf_s: float, checkpoint_cost_s: float, restart_s: float, *, simulate: bool = False,
                        replications: int = 200, seed: int = 0, step_time_s: float = 1.0,
                        horizon_mtbfs: float = 1000.0) -> dict:
    """Young's, Daly's and the exact optimum checkpoint interval (s) for failures every ``mtbf_s`` on average,
    a blocking checkpoint of ``checkpoint_cost_s`` and a restart of ``restart_s``; with ``simulate`` also the
    optimum of the step simulation (horizon ``horizon_mtbfs`` MTBFs per replication)."""
    from windtunnel.avail.formulas import _positive
    from windtunnel.specs.bounds import MAX_REPLICATIONS, check_whole

    _positive("restart", restart_s, allow_zero=True)
    check_whole("replications", replications, 1, MAX_REPLICATIONS)
    check_whole("seed", seed, 0, 2**63 - 1)
    out = {
        "mtbf_s": mtbf_s, "checkpoint_cost_s": checkpoint_cost_s, "restart_s": restart_s,
        "young_s": young_interval_s(checkpoint_cost_s, mtbf_s), "daly_s": daly_interval_s(checkpoint_cost_s, mtbf_s),
        "exact_s": exact_interval_s(checkpoint_cost_s, mtbf_s),
    }
    if simulate:
        sc = make_scenario(8, single_cause_profile(mtbf_s),
                           parse_policy("restart-from-checkpoint", detect_s=0.0, restart_s=restart_s, spares=0,
                                        checkpoint_cost_s=checkpoint_cost_s,
                                        checkpoint_every_s=max(out["daly_s"], step_time_s)),
                           step_time_s=step_time_s, horizon_s=horizon_mtbfs * mtbf_s, devices_per_node=8)
        sim = simulated_checkpoint_optimum(sc, replications, seed)
        out["simulated_optimum_s"] = sim["simulated_optimum_s"]
        out["simulation"] = {"replications": replications, "seed": seed, "horizon_s": sc.horizon_s,
                             "step_time_s": step_time_s, "grid_s": sim["grid_s"], "ettr": sim["ettr"]}
    return out


def optimize_spares(scenario: Scenario, candidates: list[int] | None = None, tolerance: float = 1e-3) -> dict:
    """Availability and ETTR (Markov) for each spare-pool size (nodes); ``best_spares`` is the smallest pool
    whose ETTR is within ``tolerance`` (absolute) of the best."""
    if candidates is None:
        mean = sum(c.rate_per_s * c.nodes_out for c in scenario.rates.stop) * scenario.mechanics.repair
        top = min(scenario.nodes, int(math.ceil(mean + 6 * math.sqrt(mean + 1) + 8)))
        candidates = sorted({int(round(x)) for x in np.linspace(0, top, 13)} | {scenario.policy.spares or 0})
    rows = []
    for s in candidates:
        res = solve_markov(scenario.with_policy(spares=int(s)))
        rows.append({"spares": int(s), "availability": res.availability, "ettr": res.ettr,
                     "p_waiting_for_repair": res.p_waiting})
    best = max(r["ettr"] for r in rows)
    pick = min((r for r in rows if r["ettr"] >= best - tolerance), key=lambda r: r["spares"])
    return {"knob": "spares", "rows": rows, "best_spares": pick["spares"], "tolerance": tolerance}


def compare_policies(scenario: Scenario) -> dict:
    """ETTR and availability (Markov) of each recovery policy, keeping the scenario's checkpointing, spares and
    repair time and each policy's own detection and restart defaults."""
    rows = []
    keep = {"spares": scenario.policy.spares, "repair_s": scenario.policy.repair_s,
            "checkpoint_every_s": scenario.policy.checkpoint_every_s,
            "checkpoint_cost_s": scenario.policy.checkpoint_cost_s, "checkpoint_async": scenario.policy.checkpoint_async,
            "checkpoint_stall_s": scenario.policy.checkpoint_stall_s, "durations": scenario.policy.durations}
    for kind in POLICY_KINDS:
        pol = parse_policy(kind, **keep).resolved(scenario.nodes)
        sc = Scenario(scenario.devices, scenario.devices_per_node, scenario.rates, pol, scenario.step_time_s,
                      scenario.horizon_s, scenario.profile_id, scenario.assumptions)
        res = solve_markov(sc)
        rows.append({"policy": kind, "detect_s": pol.detect_s, "restart_s": pol.restart_s, "rollback": pol.rollback,
                     "availability": res.availability, "ettr": res.ettr})
    rows.sort(key=lambda r: -r["ettr"])
    return {"knob": "policy", "rows": rows, "best_policy": rows[0]["policy"]}


def _per_node_profile(per_1000_node_days: float) -> FaultProfile:
    comp = FaultComponent(component="infrastructure", per="node", per_1000_node_days=per_1000_node_days,
                          blast_radius="node", source="swept (what-if)")
    return FaultProfile(id=f"r{per_1000_node_days:g}", name="one cause per node", components={"all": comp})


def availability_target(devices: int, devices_per_node: int, *, target: float = 0.98,
                        recovery_s: tuple[float, ...] = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0),
                        rates_per_1000_node_days: tuple[float, ...] = (1.0, 2.34, 6.5, 10.0, 20.0),
                        spares: int | None = None, repair_s: float = 86400.0, step_time_s: float = 10.0) -> dict:
    """Which failure rates and recovery times reach ``target`` availability on a ``devices`` cluster (Markov,
    fixed recovery durations, hot-spare with ``spares`` nodes (default: as many as the job has, so the
    pool never limits), each failure taking one node out): for each
    recovery time (s), the highest failure rate (per 1000 node-days) that still reaches the target, and for
    each failure rate the longest recovery time that does."""
    nodes = math.ceil(devices / devices_per_node)
    if spares is None:
        spares = nodes   # enough spares: isolate failure rate and recovery time from the spare pool
    if not 0.0 < target < 1.0:
        raise WindtunnelError(f"Field 'target-availability' must be between 0 and 1, got {target}.", field="target")
    horizon = 86400.0 * 365

    def avail(rate: float, rec: float) -> float:
        sc = make_scenario(devices, _per_node_profile(rate),
                           parse_policy("hot-spare", detect_s=0.0, restart_s=rec, spares=spares, repair_s=repair_s),
                           step_time_s=step_time_s, horizon_s=horizon, devices_per_node=devices_per_node)
        return solve_markov(sc).availability

    def bisect(f, lo: float, hi: float) -> float:
        # largest x in [lo, hi] (log scale) with f(x) >= target; f decreasing
        if f(lo) < target:
            return 0.0
        if f(hi) >= target:
            return hi
        for _ in range(40):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if f(mid) >= target else (lo, mid)
        return lo

    by_recovery = [{"recovery_s": rec, "max_failures_per_1000_node_days": bisect(lambda r, rec=rec: avail(r, rec), 1e-3, 1e4)}
                   for rec in recovery_s]
    for row in by_recovery:
        r = row["max_failures_per_1000_node_days"]
        row["min_job_mtbf_s"] = 86400.0 * 1000.0 / (nodes * r) if r > 0 else None
    by_rate = [{"failures_per_1000_node_days": r, "max_recovery_s": bisect(lambda rec, r=r: avail(r, rec), 1e-2, 1e6),
                "job_mtbf_s": 86400.0 * 1000.0 / (nodes * r)} for r in rates_per_1000_node_days]
    return {"knob": "failure-rate/recovery", "target_availability": target, "devices": devices,
            "devices_per_node": devices_per_node, "nodes": nodes, "by_recovery": by_recovery, "by_rate": by_rate}


def job_rate_summary(profile: FaultProfile, devices: int, devices_per_node: int) -> dict:
    """Failures per day and per 1000 node-days of a profile for a job (for reports)."""
    rates = job_rates(profile, devices, devices_per_node)
    nodes = math.ceil(devices / devices_per_node)
    per_day = rates.failure_rate_per_s * 86400.0
    return {"failures_per_day": per_day, "failures_per_1000_node_days": per_day * 1000.0 / nodes,
            "mtbf_s": 86400.0 / per_day if per_day > 0 else None}

"""Sim2Availability engines: the vectorised step simulation against the literal step loop and the Markov
model, the published checks (Daly's optimum, the Llama 3 interruption count and ETTR band), invariants and
determinism. Targets come from validation/reliability.csv."""

from __future__ import annotations

import numpy as np
import pytest

from test_avail import daly_points, llama_unexpected
from windtunnel.avail.faults import single_cause_profile
from windtunnel.avail.markov import solve_markov
from windtunnel.avail.optimize import checkpoint_interval
from windtunnel.avail.scenario import make_scenario
from windtunnel.avail.sim import CAUSES, evaluate, sample_events, simulate, simulate_variants
from windtunnel.avail.stepref import reference_run

DAY = 86400.0
LLAMA_STATED = "restart-from-checkpoint,detect=150s,restart=5min,checkpoint-every=6min,checkpoint-cost=5s"


def no_slow_profile(tmp_path):
    """The Llama 3 profile without its fail-slow class (so the step grid cannot matter)."""
    from windtunnel.avail.faults import load_faults

    prof = load_faults("catalog:llama3-54day")
    comps = {k: v for k, v in prof.components.items() if v.mode == "fail-stop"}
    return prof.model_copy(update={"components": comps, "id": "llama3-no-slow"})


# ---- the vectorised engine against the literal step loop -----------------------------------------------


@pytest.mark.parametrize("policy", [
    "restart-from-checkpoint,spares=0,repair=2h",                          # waiting for repair dominates
    "restart-from-checkpoint,spares=1,repair=6h,checkpoint-every=20min,checkpoint-cost=2min,async=true",
    "restart-from-checkpoint,durations=exponential",
])
def test_vectorised_equals_step_loop(tmp_path, policy):
    """On the same sampled faults (planned ones included), per-cause seconds match the step loop exactly."""
    sc = make_scenario(16384, no_slow_profile(tmp_path), policy, step_time_s=30, horizon_s=2 * DAY, hardware="h100-sxm")
    for seed in range(3):
        sample = sample_events(sc, 1, np.random.default_rng(seed))
        ev = evaluate(sample, sc.mechanics)
        ref = reference_run(sample, sc.mechanics, sc.step_time_s)
        for cause in CAUSES:
            assert ev.seconds[cause][0] == pytest.approx(ref[cause], abs=1e-6), (seed, cause)
        assert ev.useful[0] == pytest.approx(ref["useful"], abs=1e-6)
        assert ev.unexpected[0] == ref["unexpected"] and ev.planned[0] == ref["planned"]


def test_vectorised_close_to_step_loop_with_fail_slow():
    """With fail-slow faults the step grid moves checkpoints a little; useful time agrees within 1% on average."""
    sc = make_scenario(16384, "catalog:llama3-54day", "restart-from-checkpoint", step_time_s=30, horizon_s=2 * DAY,
                       hardware="h100-sxm")
    vec, ref = [], []
    for seed in range(6):
        sample = sample_events(sc, 1, np.random.default_rng(seed))
        vec.append(evaluate(sample, sc.mechanics).useful[0])
        ref.append(reference_run(sample, sc.mechanics, sc.step_time_s)["useful"])
    assert np.mean(vec) == pytest.approx(np.mean(ref), rel=0.01)


def test_time_by_cause_adds_up_to_horizon():
    sc = make_scenario(4096, "catalog:llama3-54day", "elastic-shrink,spares=2", step_time_s=10, horizon_s=10 * DAY,
                       hardware="h100-sxm")
    res = simulate(sc, 50, seed=3)
    total = sum(res.per_rep[c] for c in CAUSES) + res.per_rep["useful"]
    assert np.allclose(total, sc.horizon_s, rtol=1e-9)


# ---- Markov against simulation ------------------------------------------------------------------------------

SCENARIOS = [
    ("llama3", 16384, "h100-sxm", "catalog:llama3-54day", "restart-from-checkpoint", 12.0, 54 * DAY, 300),
    ("waiting", 10240, "ascend-910c", "catalog:meta-rsc1", "hot-spare,spares=8,repair=12h,durations=exponential",
     10.0, 30 * DAY, 400),
    ("elastic", 16384, "h100-sxm", "catalog:meta-rsc1", "elastic-shrink,spares=0", 10.0, 30 * DAY, 200),
    ("daly-extreme", 8, None, None, "restart-from-checkpoint,detect=0,restart=10min,checkpoint-every=9min,"
     "checkpoint-cost=5min", 1.0, 100 * 3600.0, 300),
]


@pytest.mark.parametrize("name,devices,hw,faults,policy,step,horizon,reps", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_markov_within_simulation_ci(name, devices, hw, faults, policy, step, horizon, reps):
    prof = faults if faults is not None else single_cause_profile(900.0)
    sc = make_scenario(devices, prof, policy, step_time_s=step, horizon_s=horizon, hardware=hw,
                       devices_per_node=None if hw else 8)
    mk = solve_markov(sc)
    sim = simulate(sc, reps, seed=11)
    lo, hi = sim.ci95("availability")
    assert lo <= mk.availability <= hi, (mk.availability, lo, hi)
    elo, ehi = sim.ci95("ettr")
    width = ehi - elo
    assert elo - width <= mk.ettr <= ehi + width, (mk.ettr, elo, ehi)


def test_markov_exponential_exact_with_one_phase():
    """With exponential durations the chain with m = 1 is exact: more stages change nothing."""
    sc = make_scenario(2048, "catalog:meta-rsc1", "hot-spare,spares=2,durations=exponential", step_time_s=10,
                       horizon_s=DAY, hardware="h100-sxm")
    assert solve_markov(sc).availability == pytest.approx(solve_markov(sc, phases=1).availability, rel=1e-12)


# ---- published checks --------------------------------------------------------------------------------------


def test_simulated_checkpoint_optimum_within_10pct_of_daly():
    """The step simulation's optimum interval lands within 10% of Daly's three published values."""
    for m_min, published in daly_points():
        r = checkpoint_interval(m_min * 60.0, 300.0, 600.0, simulate=True, replications=100, seed=5)
        assert r["simulated_optimum_s"] / 60.0 == pytest.approx(published, rel=0.10), m_min


def test_llama3_like_interruptions_and_ettr():
    """16,384 H100, 54 days, the cause-table rates: interruptions within 15% of 419; ETTR above 90% under the
    report's stated recovery assumptions (and below it with the issue's 30 min / 60 s / 10 min example)."""
    sc = make_scenario(16384, "catalog:llama3-54day", LLAMA_STATED, step_time_s=12, horizon_s=54 * DAY,
                       hardware="h100-sxm")
    res = simulate(sc, 200, seed=1)
    assert res.mean("unexpected") == pytest.approx(llama_unexpected(), rel=0.15)
    assert res.ettr > 0.90
    slow = make_scenario(16384, "catalog:llama3-54day", "restart-from-checkpoint", step_time_s=12, horizon_s=54 * DAY,
                         hardware="h100-sxm")
    assert simulate(slow, 100, seed=1).ettr < 0.90


# ---- invariants and determinism -------------------------------------------------------------------------------


def test_more_spares_never_lower_availability():
    """Same sampled faults, growing spare pool: availability never drops, in any replication (and in the Markov
    model)."""
    sc = make_scenario(4096, "catalog:meta-rsc1", "restart-from-checkpoint,repair=2d", step_time_s=10,
                       horizon_s=20 * DAY, hardware="h100-sxm")
    pools = [0, 1, 2, 4, 8, 16]
    runs = simulate_variants(sc, [sc.with_policy(spares=s).mechanics for s in pools], 60, seed=4)
    for a, b in zip(runs, runs[1:], strict=False):
        assert np.all(b["availability"] >= a["availability"] - 1e-12)
    assert runs[-1]["availability"].mean() > runs[0]["availability"].mean()
    avail = [solve_markov(sc.with_policy(spares=s)).availability for s in pools]
    assert all(b >= a - 1e-12 for a, b in zip(avail, avail[1:], strict=False))


@pytest.mark.parametrize("field", ["restart_s", "detect_s"])
def test_shorter_recovery_never_lowers_ettr(field):
    """Same sampled faults, shorter restart (or detection): ETTR never drops, replication by replication."""
    sc = make_scenario(8192, "catalog:llama3-54day", "restart-from-checkpoint,spares=4", step_time_s=12,
                       horizon_s=14 * DAY, hardware="h100-sxm")
    values = [1200.0, 600.0, 300.0, 60.0, 5.0]
    runs = simulate_variants(sc, [sc.with_policy(**{field: v}).mechanics for v in values], 60, seed=8)
    for a, b in zip(runs, runs[1:], strict=False):
        assert np.all(b["ettr"] >= a["ettr"] - 1e-12)
    ettr = [solve_markov(sc.with_policy(**{field: v})).ettr for v in values]
    assert all(b >= a for a, b in zip(ettr, ettr[1:], strict=False))


def test_same_seed_same_numbers():
    sc = make_scenario(4096, "catalog:llama3-54day", "hot-spare", step_time_s=10, horizon_s=7 * DAY,
                       hardware="h100-sxm")
    a, b, c = simulate(sc, 40, seed=9), simulate(sc, 40, seed=9), simulate(sc, 40, seed=10)
    for key in a.per_rep:
        assert np.array_equal(a.per_rep[key], b.per_rep[key])
    assert not np.array_equal(a.per_rep["ettr"], c.per_rep["ettr"])


def test_failure_rate_scale_lowers_ettr():
    """Doubling every fault rate lowers availability and ETTR (Markov)."""
    base = make_scenario(4096, "catalog:llama3-54day", "restart-from-checkpoint", step_time_s=10, horizon_s=DAY,
                         hardware="h100-sxm")
    worse = make_scenario(4096, "catalog:llama3-54day", "restart-from-checkpoint", step_time_s=10, horizon_s=DAY,
                          hardware="h100-sxm", rate_scale=2.0)
    b, w = solve_markov(base), solve_markov(worse)
    assert w.availability < b.availability and w.ettr < b.ettr

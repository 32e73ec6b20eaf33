"""The Ascend CloudMatrix fault profile: published MTBF per supernode, fail-slow optical links, and the spare pool
that Huawei's 98% availability needs under process-level recovery."""

from windtunnel.avail.faults import job_rates, load_faults
from windtunnel.avail.markov import solve_markov
from windtunnel.avail.scenario import make_scenario


def test_supernode_mtbf_and_classes():
    prof = load_faults("catalog:ascend-cloudmatrix")
    rates = job_rates(prof, 384, 8)  # one CloudMatrix384 supernode
    hw = next(c for c in rates.stop if c.name == "supernode-hardware")
    assert abs(hw.rate_per_s * 86400 - 1.0) < 1e-9 and hw.nodes_out == 1
    assert any(c.name == "optical-link-masked" for c in rates.slow)
    assert all(c.source for c in prof.components.values())


def test_process_level_recovery_reaches_98_percent_with_enough_spares():
    def avail(policy):
        sc = make_scenario(10240, "catalog:ascend-cloudmatrix", policy, step_time_s=10.0, horizon_s=30 * 86400.0,
                           hardware="ascend-910c")
        return solve_markov(sc).availability

    assert avail("hot-spare,detect=10s,restart=30s,spares=64") > 0.98
    assert avail("hot-spare,detect=10s,restart=30s,spares=8") < 0.9   # waiting for repairs
    assert avail("restart-from-checkpoint,restart=10min,spares=64") < 0.9


def test_fail_slow_eviction_is_a_policy_choice():
    from windtunnel.avail.sim import simulate

    def run(policy):
        sc = make_scenario(10240, "catalog:ascend-cloudmatrix", policy, step_time_s=10.0, horizon_s=20 * 86400.0,
                           hardware="ascend-910c")
        return sc, solve_markov(sc)

    _, keep_fast = run("hot-spare,spares=64")
    sc, evict_fast = run("hot-spare,spares=64,evict-slow=5min")
    _, keep_slow = run("restart-from-checkpoint,spares=64")
    _, evict_slow = run("restart-from-checkpoint,spares=64,evict-slow=5min")
    assert evict_fast.ettr > keep_fast.ettr          # 30 s restarts: evicting stragglers pays
    assert evict_slow.ettr < keep_slow.ettr          # 10 min restarts: it does not
    assert evict_fast.planned_per_day > keep_fast.planned_per_day
    sim = simulate(sc, 40, 0)
    lo, hi = sim.ci95("ettr")
    assert lo - 0.003 <= evict_fast.ettr <= hi + 0.003

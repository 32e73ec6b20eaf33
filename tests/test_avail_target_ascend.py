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

"""Collective benchmark parsers (nccl-tests, hccl-tests) and the comm-parameter fit."""

from __future__ import annotations

import pytest

from conftest import DATA
from profiling_synth import hccl_log, model_times, nccl_log
from windtunnel.profiling.collective_bench import (
    bus_factor,
    parse_hccl_tests,
    parse_nccl_tests,
    read_bench_logs,
)
from windtunnel.profiling.fit_collectives import fit_collectives
from windtunnel.specs.errors import WindtunnelError

LOGS = DATA / "profiling"
H100 = "NVIDIA H100 80GB HBM3"


def test_bus_factors_follow_nccl_tests_performance_md():
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_gather", 8) == pytest.approx(0.875)
    assert bus_factor("reduce_scatter", 16) == pytest.approx(15 / 16)
    assert bus_factor("send_recv", 2) == 1.0


def test_single_node_nccl_log_parses_header_devices_and_table():
    (log,) = read_bench_logs([LOGS / "all_reduce_perf_8xh100.log"])
    assert (log.tool, log.collective, log.ranks, log.hosts, log.ranks_per_host) == ("nccl-tests", "all_reduce", 8, 1, 8)
    assert log.devices == [H100]
    out_of_place = [r for r in log.rows if not r.in_place]
    assert len(out_of_place) == 16 and len(log.rows) == 32
    last = out_of_place[-1]
    assert last.size_bytes == 8589934592
    assert last.busbw == pytest.approx(last.algbw * 1.75, rel=0.01)
    assert log.avg_busbw == pytest.approx(123.305e9, rel=1e-3)


def test_two_node_log_maps_ranks_to_hosts():
    (log,) = read_bench_logs([LOGS / "all_reduce_perf_2x8xh100.log"])
    assert (log.ranks, log.hosts, log.ranks_per_host) == (16, 2, 8)


def test_old_format_without_root_column_and_collective_from_ratio(tmp_path):
    text = "\n".join([
        "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 validation: 1",
        "# Using devices",
        *(f"#   Rank  {r} Pid  {100 + r} on    box device  {r} [0x{r:02x}] Tesla V100-SXM2-32GB" for r in range(4)),
        "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error",
        "     1048576        262144     float     sum    50.00   20.97   31.46  0e+00    50.00   20.97   31.46  0e+00",
        "     4194304       1048576     float     sum   100.00   41.94   62.91  0e+00   100.00   41.94   62.91  0e+00",
        "# Avg bus bandwidth    : 47.18",
    ])
    (log,) = parse_nccl_tests(text, tmp_path / "run.log")
    assert log.collective == "all_reduce" and log.ranks == 4 and len(log.rows) == 4
    assert log.rows[0].time_s == pytest.approx(50e-6)


def test_ambiguous_collective_is_one_clear_error(tmp_path):
    times = model_times("dgx-h100", "all_gather", 8, {"comm.scale_up_efficiency": 0.8})
    text = nccl_log("all_gather", 8, 8, H100, times).replace("# Collective test starting: all_gather_perf\n", "")
    with pytest.raises(WindtunnelError, match="--collective"):
        parse_nccl_tests(text, tmp_path / "run.log")
    (log,) = parse_nccl_tests(text, tmp_path / "run.log", collective="all_gather")
    assert log.collective == "all_gather"


def test_one_file_with_several_runs_gives_one_log_per_run(tmp_path):
    hidden = {"comm.scale_up_efficiency": 0.8}
    text = "# nccl-tests version 2.17.9 nccl-headers=22903 nccl-library=22903\n" + "".join(
        nccl_log(c, 8, 8, H100, model_times("dgx-h100", c, 8, hidden)) for c in ("all_reduce", "all_gather"))
    logs = parse_nccl_tests(text, tmp_path / "sweep.log")
    assert [log.collective for log in logs] == ["all_reduce", "all_gather"]
    assert [len(log.rows) for log in logs] == [32, 32]


def test_mislabelled_collective_is_caught_by_the_bus_factor(tmp_path):
    times = model_times("dgx-h100", "all_reduce", 8, {"comm.scale_up_efficiency": 0.8})
    text = nccl_log("all_reduce", 8, 8, H100, times)
    with pytest.raises(WindtunnelError, match="bus factor"):
        parse_nccl_tests(text, tmp_path / "run.log", collective="all_gather")


def test_wrong_results_and_missing_rank_lines_are_errors(tmp_path):
    times = model_times("dgx-h100", "all_reduce", 8, {"comm.scale_up_efficiency": 0.8})
    text = nccl_log("all_reduce", 8, 8, H100, times)
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if line.split()[:1] == ["2097152"])
    tokens = lines[row].split()
    tokens[8] = "3"  # the out-of-place #wrong column
    lines[row] = " ".join(tokens)
    with pytest.raises(WindtunnelError, match="3 wrong results"):
        parse_nccl_tests("\n".join(lines), tmp_path / "bad.log")
    no_ranks = "\n".join(line for line in text.splitlines() if "Rank" not in line)
    with pytest.raises(WindtunnelError, match="Rank"):
        parse_nccl_tests(no_ranks, tmp_path / "bad.log")


def test_hccl_log_reads_ranks_from_the_mpirun_line():
    (log,) = read_bench_logs([LOGS / "all_reduce_test_8x910b.log"])
    assert (log.tool, log.collective, log.ranks, log.hosts) == ("hccl-tests", "all_reduce", 8, 1)
    assert len(log.rows) == 19
    row = log.rows[0]
    assert row.size_bytes == 8192 and row.busbw == pytest.approx(row.algbw * 1.75)


def test_hccl_log_without_rank_count_needs_ranks(tmp_path):
    text = "data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | check_result:\n8192 | 30.0 | 0.27 | success\n"
    with pytest.raises(WindtunnelError, match="--ranks"):
        parse_hccl_tests(text, tmp_path / "all_gather_test.log")
    (log,) = parse_hccl_tests(text, tmp_path / "all_gather_test.log", ranks=16, ranks_per_host=8)
    assert (log.collective, log.hosts) == ("all_gather", 2)
    failed = text.replace("success", "failed")
    with pytest.raises(WindtunnelError, match="failed"):
        parse_hccl_tests(failed, tmp_path / "all_gather_test.log", ranks=16, ranks_per_host=8)


def test_not_a_benchmark_log_is_one_clear_error(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    with pytest.raises(WindtunnelError, match="neither nccl-tests"):
        read_bench_logs([path])


def _by_name(fit) -> dict:
    return {p.name: p for p in fit.parameters}


def test_single_node_log_fits_scale_up_and_half_size_and_keeps_scale_out_prior():
    fit = fit_collectives(read_bench_logs([LOGS / "all_reduce_perf_8xh100.log"]), "h100-sxm")
    params = _by_name(fit)
    # The recorded example was generated with scale_up 0.78 and half_message_bytes 400 kB (tests/data README).
    assert params["comm.scale_up_efficiency"].value == pytest.approx(0.78, rel=0.02)
    assert params["comm.half_message_bytes"].value == pytest.approx(4.0e5, rel=0.05)
    out = params["comm.scale_out_efficiency"]
    assert not out.identified and out.value == out.prior
    assert fit.rows_used == 16
    assert 0.0 < fit.loo_median_abs_error < 0.05
    assert fit.logs[0]["busbw_max_over_line_rate"] == pytest.approx(355.67 / 450, rel=1e-3)


@pytest.mark.parametrize("hidden", [
    {"comm.scale_up_efficiency": 0.72, "comm.scale_out_efficiency": 0.91, "comm.half_message_bytes": 1.5e6},
    {"comm.scale_up_efficiency": 0.88, "comm.scale_out_efficiency": 0.62, "comm.half_message_bytes": 8.0e4},
])
def test_round_trip_recovers_a_hidden_profile_within_5_percent(tmp_path, hidden):
    paths = []
    for ranks in (8, 16):
        for collective in ("all_reduce", "all_gather"):
            path = tmp_path / f"{collective}_perf_{ranks}.log"
            path.write_text(nccl_log(collective, ranks, 8, H100,
                                     model_times("dgx-h100", collective, ranks, hidden, amplitude=0.01)))
            paths.append(path)
    fit = fit_collectives(read_bench_logs(paths), "dgx-h100")
    for name, value in hidden.items():
        assert _by_name(fit)[name].identified
        assert _by_name(fit)[name].value == pytest.approx(value, rel=0.05), name
    assert _by_name(fit)["comm.scale_up_efficiency"].stderr > 0


def test_hccl_round_trip_on_ascend(tmp_path):
    hidden = {"comm.scale_up_efficiency": 0.66, "comm.scale_out_efficiency": 0.75, "comm.half_message_bytes": 9.0e5}
    paths = []
    for ranks in (8, 16):
        path = tmp_path / f"all_reduce_test_{ranks}.log"
        path.write_text(hccl_log("all_reduce", ranks, 8, model_times("atlas-800t-a2", "all_reduce", ranks, hidden,
                                                                     sizes=[2 ** k for k in range(13, 32)])))
        paths.append(path)
    fit = fit_collectives(read_bench_logs(paths), "ascend-910b")
    for name, value in hidden.items():
        assert _by_name(fit)[name].value == pytest.approx(value, rel=0.05), name
    assert fit.chip == "ascend-910b" and fit.cluster == "atlas-800t-a2"


def test_one_two_node_log_cannot_separate_the_tiers_and_says_so():
    # One hierarchical curve fixes only its slope and knee: scale-up and scale-out efficiency trade off.
    fit = fit_collectives(read_bench_logs([LOGS / "all_reduce_perf_2x8xh100.log"]), "dgx-h100")
    params = _by_name(fit)
    assert not params["comm.scale_out_efficiency"].identified
    assert "held at the prior" in params["comm.scale_up_efficiency"].source
    assert params["comm.half_message_bytes"].identified


def test_one_rank_and_bad_domains_are_clear_errors(tmp_path):
    (log,) = read_bench_logs([LOGS / "all_reduce_perf_2x8xh100.log"])
    with pytest.raises(WindtunnelError, match="domain"):
        fit_collectives([log], "dgx-h100", domain_ranks=3)
    with pytest.raises(WindtunnelError, match="holds 8"):
        fit_collectives([log], "h100-sxm", domain_ranks=16)


def test_hccl_np_flag_and_the_guides_avg_time_spelling(tmp_path):
    text = ("mpirun --allow-run-as-root --oversubscribe -np 16 ${ASCEND_HOME_PATH}/tools/hccl_test/bin/all_reduce_test "
            "-b 2097152 -e 2097152 -d fp32 -o sum -w 0 -n 1 -c 1 -p 8\n"
            "data_size(Bytes): avg_time(us): alg_bandwidth(GB/s): check_result:\n"
            "2097152           1000.00        2.09715              success\n")
    path = tmp_path / "run.log"
    path.write_text(text)
    (log,) = read_bench_logs([path])
    assert (log.collective, log.ranks, log.ranks_per_host, log.hosts) == ("all_reduce", 16, 8, 2)
    assert log.rows[0].algbw == pytest.approx(2.09715e9) and log.rows[0].time_s == pytest.approx(1e-3)


def test_rack_scale_domains_span_hosts_and_a_wrong_domain_size_warns(tmp_path):
    # 16 GPUs on 4-GPU trays of one NVL72 rack: all NVLink. Read as 4 domains of 4 (--domain-ranks 4), the
    # InfiniBand tier would need more than its line rate: the fit says so.
    hidden = {"comm.scale_up_efficiency": 0.8, "comm.half_message_bytes": 4.0e5}
    path = tmp_path / "all_reduce_perf.log"
    path.write_text(nccl_log("all_reduce", 16, 4, "NVIDIA GB200",
                             model_times("gb200-nvl72", "all_reduce", 16, hidden, per_host=16), host_prefix="tray"))
    logs = read_bench_logs([path])
    assert logs[0].hosts == 4
    right = fit_collectives(logs, "gb200-nvl72")
    assert not right.warnings and right.logs[0]["tier"] == "nvl72"
    assert _by_name(right)["comm.scale_up_efficiency"].value == pytest.approx(0.8, rel=0.02)
    wrong = fit_collectives(logs, "gb200-nvl72", domain_ranks=4)
    assert any("--domain-ranks" in w for w in wrong.warnings)


def test_a_run_on_part_of_a_full_mesh_node_keeps_the_mesh_link_share(tmp_path):
    # hccl-tests on 4 NPUs of each 8-NPU HCCS mesh node (2 nodes): a 4-rank ring drives 3 of 7 links, as the
    # simulator charges a 4-rank group inside one Atlas 800T A2 node.
    from windtunnel.cost.collectives import collective_time, place_group
    from windtunnel.cost.efficiency import efficiency_for
    from windtunnel.profiling.fit_collectives import bench_cluster
    from windtunnel.specs.hardware import load_hardware

    path = tmp_path / "all_reduce_test.log"
    path.write_text(hccl_log("all_reduce", 8, 4, [(1 << 26, 1e-3)]))
    (log,) = read_bench_logs([path])
    cluster = bench_cluster("atlas-800t-a2", log)
    assert cluster.tiers[0].size == 4
    whole = load_hardware("atlas-800t-a2", 4)  # one node, 4 of its 8 NPUs
    eff = efficiency_for(whole.chip)
    inside = collective_time("all_reduce", 1 << 26, place_group("g", 4, 1, whole), whole, eff)
    level = place_group("g", 8, 1, cluster).levels[0]
    assert (level.joined, level.tier) == (4, 0)
    four = collective_time("all_reduce", 1 << 26, place_group("g", 4, 1, cluster), cluster, eff)
    assert four == pytest.approx(inside, rel=1e-9)

"""Synthetic measurements for the profiling tests: benchmark logs and traces generated from a hidden profile.

Used to write the recorded examples under tests/data (labelled synthetic there) and by the round-trip tests,
which fit the generated numbers back and compare with the hidden values.
"""

from __future__ import annotations

import dataclasses
import math

from windtunnel.cost.collectives import collective_time, place_group
from windtunnel.cost.efficiency import efficiency_for
from windtunnel.profiling.collective_bench import bus_factor
from windtunnel.specs.hardware import load_hardware

SIZES = [2 ** k for k in range(3, 34, 2)]  # 8 B .. 8 GiB, factor 4 (nccl-tests -b 8 -e 8G -f 4)
DTYPE = {"all_reduce": ("float", "sum"), "reduce_scatter": ("float", "sum"), "all_gather": ("float", "none"),
         "all_to_all": ("float", "none")}


def noise(i: int, amplitude: float) -> float:
    """A deterministic multiplicative wobble, as repeated runs scatter by about ``amplitude``."""
    return 1.0 + amplitude * math.sin(1.7 * i + 0.3)


def model_times(hardware: str, collective: str, ranks: int, hidden: dict[str, float], sizes=SIZES,
                amplitude: float = 0.0, per_host: int = 8) -> list[tuple[int, float]]:
    """(size bytes, time s) the collective model predicts under ``hidden`` comm values, with noise."""
    cluster = load_hardware(hardware, ranks)
    domain = min(per_host, ranks)
    cluster = cluster.model_copy(update={"tiers": [cluster.tiers[0].model_copy(update={"size": domain}),
                                                   *cluster.tiers[1:]]})
    names = {"comm.scale_up_efficiency": "scale_up", "comm.scale_out_efficiency": "scale_out",
             "comm.half_message_bytes": "half_message_bytes"}
    eff = dataclasses.replace(efficiency_for(cluster.chip), **{names[k]: v for k, v in hidden.items()})
    group = place_group("bench", ranks, 1, cluster)
    return [(size, collective_time(collective, size, group, cluster, eff) * noise(i, amplitude))
            for i, size in enumerate(sizes)]


def nccl_log(collective: str, ranks: int, per_host: int, device: str, times: list[tuple[int, float]],
             host_prefix: str = "node") -> str:
    """An nccl-tests log in the format of NVIDIA/nccl-tests 2.13 (root column, #wrong 0 / N/A)."""
    binary = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf",
              "reduce_scatter": "reduce_scatter_perf", "all_to_all": "alltoall_perf"}[collective]
    lines = [f"# Collective test starting: {binary}",
             "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 4(factor) warmup iters: 5 iters: 20 "
             "agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    for rank in range(ranks):
        host, local = divmod(rank, per_host)
        lines.append(f"#  Rank {rank:2d} Group  0 Pid {40000 + rank:6d} on {host_prefix}-{host + 1:03d} device "
                     f"{local:2d} [0x{0x18 + 16 * local:02x}] {device}")
    lines += ["#",
              "#                                                              out-of-place                       in-place",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]
    dtype, redop = DTYPE[collective]
    factor = bus_factor(collective, ranks)
    total = 0.0
    for i, (size, t) in enumerate(times):
        t_in = t * noise(i + 5, 0.01)
        cells = []
        for seconds in (t, t_in):
            algbw = size / seconds / 1e9
            cells.append(f"{seconds * 1e6:8.2f} {algbw:7.2f} {algbw * factor:7.2f} {0:6d}")
        total += size / t * factor / 1e9
        lines.append(f"{size:12d} {size // 4:13d} {dtype:>9s} {redop:>7s} {-1:7d} {cells[0]} {cells[1]}")
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {total / len(times):.4f}", "#", ""]
    return "\n".join(lines)


def hccl_log(collective: str, ranks: int, per_host: int, times: list[tuple[int, float]]) -> str:
    """An hccl-tests log as the HCCL Performance Tester guide describes its result table."""
    binary = {"all_reduce": "all_reduce_test", "all_gather": "all_gather_test",
              "reduce_scatter": "reduce_scatter_test", "all_to_all": "alltoall_test"}[collective]
    lines = [f"# mpirun -n {ranks} ./bin/{binary} -p {per_host} -b 8K -e 2G -f 2 -d fp32 -o sum",
             "the minbytes is 8192, maxbytes is 2147483648, iters is 20, warmup_iters is 5",
             "data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | check_result:"]
    for size, t in times:
        lines.append(f"{size:<17d} | {t * 1e6:<14.2f} | {size / t / 1e9:<20.5f} | success")
    return "\n".join(lines) + "\n"

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
    inner = cluster.tiers[0]
    domain = min(per_host, ranks)
    if domain != inner.size:
        update = {"size": domain}
        if inner.topology == "mesh":  # only the run's peers' links of the mesh
            update["bandwidth"] = inner.bandwidth * (domain - 1) / (inner.size - 1)
        cluster = cluster.model_copy(update={"tiers": [inner.model_copy(update=update), *cluster.tiers[1:]]})
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


# Kernel names as PyTorch profiler traces of Megatron-style steps show them (cuBLAS on Hopper, FlashAttention 2,
# ATen/Transformer Engine memory-bound kernels, NCCL, Apex fused Adam).
KERNEL_NAMES = {
    "gemm": ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off"
             "_kernel__5x_cublas",
             "nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
             "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>"
             "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8::Params)"],
    "attention.fwd": ["void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
                      "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, "
                      "false, false, true, true, false, false>(flash::Flash_fwd_params)"],
    "attention.bwd": ["void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, "
                      "2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, "
                      "cutlass::bfloat16_t> >, true, false, false, false, false, true, false, false>"
                      "(flash::Flash_bwd_params)",
                      "void flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, "
                      "false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> > >"
                      "(flash::Flash_bwd_params)"],
    "memory": ["void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
               "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
               "void transformer_engine::normalization::rmsnorm_fwd_tuned_kernel<transformer_engine::normalization::"
               "Kernel_traits<float, __nv_bfloat16, __nv_bfloat16, float, unsigned int, 4096u, 1u, 4u, 1u, 16u>>"
               "(transformer_engine::normalization::FwdParams)",
               "triton_poi_fused_mul_silu_0",
               "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
               "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
               "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
               "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
               "unsigned int, float, 4>)"],
    "optimizer": ["void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float*, float, float, "
                  "float, float, float, float, adamMode_t, float>(long, int volatile*, TensorListMetadata<4>, "
                  "AdamFunctor<float>, float*, float, float, float, float, float, float, adamMode_t, float)"],
    "comm": ["ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
             "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"],
    "other": ["void my_custom_fused_op_kernel<256>(float const*, float*, int)"],
}


def kineto_trace(kind_times: dict[str, float], steps: int = 2, gap_us: float = 2.0, jitter: float = 0.0) -> dict:
    """A Kineto chrome trace of ``steps`` steps whose kernels of each kind sum to ``kind_times`` (s per step).

    Each kind's time is split over its names (two kernels per name); every kernel has a cudaLaunchKernel on
    the host with the same correlation id, inside a ProfilerStep#N range. One warm-up kernel runs before the
    first step (it must be left out), NCCL kernels run on their own stream, and one step has a memcpy.
    ``jitter`` makes the steps alternate between (1 + jitter) and (1 - jitter) times the kind times.
    """
    events = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python3 (rank 0)"}},
              {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "GPU 0"}}]
    extra = {"optimizer": 0.004, "comm": 0.012, "other": 0.0006}
    correlation = 100
    clock = 1_000_000.0

    def kernel(name: str, start: float, dur: float, stream: int, launch_ts: float, cat: str = "kernel") -> float:
        nonlocal correlation
        correlation += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 0, "tid": 11,
                       "ts": round(launch_ts, 3), "dur": 4.1, "args": {"correlation": correlation, "cbid": 211}})
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": stream, "ts": round(start, 3),
                       "dur": round(dur, 3), "args": {"device": 0, "stream": stream, "correlation": correlation,
                                                      "grid": [132, 1, 1], "block": [384, 1, 1]}})
        return start + dur

    kernel(KERNEL_NAMES["memory"][0], clock - 500.0, 30.0, 7, clock - 520.0)  # warm-up, before any step
    for step in range(steps):
        start = clock
        compute_clock = start + 50.0
        launch = start + 5.0
        for kind in ("memory", "gemm", "attention.fwd", "attention.bwd", "optimizer", "other"):
            seconds = kind_times.get(kind, extra.get(kind, 0.0)) * (1.0 + jitter * (-1) ** step)
            names = KERNEL_NAMES[kind]
            pieces = [(name, seconds * 1e6 / (2 * len(names))) for name in names for _ in range(2)]
            for name, dur in pieces:
                compute_clock = kernel(name, compute_clock, dur, 7, launch) + gap_us
                launch += 6.0
        comm_clock = start + 200.0
        for name in KERNEL_NAMES["comm"]:
            comm_clock = kernel(name, comm_clock, extra["comm"] * 1e6 / 2, 20, launch) + 1.0
            launch += 6.0
        if step == 0:
            kernel("Memcpy HtoD (Pinned -> Device)", compute_clock, 15.0, 7, launch, cat="gpu_memcpy")
            launch += 6.0
        end = max(compute_clock, comm_clock) + 10.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 3}", "pid": 0, "tid": 11,
                       "ts": round(start, 3), "dur": round(launch - start + 2.0, 3), "args": {}})
        clock = end + 100.0
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3",
                                                      "computeMajor": 9, "computeMinor": 0}],
            "traceEvents": events}


def probe_record(chip_id: str, hidden: dict[str, float], device: str = "NVIDIA H200", amplitude: float = 0.01) -> dict:
    """A probe record whose every measurement is the cost model's time under ``hidden`` values, with noise."""
    from windtunnel.cost.compute import attention_time, gemm_time, memory_op_time
    from windtunnel.graph.ops import Op
    from windtunnel.profiling.fit_probe import attention_op
    from windtunnel.profiling.fit_trace import with_value
    from windtunnel.specs.hardware import load_chip

    chip = load_chip(chip_id)
    eff = efficiency_for(chip)
    for name, value in hidden.items():
        if not name.startswith("comm."):
            eff = with_value(eff, name, value)
    i = 0
    gemm = []
    for m, n, k in [(s, s, s) for s in (1024, 2048, 4096, 8192, 16384)] + [(16384, 4096, 14336)]:
        for dtype in ("bf16", "fp16", "fp8"):
            if dtype not in chip.peak_flops:
                continue
            i += 1
            gemm.append({"dtype": dtype, "m": m, "n": n, "k": k,
                         "seconds": gemm_time(m, n, k, dtype, chip, eff) * noise(i, amplitude)})
    attention = []
    for backend, kernel in (("flash", "fa2"), ("cudnn", "flash")):
        for seq_len in (512, 1024, 2048, 4096, 8192):
            batch = max(1, 16384 // seq_len)
            i += 1
            fwd = attention_time(attention_op(batch, 16, seq_len, 128, kernel, False), chip, eff)
            bwd = attention_time(attention_op(batch, 16, seq_len, 128, kernel, True), chip, eff)
            attention.append({"backend": backend, "batch": batch, "heads": 16, "seq_len": seq_len, "head_dim": 128,
                              "fwd_s": fwd * noise(i, amplitude), "bwd_s": bwd * noise(i + 50, amplitude)})
    memory = []
    for size in (1 << 24, 1 << 26, 1 << 28, 1 << 30, 1 << 31):
        i += 1
        seconds = memory_op_time(Op(name="copy", kind="memory", bytes_moved=2.0 * size), chip, eff)
        memory.append({"bytes": size, "seconds": seconds * noise(i, amplitude)})
    comm = {k: v for k, v in hidden.items() if k.startswith("comm.")}
    collectives = []
    if comm:
        for collective in ("all_reduce", "all_gather"):
            rows = model_times(chip_id, collective, 8, comm, sizes=[1 << k for k in range(16, 31)], amplitude=amplitude)
            collectives.append({"collective": collective, "ranks": 8, "hosts": 1,
                                "rows": [{"size_bytes": s, "time_s": t} for s, t in rows]})
    return {"windtunnel_probe": 1, "device": device, "chip": chip_id, "torch": "2.5.1+cu124 (synthetic)",
            "cuda": "12.4", "devices": 8 if comm else 1, "quick": False, "gemm": gemm, "attention": attention,
            "memory": memory, "collectives": collectives}


def trace_kind_times(job, hidden: dict[str, float], rank: int = 0) -> dict[str, float]:
    """Kernel seconds per kind of one step of ``job`` under ``hidden`` values (durations: no launch overhead)."""
    from windtunnel.profiling.fit_trace import kind_seconds, step_ops, with_value

    builder, ops = step_ops(job, rank)
    eff = dataclasses.replace(builder.eff, kernel_overhead_s=0.0)
    for name, value in hidden.items():
        eff = with_value(eff, name, value)
    return {kind: round(seconds, 6) for kind, seconds in kind_seconds(ops, builder, eff).items()}

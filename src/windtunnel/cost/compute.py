"""Compute cost: a roofline per operator with efficiency curves (GEMM shape, attention length, bandwidth).

Times are seconds; FLOPs, bytes as in :mod:`windtunnel.graph.ops`.
"""

from __future__ import annotations

import math

from windtunnel.cost.efficiency import Efficiency
from windtunnel.graph.ops import Op
from windtunnel.specs.hardware import Chip


def gemm_time(m: int, n: int, k: int, precision: str, chip: Chip, eff: Efficiency, count: int = 1,
              cast_input: bool = True) -> float:
    """Seconds for ``count`` GEMMs of (m x k) @ (k x n), launched as one grouped kernel.

    ``m`` is the operand whose rows are tokens (activations); ``k x n`` is the weight. ``cast_input``
    False: an FP8 GEMM's activation operand arrives quantised (no cast kernel before it).

    Output tiles are padded to the tile size and scheduled in waves over the compute units, so
    skinny or small GEMMs lose efficiency the way real kernels do; a short reduction length adds
    main-loop prologue/epilogue cost. The result is the max of compute and memory time.
    """
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    tiles = math.ceil(m / eff.tile_m) * math.ceil(n / eff.tile_n) * count
    waves = math.ceil(tiles / eff.compute_units)
    tile_flops = 2.0 * eff.tile_m * eff.tile_n * k
    k_factor = k / (k + eff.k_half) if eff.k_half else 1.0
    compute = waves * eff.compute_units * tile_flops / (chip.peak(precision) * eff.gemm_efficiency(precision) * k_factor)
    operand_bytes = 1.0 if precision == "fp8" else 2.0
    moved = count * (operand_bytes * (m * k + k * n) + 2.0 * m * n)
    bandwidth = chip.hbm_bandwidth * eff.memory_bandwidth
    memory = moved / bandwidth
    cast = 0.0
    if precision == "fp8" and cast_input:
        # FP8 GEMMs need their 16-bit activation operand quantised first (read 2 bytes, write 1,
        # plus the amax scan): a separate memory-bound kernel per GEMM. Weights are cast once per
        # step and cached, so they are not charged here.
        cast = count * 3.0 * m * k / bandwidth + eff.kernel_overhead_s
    return max(compute, memory) + cast + eff.kernel_overhead_s


def attention_time(op: Op, chip: Chip, eff: Efficiency) -> float:
    """Seconds for a fused (flash) attention kernel; efficiency rises with the keys each query sees.

    ``op.shape`` is (batch*heads, q_len, kv_len, head_dim[, window_keys, window_share]): a share of
    the FLOPs from sliding-window layers runs at the efficiency of the (short) window.
    """
    kv_len = op.shape[2]
    window_keys, window_share = (op.shape[4], op.shape[5]) if len(op.shape) > 5 else (0, 0.0)
    peak = chip.peak("bf16") if "bf16" in chip.peak_flops else chip.peak("fp16")
    maximum = eff.attention_max(op.kernel, op.phase == "bwd")
    if op.precision == "fp8" and "fp8" in chip.peak_flops:
        # FP8 attention (plan fp8_attention): the matmuls at the FP8 peak, at a share of the 16-bit kernel's
        # fraction of it (efficiency.yaml attention.fp8_ratio); the exponentials are unchanged.
        peak, maximum = chip.peak("fp8"), maximum * eff.attention_fp8_ratio
    # At full efficiency the kernel is bound by the slower of its matrix units (score and value
    # FLOPs) and its special-function units (one exponential per score): small heads put more
    # exponentials on each FLOP, so on chips with few SFUs (Blackwell) they bound the kernel.
    ideal = op.flops / peak
    if chip.exp_per_s and op.exponentials:
        ideal = max(ideal, op.exponentials / chip.exp_per_s)

    def efficiency(keys: float) -> float:
        return maximum * keys / (keys + eff.attention_half_length)

    compute = ideal * (1.0 - window_share) / efficiency(kv_len)
    if window_share and op.precision == "fp8" and op.phase == "bwd" and not eff.attention_fp8_bwd_skips_window:
        # A backward that does not skip the keys outside the window computes every causal score of the
        # windowed calls: half the keys per query, at the full-length efficiency (sliding windows are causal).
        causal_keys = kv_len / 2.0
        compute += ideal * window_share * causal_keys / min(float(window_keys), causal_keys) / efficiency(kv_len)
    elif window_share:
        compute += ideal * window_share / efficiency(window_keys)
    memory = op.bytes_moved / (chip.hbm_bandwidth * eff.memory_bandwidth)
    return max(compute, memory) + eff.kernel_overhead_s


def memory_op_time(op: Op, chip: Chip, eff: Efficiency) -> float:
    """Seconds for a memory-bound kernel at the achieved share of HBM bandwidth; the share of its
    traffic in unvectorized eager kernels moves at ``eff.unvectorized_bandwidth`` of that rate."""
    slowdown = 1.0 + op.unvectorized * (1.0 / eff.unvectorized_bandwidth - 1.0)
    return op.bytes_moved * slowdown / (chip.hbm_bandwidth * eff.memory_bandwidth) + eff.kernel_overhead_s


def compute_op_time(op: Op, chip: Chip, eff: Efficiency, precision: str) -> float:
    """Seconds for one compute operator (all ``count`` instances)."""
    if op.kind == "gemm":
        m, n, k = op.shape
        gemm_precision = op.precision or precision
        if gemm_precision == "fp8" and "fp8" not in chip.peak_flops:
            gemm_precision = "bf16"
        # Per-expert quantisation kernels (Op.quant_launches) each carry a kernel's fixed overhead.
        launches = op.launched_quantisations * eff.kernel_overhead_s if gemm_precision == "fp8" else 0.0
        return gemm_time(m, n, k, gemm_precision, chip, eff, count=op.count,
                         cast_input=op.phase not in op.quantized_in) + launches
    if op.kind == "attention":
        return attention_time(op, chip, eff)
    if op.kind == "memory":
        return memory_op_time(op, chip, eff)
    if op.kind in ("conv", "gather", "sparse", "bmm"):
        from windtunnel.cost.kinds import kind_op_time

        return kind_op_time(op, chip, eff, precision)
    raise ValueError(f"not a compute operator: {op.kind}")

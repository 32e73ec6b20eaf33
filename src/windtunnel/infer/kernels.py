"""Serving GEMM kernels on the shared cost core: tile autotuning and the kernel class a serving system uses.

Serving engines profile their GEMM plugins per token count and pick the tile shape that runs fastest
(TensorRT-LLM's plugin profiler, CUTLASS's and vLLM's heuristics pick 16-64-row tiles for decode-sized
token counts), so a decode GEMM of a few rows is not padded to the training kernels' 128-row tiles, and
split the reduction over several thread blocks when the output tiles leave the waves partly empty
(split-K). :func:`autotuned_gemm` evaluates ``windtunnel.cost.compute.gemm_time`` for each candidate tile
height and split (:func:`split_k_gemm`) and keeps the fastest.

Some serving systems run their MoE experts through an older kernel class than their dense layers
(catalog/deployments/serving.yaml ``systems``): :class:`ExpertKernel` says in which precision the
expert GEMMs compute, how many bytes per weight element they read, and the share of the chip's rate
those kernels reach on generations they were not written for. Times in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from windtunnel.cost.compute import gemm_time
from windtunnel.cost.efficiency import Efficiency
from windtunnel.specs.hardware import Chip

TILE_HEIGHTS = (16, 32, 64)  # row-tile candidates below the default tile (decode-sized GEMMs)
# Split-K factors the autotuner may pick when a GEMM's output tiles leave compute units idle. TensorRT-LLM's
# CUTLASS heuristics enumerate serial split-K factors 1-7 per tile (cutlass_heuristic.cpp, max_split_k); cuBLAS
# heuristics and Stream-K (Osama et al., "Stream-K: Work-centric Parallel Decomposition for Dense Matrix-Matrix
# Multiplication on the GPU", arXiv 2301.03598) split the reduction the same way to fill the waves.
SPLIT_K = (2, 4, 7)
MIN_SPLIT_DEPTH = 256  # a split keeps at least this much of the reduction (several main-loop stages)
SPLIT_MAX_WAVES = 8  # beyond this many waves of output tiles a partly filled last wave costs < 1/8: no split tried


def tile_variants(eff: Efficiency) -> tuple[Efficiency, ...]:
    """The efficiency with each candidate tile height (the default tile last)."""
    return tuple(replace(eff, tile_m=t) for t in TILE_HEIGHTS if t < eff.tile_m) + (eff,)


def split_k_gemm(m: int, n: int, k: int, precision: str, chip: Chip, eff: Efficiency, count: int = 1) -> float:
    """Seconds of ``count`` GEMMs with the fastest split of the reduction: ``s`` thread blocks per output tile
    each run k / s of it (more tiles to fill the compute units' waves, a shorter main loop), then the s fp32
    partial tiles are summed (read 4 s, write 2 bytes per output element; one more kernel)."""
    best = gemm_time(m, n, k, precision, chip, eff, count=count)
    tiles = -(-m // eff.tile_m) * -(-n // eff.tile_n) * count
    if tiles % eff.compute_units == 0 or tiles >= SPLIT_MAX_WAVES * eff.compute_units:
        return best  # full waves, or so many that the last one costs little
    bandwidth = chip.hbm_bandwidth * eff.memory_bandwidth
    for s in SPLIT_K:
        if k < s * MIN_SPLIT_DEPTH:
            break
        reduce = count * (4.0 * s + 2.0) * m * n / bandwidth + eff.kernel_overhead_s
        t = gemm_time(m, n, -(-k // s), precision, chip, eff, count=count * s) + reduce
        if precision == "fp8":  # the activation cast is one pass over m x k, not one per split
            t -= (s - 1) * (3.0 * m * (-(-k // s)) * count / bandwidth)
        if t < best:
            best = t
    return best


def autotuned_gemm(m: int, n: int, k: int, precision: str, chip: Chip, variants: tuple[Efficiency, ...],
                   count: int = 1) -> float:
    """Seconds of ``count`` (m x k) @ (k x n) GEMMs with the fastest tile height for ``m`` rows and the fastest
    split of the reduction (:func:`split_k_gemm`)."""
    if m >= variants[-1].tile_m:
        return split_k_gemm(m, n, k, precision, chip, variants[-1], count=count)
    return min(split_k_gemm(m, n, k, precision, chip, eff, count=count) for eff in variants)


def weight_only_gemm(m: int, n: int, k: int, compute_precision: str, weight_bytes: float, chip: Chip,
                     variants: tuple[Efficiency, ...], count: int = 1, rate_share: float = 1.0) -> float:
    """Seconds of ``count`` GEMMs whose weights are stored with ``weight_bytes`` per element and widened
    to ``compute_precision`` inside the kernel (weight-only quantisation): compute at that precision's
    rate times ``rate_share``, memory traffic with the stored weight size; the slower bounds it."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    base = variants[-1]
    compute_only = tuple(replace(e, memory_bandwidth=1e9, gemm_max={p: v * rate_share for p, v in e.gemm_max.items()})
                         for e in variants)
    compute = autotuned_gemm(m, n, k, compute_precision, chip, compute_only, count=count) - base.kernel_overhead_s
    moved = count * (weight_bytes * k * n + 2.0 * (m * k + m * n))
    memory = moved / (chip.hbm_bandwidth * base.memory_bandwidth)
    return max(compute, memory) + base.kernel_overhead_s


@dataclass(frozen=True)
class ExpertKernel:
    """How a serving system's MoE expert GEMMs run: compute precision (None = the deployment's), stored
    weight bytes per element (None = the compute precision's), share of the rate reached."""

    precision: str | None = None
    weight_bytes: float | None = None
    rate_share: float = 1.0
    note: str = ""


def expert_kernel(system: str | None, generation: str, precision: str) -> ExpertKernel:
    """The expert-GEMM kernel class of ``system`` on ``generation`` at deployment ``precision``: the
    ``moe_gemm`` setting of the catalog's ``systems`` entries that apply to it (the lookup rule of
    windtunnel.infer.systems); default: the dense kernels."""
    from windtunnel.infer.systems import lookup_system

    if not system:
        return ExpertKernel()
    moe = lookup_system(system).get("moe_gemm") or {}
    rule = (moe.get(generation) or {}).get(precision) or {}
    if not rule:
        return ExpertKernel()
    return ExpertKernel(rule.get("precision"), rule.get("weight_bytes"), float(rule.get("rate_share", 1.0)),
                        str(rule.get("note", "")))


# ---- decode attention kernel class ------------------------------------------------------------------------
MMHA_PRIOR_PAIRS_PER_SM_CLOCK = 0.04888  # the fit's prior (validation/inference.py PRIORS says how it was derived)
EXP_PER_SM_CLOCK = 16  # MUFU.EX2 results per clock per SM on sm80/sm90 (CUDA C++ Programming Guide): exp_per_s / 16


@dataclass(frozen=True)
class DecodeAttentionKernel:
    """The decode-attention kernel class a serving system runs for one model shape: ``mmha`` (TensorRT-LLM's
    masked multi-head attention, CUDA-core math, one thread block per query head) or ``""`` (a fused kernel
    bound by its KV reads at the chip's streaming bandwidth); ``why`` says which rule chose it."""

    kind: str = ""
    why: str = ""


def decode_attention_kernel(system: str | None, head_dim: int, q_heads_per_kv: int) -> DecodeAttentionKernel:
    """The decode-attention kernel of ``system`` for a model with ``head_dim`` and ``q_heads_per_kv`` query heads
    per KV head on one rank: the ``decode_attention`` setting of the catalog's ``systems`` entries (kernel
    ``mmha``, unless the shape is one the entry's ``xqa`` kernels cover: then the fused default)."""
    from windtunnel.infer.systems import lookup_system

    if not system:
        return DecodeAttentionKernel()
    rule = lookup_system(system).get("decode_attention") or {}
    if rule.get("kernel") != "mmha":
        return DecodeAttentionKernel()
    xqa = rule.get("xqa") or {}
    if head_dim in (xqa.get("head_dim") or ()) and q_heads_per_kv in (xqa.get("q_heads_per_kv") or ()):
        return DecodeAttentionKernel("", f"XQA kernel ({q_heads_per_kv} query heads per KV head, head dim {head_dim})")
    return DecodeAttentionKernel("mmha", f"masked MHA kernel ({q_heads_per_kv} query heads per KV head, head dim "
                                         f"{head_dim}: no XQA kernel for this shape)")


def mmha_pair_rate(chip: Chip, fitted: dict | None = None) -> float | None:
    """(query head, cached token) pairs per second the masked MHA kernel processes on ``chip``: the pairs per SM
    and clock fitted for the chip's generation (calibration.yaml ``generations.<gen>.mmha_pairs_per_sm_clock``)
    times SMs x clock, which is the chip's ``exp_per_s`` / 16 (16 exponentials per SM and clock). None where the
    generation has no fitted figure or the chip no exp_per_s: then the kernel is bounded by its KV reads only."""
    from windtunnel.infer.deployment import fitted_value

    per_clock = fitted_value(chip.id, chip.generation, "mmha_pairs_per_sm_clock", 0.0, fitted)
    if not per_clock or not chip.exp_per_s:
        return None
    return per_clock * chip.exp_per_s / EXP_PER_SM_CLOCK

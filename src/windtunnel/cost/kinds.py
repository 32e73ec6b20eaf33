"""Compute cost of the non-transformer operator kinds: convolution, gather/scatter and sparse matmul.

Each kind is a roofline like :mod:`windtunnel.cost.compute`, with its own efficiency from the
catalog's ``operator_kinds`` section of ``efficiency.yaml`` (per chip generation, with sources):

* ``conv``: a convolution run as an implicit GEMM (cuDNN, CANN): ``op.shape`` is (m, n, k) with
  m = batch x output pixels, n = output channels per group, k = input channels per group x kernel
  area, and ``op.count`` the groups. It costs a GEMM of that shape divided by the convolution's
  efficiency relative to a GEMM (im2col addressing, halo reads, small channel counts); a shape with
  too few output tiles for the chip splits its reduction (split-K), as weight gradients do.
* ``gather``: gathers, scatters, index and embedding lookups: random-access rows, memory bound at
  a share of the streaming bandwidth.
* ``bmm``: many tiny independent matmuls (per-edge contractions of a graph network, ``op.count``
  instances of (m, n, k) with m or n below a tile): batched kernels pack the instances into tiles, so
  the compute is that of one (count x m, n, k) GEMM, and every instance's operands and output are
  read and written (``op.bytes_moved``); the slower of the two.
* ``sparse``: a sparse-dense matmul (graph message passing, SpMM): ``op.flops`` = 2 x nonzeros x
  feature width, ``op.bytes_moved`` the gathered rows plus the indices; bound by the slower of its
  FLOPs at the sparse efficiency and its bytes at the gather bandwidth.

Times are seconds; FLOPs and bytes as in :mod:`windtunnel.graph.ops`.
"""

from __future__ import annotations

import math
from functools import cache

from windtunnel.cost.efficiency import Efficiency
from windtunnel.graph.ops import Op
from windtunnel.specs.hardware import Chip
from windtunnel.specs.yamlio import catalog_dir, deep_merge, read_yaml

KINDS = ("conv", "gather", "sparse", "bmm")
# Smallest reduction length a split-K slice keeps (cuDNN/CUTLASS split-K and stream-K kernels).
SPLIT_K_MIN = 256


@cache
def kind_efficiency(generation: str) -> dict[str, float]:
    """The operator-kind efficiencies of a chip generation (defaults merged with the generation's)."""
    section = (read_yaml(catalog_dir("efficiency.yaml")) or {}).get("operator_kinds") or {}
    merged = deep_merge(section.get("defaults") or {}, (section.get("generations") or {}).get(generation) or {})
    return {key: float(value) for key, value in merged.items()}


def conv_time(op: Op, chip: Chip, eff: Efficiency, precision: str) -> float:
    """Seconds for a convolution (all groups) as an implicit GEMM at the convolution's relative efficiency."""
    from windtunnel.cost.compute import gemm_time

    m, n, k = op.shape
    count = op.count
    if count > 1 and n < eff.tile_n // 4:
        # Grouped / depthwise convolutions with few channels per group run as one block-diagonal GEMM.
        n, count = n * count, 1
    tiles = math.ceil(m / eff.tile_m) * math.ceil(n / eff.tile_n) * count
    if tiles < eff.compute_units and k >= 2 * SPLIT_K_MIN:
        # Too few output tiles to fill the chip (weight gradients: m x n is the small filter, k the
        # batch x pixels): the kernel splits the reduction over the idle units (split-K).
        split = min(eff.compute_units // tiles, k // SPLIT_K_MIN)
        k, count = math.ceil(k / split), count * split
    relative = kind_efficiency(chip.generation)["conv_relative_efficiency"]
    gemm = gemm_time(m, n, k, precision, chip, eff, count=count) - eff.kernel_overhead_s
    return gemm / relative + eff.kernel_overhead_s


def gather_time(op: Op, chip: Chip, eff: Efficiency) -> float:
    """Seconds for a gather/scatter/index kernel: its bytes at the random-access share of the bandwidth."""
    share = kind_efficiency(chip.generation)["gather_bandwidth_efficiency"]
    return op.bytes_moved / (chip.hbm_bandwidth * share) + eff.kernel_overhead_s


def sparse_time(op: Op, chip: Chip, eff: Efficiency, precision: str) -> float:
    """Seconds for a sparse-dense matmul: the slower of its FLOPs and its gathered bytes."""
    kinds = kind_efficiency(chip.generation)
    peak = chip.peak(precision) if precision in chip.peak_flops else chip.peak("bf16")
    compute = op.flops / (peak * kinds["sparse_flops_efficiency"])
    memory = op.bytes_moved / (chip.hbm_bandwidth * kinds["gather_bandwidth_efficiency"])
    return max(compute, memory) + eff.kernel_overhead_s


def bmm_time(op: Op, chip: Chip, eff: Efficiency, precision: str) -> float:
    """Seconds for ``op.count`` tiny matmuls packed into tiles: packed compute or all their bytes, the slower."""
    from windtunnel.cost.compute import gemm_time

    m, n, k = op.shape
    compute = gemm_time(m * op.count, n, k, precision, chip, eff) - eff.kernel_overhead_s
    memory = op.bytes_moved / (chip.hbm_bandwidth * eff.memory_bandwidth)
    return max(compute, memory) + eff.kernel_overhead_s


def kind_op_time(op: Op, chip: Chip, eff: Efficiency, precision: str) -> float:
    """Seconds for one operator of a kind in :data:`KINDS`."""
    if op.kind == "conv":
        conv_precision = op.precision or precision
        if conv_precision not in chip.peak_flops:
            conv_precision = "bf16"
        return conv_time(op, chip, eff, conv_precision)
    if op.kind == "gather":
        return gather_time(op, chip, eff)
    if op.kind == "sparse":
        return sparse_time(op, chip, eff, precision)
    if op.kind == "bmm":
        return bmm_time(op, chip, eff, precision if precision in chip.peak_flops else "bf16")
    raise ValueError(f"not an operator kind of cost.kinds: {op.kind}")

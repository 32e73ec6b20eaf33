"""Per-device memory model: weights, gradients, optimizer states, activations, buffers, reserve.

Mixed-precision Adam as in Megatron-LM: 16-bit weights (2 bytes/param), fp32 main gradients
(4 bytes/param), fp32 master weights and two Adam moments (12 bytes/param). ZeRO stage 1 shards
the optimizer states over the data-parallel group, stage 2 also the gradients, stage 3 also the
weights (Rajbhandari et al. 2020). Units: bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WEIGHT_BYTES = 2.0
GRAD_BYTES = 4.0
OPTIMIZER_BYTES = 12.0
GRAD_BUCKET_BYTES = 2 * 40e6 * 4.0   # Megatron DDP: two in-flight 40M-element fp32 buckets
FRAMEWORK_RESERVE_BYTES = 2.0 * 2**30  # CUDA/CANN context, cuBLAS workspace, NCCL/HCCL buffers
FRAGMENTATION = 1.05                 # caching-allocator fragmentation on dynamic (activation) memory


@dataclass
class ParamShare:
    """Parameters held by one device, split by the data-parallel group that shards them."""

    dense: float = 0.0      # sharded by ZeRO over the dense DP group
    expert: float = 0.0     # sharded by ZeRO over the expert DP group
    dense_dp: int = 1
    expert_dp: int = 1

    @property
    def total(self) -> float:
        return self.dense + self.expert


@dataclass
class MemoryBreakdown:
    """Bytes per category on one device at its peak."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    buffers: float
    reserve: float
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.buffers + self.reserve

    def as_dict(self) -> dict[str, float]:
        return {
            "weights": self.weights, "gradients": self.gradients, "optimizer": self.optimizer,
            "activations": self.activations, "buffers": self.buffers, "reserve": self.reserve,
        }


def state_bytes(share: ParamShare, zero: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes for a device's parameters under a ZeRO stage."""

    def sharded(params: float, dp: int, per_param: float, stage_needed: int) -> float:
        return params * per_param / (dp if zero >= stage_needed else 1)

    weights = (sharded(share.dense, share.dense_dp, WEIGHT_BYTES, 3)
                        + sharded(share.expert, share.expert_dp, WEIGHT_BYTES, 3))
    grads = (sharded(share.dense, share.dense_dp, GRAD_BYTES, 2)
                      + sharded(share.expert, share.expert_dp, GRAD_BYTES, 2))
    optimizer = (sharded(share.dense, share.dense_dp, OPTIMIZER_BYTES, 1)
                          + sharded(share.expert, share.expert_dp, OPTIMIZER_BYTES, 1))
    return weights, grads, optimizer


def device_memory(share: ParamShare, zero: int, activation_bytes: float, buffer_bytes: float,
                  *, zero3_working_bytes: float = 0.0) -> MemoryBreakdown:
    """Peak bytes on one device: model states, activations (with fragmentation), buffers, reserve."""
    weights, grads, optimizer = state_bytes(share, zero)
    buffers = buffer_bytes + (GRAD_BUCKET_BYTES if zero < 3 else 0.0) + zero3_working_bytes
    return MemoryBreakdown(
        weights=weights, gradients=grads, optimizer=optimizer,
        activations=activation_bytes * FRAGMENTATION, buffers=buffers, reserve=FRAMEWORK_RESERVE_BYTES,
    )

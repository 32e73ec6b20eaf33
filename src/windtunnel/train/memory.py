"""Per-device memory model: weights, gradients, optimizer states, activations, buffers, reserve.

Mixed-precision Adam as in Megatron-LM: 16-bit weights (2 bytes/param), fp32 main gradients
(4 bytes/param), fp32 master weights and two Adam moments (12 bytes/param). The plan may keep the
main gradients and the moments in bf16 (2 bytes each instead of 4). ZeRO stage 1 shards the
optimizer states over the data-parallel group, stage 2 also the gradients, stage 3 also the
weights (Rajbhandari et al. 2020). Units: bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

WEIGHT_BYTES = 2.0
GRAD_BYTES = 4.0
MASTER_BYTES = 4.0
OPTIMIZER_BYTES = MASTER_BYTES + 2 * 4.0
GRAD_BUCKET_ELEMENTS = 2 * 40e6      # Megatron DDP: two in-flight 40M-element buckets
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0}
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


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of the model states: 16-bit weights, main gradients, optimizer state."""

    weights: float = WEIGHT_BYTES
    grads: float = GRAD_BYTES
    optimizer: float = OPTIMIZER_BYTES

    @classmethod
    def of(cls, grads: str = "fp32", moments: str = "fp32") -> StateBytes:
        """From the dtypes of the main gradients and of Adam's two moments (fp32 master weights)."""
        return cls(grads=DTYPE_BYTES[grads], optimizer=MASTER_BYTES + 2 * DTYPE_BYTES[moments])

    def optimizer_traffic(self, fp32_traffic: float) -> float:
        """HBM bytes per owned parameter of one Adam step, from the catalog's all-fp32 figure: 16-bit
        gradients are read with fewer bytes, 16-bit moments are read and written with fewer."""
        return fp32_traffic - (GRAD_BYTES - self.grads) - 2 * (OPTIMIZER_BYTES - self.optimizer)

    def sharded(self, dense, dense_dp, expert, expert_dp, zero) -> tuple:
        """(weights, gradients, optimizer) bytes of ``dense`` and ``expert`` parameters sharded by
        ZeRO over their data-parallel groups (stage 1: optimizer, 2: + gradients, 3: + weights).
        Scalars or numpy arrays (the plan search screens many plans at once)."""
        def part(per_param: float, stage: int):
            return per_param * (dense / np.where(zero >= stage, dense_dp, 1)
                                + expert / np.where(zero >= stage, expert_dp, 1))
        return part(self.weights, 3), part(self.grads, 2), part(self.optimizer, 1)

    def bucket_bytes(self) -> float:
        """Megatron DDP's in-flight gradient buckets (ZeRO 0-2)."""
        return GRAD_BUCKET_ELEMENTS * self.grads


def state_bytes(share: ParamShare, zero: int, states: StateBytes = StateBytes()) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes for a device's parameters under a ZeRO stage."""
    return tuple(float(b) for b in states.sharded(share.dense, share.dense_dp, share.expert, share.expert_dp, zero))


def device_memory(share: ParamShare, zero: int, activation_bytes: float, buffer_bytes: float,
                  *, zero3_working_bytes: float = 0.0, states: StateBytes = StateBytes()) -> MemoryBreakdown:
    """Peak bytes on one device: model states, activations (with fragmentation), buffers, reserve."""
    weights, grads, optimizer = state_bytes(share, zero, states)
    buffers = buffer_bytes + (states.bucket_bytes() if zero < 3 else 0.0) + zero3_working_bytes
    return MemoryBreakdown(
        weights=weights, gradients=grads, optimizer=optimizer,
        activations=activation_bytes * FRAGMENTATION, buffers=buffers, reserve=FRAMEWORK_RESERVE_BYTES,
    )

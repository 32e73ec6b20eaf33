"""Guards on what leaves the training simulator: a result that cannot be true is an InternalError, not output."""

from __future__ import annotations

from typing import TYPE_CHECKING

from windtunnel.specs.errors import InternalError, check_result
from windtunnel.train.result import TrainingResult

if TYPE_CHECKING:
    from windtunnel.train.step import TrainingJob


def check_training_result(result: TrainingResult, job: TrainingJob) -> None:
    """No result that cannot be true leaves the simulator: times finite and >= 0 (the step > 0), MFU and
    HFU in [0, 1], memory finite, and a feasible plan within its memory (else an InternalError with the job)."""
    inputs = {"model": job.model.id, "hardware": job.cluster.id, "chip": job.cluster.chip.id,
              "devices": job.cluster.devices, "seq_len": job.seq_len, "global_batch": job.global_batch,
              "plan": result.plan, "framework": result.framework}
    what = "a training step simulation returned an impossible value"
    check_result(what, inputs, times={"step_time_s": result.step_time_s, **result.breakdown},
                 shares={"mfu": result.mfu, "hfu": result.hfu},
                 finite={"tokens_per_s": result.tokens_per_s, "peak_memory_bytes": result.peak_memory_bytes,
                         **{f"memory.{k}": v for k, v in result.memory_breakdown.items()}})
    if not result.step_time_s > 0:
        raise InternalError(f"{what}: 'step_time_s' is {result.step_time_s!r}, not positive", inputs)
    if any(v < 0 for v in result.memory_breakdown.values()):
        raise InternalError(f"{what}: a memory category is negative ({result.memory_breakdown})", inputs)
    if result.feasible and result.peak_memory_bytes > result.memory_capacity_bytes:
        raise InternalError(f"{what}: feasible with {result.peak_memory_bytes:.4g} bytes per device over "
                            f"{result.memory_capacity_bytes:.4g} bytes of capacity", inputs)

"""The typed result of one simulated training step (the `train simulate --json` contract)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class TrainingResult(BaseModel):
    """One step of one plan. Times in seconds, memory in bytes, throughput in tokens/s, FLOP/s in TFLOP/s."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    model: str
    hardware: str
    chip: str
    devices: int
    seq_len: int
    global_batch: int
    plan: str
    framework: str = "megatron"
    feasible: bool
    infeasible_reason: str | None = None
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_device: float | None = None
    model_tflops_per_device: float | None = None
    hardware_tflops_per_device: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    peak_flops_name: str = ""
    peak_memory_bytes: float = 0.0
    memory_capacity_bytes: float = 0.0
    memory_breakdown: dict[str, float] = Field(default_factory=dict)
    breakdown: dict[str, float] = Field(default_factory=dict)
    micro_batches: int = 0
    model_flops_per_step: float = 0.0
    placement: dict[str, str] = Field(default_factory=dict)
    assumptions: list[str] = Field(default_factory=list)
    # How far to trust the prediction (train/uncertainty.py, from catalog/bands.yaml): the step-time (s) and
    # tokens/s band of its validation slice, and the reasons it lies outside what was measured.
    band: dict | None = None
    extrapolation: dict | None = None
    trace: Any = Field(default=None, exclude=True)
    # Per-operator events of one pipeline rank and their summary (train/op_trace.py), with trace_detail='op'.
    trace_ops: Any = Field(default=None, exclude=True)

    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (the trace is not included; see --trace)."""
        return self.model_dump(exclude={"trace", "trace_ops"})

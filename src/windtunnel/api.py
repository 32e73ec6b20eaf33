"""The public Python API: load specs, simulate a training step. The CLI is a thin layer over this."""

from __future__ import annotations

from windtunnel.specs.hardware import Cluster, load_hardware
from windtunnel.specs.model import ModelSpec, load_model
from windtunnel.specs.plan import Plan, parse_plan
from windtunnel.train.result import TrainingResult
from windtunnel.train.step import TrainingJob, simulate

__all__ = ["load_hardware", "load_model", "parse_plan", "simulate_training", "TrainingResult", "TrainingJob"]


def simulate_training(
    model: str | ModelSpec,
    hardware: str | Cluster,
    devices: int | None = None,
    *,
    seq_len: int,
    global_batch: int,
    plan: str | dict | Plan = "",
    flash_attention: bool = True,
    moe_imbalance: float = 1.1,
    keep_trace: bool = False,
) -> TrainingResult:
    """Simulate one training step.

    model: catalog id, model YAML, HF config.json path, or a ModelSpec. hardware: chip id (its
    default cluster), cluster id, cluster YAML, or a Cluster (then ``devices`` may be omitted).
    seq_len in tokens, global_batch in sequences. Returns a TrainingResult (seconds, bytes, tokens/s).
    """
    model_spec = model if isinstance(model, ModelSpec) else load_model(model)
    if isinstance(hardware, Cluster):
        cluster = hardware if devices is None else hardware.model_copy(update={"devices": devices})
    else:
        if devices is None:
            raise ValueError("devices is required when hardware is given by name")
        cluster = load_hardware(hardware, devices)
    job = TrainingJob(model=model_spec, cluster=cluster, plan=parse_plan(plan), seq_len=seq_len,
                      global_batch=global_batch, flash_attention=flash_attention, moe_imbalance=moe_imbalance,
                      keep_trace=keep_trace)
    return simulate(job)

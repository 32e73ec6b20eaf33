"""The public Python API: load specs, simulate a training step. The CLI is a thin layer over this."""

from __future__ import annotations

from pathlib import Path

from windtunnel.graph.dag import DagModel, load_dag
from windtunnel.specs.hardware import Cluster, load_hardware
from windtunnel.specs.model import ModelSpec, load_model
from windtunnel.specs.plan import Plan, parse_plan
from windtunnel.specs.yamlio import read_yaml
from windtunnel.train.result import TrainingResult
from windtunnel.train.step import TrainingJob, dag_stub_model, simulate

__all__ = ["load_hardware", "load_model", "load_dag", "parse_plan", "simulate_training", "TrainingResult", "TrainingJob"]


def resolve_model(model: str | ModelSpec | DagModel) -> tuple[ModelSpec, DagModel | None]:
    """A model argument as (ModelSpec, operator DAG or None): catalog id, model YAML, HF config.json,
    or an operator-DAG YAML (a file with a ``layer:`` list of operators)."""
    if isinstance(model, ModelSpec):
        return model, None
    if isinstance(model, DagModel):
        return dag_stub_model(model), model
    path = Path(model)
    if path.suffix in (".yaml", ".yml") and path.exists():
        doc = read_yaml(path)
        if isinstance(doc, dict) and isinstance(doc.get("layer"), list):
            dag = load_dag(path)
            return dag_stub_model(dag), dag
    return load_model(model), None


def simulate_training(
    model: str | ModelSpec | DagModel,
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

    model: catalog id, model YAML, HF config.json path, operator-DAG YAML, or a ModelSpec/DagModel. hardware: chip id (its
    default cluster), cluster id, cluster YAML, or a Cluster (then ``devices`` may be omitted).
    seq_len in tokens, global_batch in sequences. Returns a TrainingResult (seconds, bytes, tokens/s).
    """
    model_spec, dag = resolve_model(model)
    if isinstance(hardware, Cluster):
        cluster = hardware if devices is None else hardware.model_copy(update={"devices": devices})
    else:
        if devices is None:
            raise ValueError("devices is required when hardware is given by name")
        cluster = load_hardware(hardware, devices)
    job = TrainingJob(model=model_spec, cluster=cluster, plan=parse_plan(plan), seq_len=seq_len,
                      global_batch=global_batch, flash_attention=flash_attention, moe_imbalance=moe_imbalance,
                      keep_trace=keep_trace, dag=dag)
    return simulate(job)

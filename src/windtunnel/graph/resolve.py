"""A model argument as the pipeline sees it: a ModelSpec and, for operator graphs, the DAG.

Shared by every entry point that takes ``--model`` (training, forward-only serving, graph tools), so an
ONNX file, an operator-DAG YAML, a Hugging Face config or a catalog id resolve the same way everywhere.
"""

from __future__ import annotations

from pathlib import Path

from windtunnel.graph.dag import DagModel, dag_stub_model, load_dag
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.model import ModelSpec, load_model
from windtunnel.specs.yamlio import exists, read_yaml


def resolve_model(model, batch_shape: str | dict | None = None) -> tuple[ModelSpec, DagModel | None]:
    """A model argument as (ModelSpec, operator DAG or None): catalog id, model YAML, HF config.json,
    an operator-DAG YAML (a file with a ``layer:`` list of operators), or an ONNX model (``X.onnx`` or a
    shipped ``onnx:NAME``, a GraphModel) whose symbolic dimensions ``batch_shape`` binds
    (``"nodes=2048,edges=16384"`` or a dict)."""
    from windtunnel.graph.graph_model import GraphModel, onnx_path
    from windtunnel.graph.onnx_import import parse_batch_shape

    if isinstance(model, ModelSpec):
        return model, None
    if isinstance(model, DagModel):
        return dag_stub_model(model), model
    if isinstance(model, GraphModel):
        return model.stub(), model
    if onnx_path(str(model)) is not None:
        shape = batch_shape if isinstance(batch_shape, dict) else parse_batch_shape(batch_shape)
        graph = GraphModel(onnx_path(str(model)), shape)
        return graph.stub(), graph
    if batch_shape:
        raise WindtunnelError(f"Batch shape '{batch_shape}' (field 'batch_shape') binds an ONNX model's symbolic "
                              f"dimensions; model '{model}' is not an ONNX model (leave --batch-shape out).",
                              field="batch_shape")
    path = Path(model)
    if path.suffix in (".yaml", ".yml") and exists(path):
        doc = read_yaml(path)
        if isinstance(doc, dict) and isinstance(doc.get("layer"), list):
            dag = load_dag(path)
            return dag_stub_model(dag), dag
    return load_model(model), None

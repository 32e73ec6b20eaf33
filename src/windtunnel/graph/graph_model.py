"""A whole-model operator DAG (imported from ONNX) as a trainable model: bound per micro-batch,
sharded by the plan's tensor parallelism and cut into its pipeline stages.

``GraphModel(path, batch_shape)`` reads the file once; :func:`plan_graph_model` gives the step
builder the forward graphs of each pipeline stage's modules (``stage0.0``, ``stage0.1``, ...; a stage
is cut into up to 8 modules so its gradient buckets reduce beside its backward), their parameters on
one device and the bytes a stage sends to the next. Data parallelism and ZeRO then apply as to any
model. Units: FLOPs, bytes, samples (the global batch counts samples of the bound batch shape).
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from pathlib import Path

from windtunnel.graph.onnx_import import SUPPORTED, ImportedGraph, Node, import_onnx, load_onnx, symbolic_dims
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.model import ModelSpec
from windtunnel.specs.yamlio import catalog_dir, read_yaml

ONNX_PREFIX = "onnx:"
MODULES_PER_STAGE = 8


def onnx_path(model: str) -> Path | None:
    """The file of an ONNX model argument (a path ending in .onnx, or ``onnx:NAME`` of the shipped examples)."""
    if model.startswith(ONNX_PREFIX):
        name = model[len(ONNX_PREFIX):]
        path = Path(catalog_dir("models")) / "onnx" / f"{name}.onnx"
        if not path.is_file():
            shipped = sorted(p.stem for p in path.parent.glob("*.onnx"))
            raise WindtunnelError(f"Model '{model}': no shipped ONNX example '{name}'; shipped: {', '.join(shipped)}.",
                                  field="model")
        return path
    return Path(model) if model.endswith(".onnx") else None


class GraphModel:
    """An ONNX model as a whole-model operator DAG (see the module doc)."""

    def __init__(self, path: str | Path, batch_shape: dict[str, int] | None = None,
                 annotations: dict[str, str] | None = None, *, strict: bool = True) -> None:
        self.path = str(path)
        self.proto = load_onnx(path)
        self.name = self.proto.graph.name or Path(path).stem
        self.batch_shape = dict(batch_shape or {})
        if not self.batch_shape and Path(path).stem in _default_shapes():
            free = symbolic_dims(self.proto)
            self.batch_shape = {k: v for k, v in _default_shapes()[Path(path).stem].items() if k in free}
        side = Path(path).with_suffix(".parallel.yaml")
        if annotations is None and side.is_file():
            annotations = (read_yaml(side) or {}).get("tensor_parallel") or {}
        self.annotations = dict(annotations or {})
        self._bound: dict[int, ImportedGraph] = {}
        first = self.imported(1)
        if strict and first.unsupported:
            raise self.unsupported_error(first.unsupported)

    def unsupported_error(self, unsupported: list[str], source: str | None = None,
                          supported: tuple[str, ...] = SUPPORTED, label: str = "ONNX operators",
                          hint: str = "(or export with a lower-level opset)") -> WindtunnelError:
        """One clear error naming the first unsupported operator and its node (and how many more)."""
        return WindtunnelError(
            f"{source or f'ONNX model {self.path!r}'}: unsupported operator {unsupported[0]}"
            + (f" (and {len(unsupported) - 1} more: {'; '.join(unsupported[1:4])})" if len(unsupported) > 1 else "")
            + f". Supported {label}: {', '.join(supported)}. Rewrite the node with supported operators "
            f"{hint} before simulating.", field="model")

    def imported(self, micro_batch: int) -> ImportedGraph:
        """The nodes for one micro-batch of ``micro_batch`` samples (cached)."""
        if micro_batch not in self._bound:
            self._bound[micro_batch] = import_onnx(self.path, self.batch_shape, micro_batch, model=self.proto)
        return self._bound[micro_batch]

    def model_flops(self, micro_batch: int) -> float:
        """Model FLOPs of one forward of a micro-batch over the whole model (all ranks of a replica)."""
        return self.imported(micro_batch).forward_flops

    def summary(self) -> dict:
        """What `windtunnel graph show --json` prints: per sample (one of the bound batch shape)."""
        g = self.imported(1)
        kinds: dict[str, int] = {}
        for node in g.nodes:
            if node.kind != "view":
                kinds[node.kind] = kinds.get(node.kind, 0) + 1
        return {"model": self.name, "path": self.path, "batch_shape": g.bindings,
                "operators": sum(kinds.values()), "operators_by_kind": dict(sorted(kinds.items())),
                "forward_flops": g.forward_flops,
                "forward_bytes": sum(n.bytes for n in g.nodes), "saved_activation_bytes": sum(n.saved for n in g.nodes),
                "parameters": g.parameters, "parameter_bytes": g.parameter_bytes, "unsupported": g.unsupported}

    def stub(self) -> ModelSpec:
        """A ModelSpec carrying what the pipeline needs: the cuttable operators (as layers) and a width."""
        operators = sum(1 for n in self.imported(1).nodes if n.kind != "view")
        return ModelSpec(id=self.name, name=self.name, layers=max(1, operators), hidden=1, ffn_hidden=1, heads=1,
                         vocab=1, sources={"shape": f"ONNX operator graph {self.path}"})


def fuse_elementwise(nodes: list[Node]) -> list[Node]:
    """Nodes as a fusing stack runs them (Transformer Engine / Apex / NVFuser / XLA): a pointwise or
    normalisation node whose input has no other reader fuses with that input's producer, so the
    tensor between them is neither written nor read back; after a GEMM or convolution it runs in the
    epilogue (no traffic of its own beyond its other inputs)."""
    out = [copy.copy(n) for n in nodes]
    alias: dict[str, str] = {}
    producer: dict[str, Node] = {}
    readers: dict[str, int] = {}
    for node in out:
        if node.kind == "view":
            for t in node.outputs:
                alias[t] = alias.get(node.inputs[0], node.inputs[0]) if node.inputs else t
            continue
        for t in node.inputs:
            root = alias.get(t, t)
            readers[root] = readers.get(root, 0) + 1
        for t in node.outputs:
            producer[t] = node
    for node in out:
        if node.category not in ("pointwise", "norm"):
            continue
        for t, size in zip(node.inputs, node.input_bytes, strict=False):
            root = alias.get(t, t)
            source = producer.get(root)
            if source is None or readers.get(root, 0) != 1:
                continue
            if source.kind in ("gemm", "conv") and node.category == "pointwise":
                node.bytes = max(0.0, node.bytes - size - node.out_bytes)
            elif source.kind == "memory":
                source.bytes = max(0.0, source.bytes - size)
                node.bytes = max(0.0, node.bytes - size)
    return out


def _default_shapes() -> dict[str, dict[str, int]]:
    from windtunnel.graph.onnx_examples import DEFAULT_BATCH_SHAPES

    return DEFAULT_BATCH_SHAPES


def check_graph_plan(plan) -> None:
    """Plan fields that only apply to transformers are clear errors for an imported DAG."""
    for name, value in (("cp", plan.cp), ("ep", plan.ep)):
        if value != 1:
            raise WindtunnelError(f"Plan field '{name}' is {value}; an imported operator DAG has no sequence or "
                                  f"experts to split, so {name} must be 1 (use tp, pp, dp and zero).", field=name)


def plan_graph_model(dag: GraphModel, builder) -> dict:
    """Forward graphs of the plan's pipeline stages for the step builder (sets its stage list, stage
    parameters and the send size the pipeline uses)."""
    from windtunnel.graph.dag_parallel import build_forward, cut_stages, split_stages
    from windtunnel.graph.transformer import ACT_BYTES, captured

    plan = builder.plan
    check_graph_plan(plan)
    # (The plan's default recompute=selective re-runs transformer attention: nothing here.)
    if plan.pipeline_schedule == "dualpipe" or plan.recompute == "full" or plan.offload_layers:
        field = "schedule" if plan.pipeline_schedule == "dualpipe" else ("recompute" if plan.recompute == "full"
                                                                       else "offload_layers")
        raise WindtunnelError(f"Plan field '{field}' applies to transformer layers; an imported operator DAG runs "
                              "1f1b or interleaved pipelines without recomputation or offloading (leave it out).",
                              field=field)
    imported = dag.imported(plan.mbs)
    if builder.shard.fused_elementwise:
        imported = replace(imported, nodes=fuse_elementwise(imported.nodes))
    graph, _, params, sizes = build_forward(imported, plan.tp, dag.annotations)
    virtual = plan.pp * plan.vpp
    # Each stage runs as up to MODULES_PER_STAGE modules (cut the same way), so that its gradients
    # are reduced in buckets beside the rest of its backward, as DDP/FSDP buckets do.
    per_stage = max(1, min(MODULES_PER_STAGE, len(graph.ops) // (2 * virtual)))
    starts = cut_stages(graph, virtual * per_stage,
                        lambda op: 0.0 if op.is_comm else builder.coster.op_time(op), sizes)
    names = [op.name for op in graph.ops]
    stages = split_stages(graph, params, starts, sizes, names)
    kinds = [f"stage{v}.{j}" for v in range(virtual) for j in range(per_stage)]
    builder.dag_stages = [kinds[v * per_stage:(v + 1) * per_stage] for v in range(virtual)]
    builder.dag_params = {kind: (stage.params, 0.0) for kind, stage in zip(kinds, stages, strict=True)}
    sent = max((stages[(v + 1) * per_stage - 1].send_bytes for v in range(virtual - 1)), default=0.0)
    width = max(1, math.ceil(sent / (ACT_BYTES * plan.mbs * builder.job.seq_len)))
    builder.job = replace(builder.job, model=builder.job.model.model_copy(update={"hidden": width}))
    return {kind: captured(stage.graph, [], builder.shard.cuda_graphs) for kind, stage in zip(kinds, stages, strict=True)}

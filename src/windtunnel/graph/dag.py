"""User-given models as a DAG of operators in YAML (the transformer builders produce the same structure).

A file describes the per-rank, per-micro-batch forward operators of one repeated layer (and,
optionally, extra operators on the first and last pipeline stage); the simulator derives the
backward pass, recomputation, memory and the pipeline from it exactly as for built-in models.

```yaml
name: my-model
layers: 24                     # the layer DAG repeats this many times
hidden: 4096                   # width of the activation sent between pipeline stages
tokens_per_micro_batch: 4096   # tokens one rank's layer processes per micro-batch (= mbs * seq_len / cp)
params_per_layer: 2.0e+8       # parameters of one layer held by one rank (after TP/EP splits)
layer:
  - {name: norm, kind: memory, bytes: 3.3e+7, saved_bytes: 8.4e+6}
  - {name: qkv, kind: gemm, m: 4096, n: 1536, k: 4096, deps: [norm]}
  - {name: attn, kind: attention, flops: 1.1e+11, bytes: 5.0e+7, q_len: 4096, kv_len: 4096, deps: [qkv]}
  - {name: ar, kind: all_reduce, group: tp, bytes: 3.3e+7, deps: [attn]}
```

Units: FLOPs, bytes, tokens. ``kind`` is gemm (m, n, k, optional count), conv (an implicit GEMM: m =
batch x output pixels, n = output channels per group, k = input channels per group x kernel area, count =
groups), gather (bytes: gathers, scatters, embedding lookups), sparse (flops = 2 x nonzeros x width, bytes:
graph message passing as SpMM), attention (flops, bytes,
kv_len, optional exponentials: softmax exponentials evaluated, one per score), memory (bytes), or a collective (all_reduce, all_gather, reduce_scatter, all_to_all,
send_recv) with ``group`` one of tp, cp, ep, dp and ``bytes`` the full buffer. Every operator may
state its host (CPU) cost: ``host_ops`` (eager framework ops, default 1), ``library_calls`` (per-expert
GEMM calls, default 0) and ``host_sync`` (after issuing the operator the host waits for its inputs to
finish on the device, before issuing anything else).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from windtunnel.graph.ops import COLLECTIVES, Op, OpGraph
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.model import ModelSpec
from windtunnel.specs.validation import build
from windtunnel.specs.yamlio import read_yaml

ACT_BYTES = 2.0


class DagOperator(BaseModel):
    """One operator as written in the YAML file."""

    model_config = ConfigDict(extra="forbid")
    name: str
    kind: Literal["gemm", "conv", "attention", "memory", "gather", "sparse", "all_reduce", "all_gather",
                  "reduce_scatter", "all_to_all", "send_recv"]
    deps: list[str] = Field(default_factory=list)
    m: PositiveInt | None = None
    n: PositiveInt | None = None
    k: PositiveInt | None = None
    count: PositiveInt = 1
    flops: float = Field(default=0.0, ge=0.0)
    bytes: float = Field(default=0.0, ge=0.0)
    saved_bytes: float | None = Field(default=None, ge=0.0)
    q_len: PositiveInt | None = None
    kv_len: PositiveInt | None = None
    exponentials: float = Field(default=0.0, ge=0.0)
    group: Literal["tp", "cp", "ep", "dp"] | None = None
    model_flops: bool = True
    host_ops: float = Field(default=1.0, ge=0.0)
    library_calls: int = Field(default=0, ge=0)
    host_sync: bool = False


class DagModel(BaseModel):
    """A model given as repeated operator DAGs."""

    model_config = ConfigDict(extra="forbid")
    name: str
    layers: PositiveInt
    hidden: PositiveInt
    tokens_per_micro_batch: PositiveInt
    params_per_layer: float = Field(ge=0.0)
    expert_params_per_layer: float = Field(default=0.0, ge=0.0)
    first_stage_params: float = Field(default=0.0, ge=0.0)
    last_stage_params: float = Field(default=0.0, ge=0.0)
    layer: list[DagOperator] = Field(min_length=1)
    first_stage: list[DagOperator] = Field(default_factory=list)
    last_stage: list[DagOperator] = Field(default_factory=list)
    sources: dict[str, str] = Field(default_factory=dict)

    def graph(self, part: str) -> OpGraph:
        """The forward OpGraph of ``part``: layer, first_stage or last_stage."""
        return to_graph(getattr(self, part), f"{self.name}.{part}")

    def forward_flops(self, part: str) -> float:
        """Model FLOPs of one forward of ``part`` on one rank for one micro-batch."""
        return sum(op.flops * op.count for op in self.graph(part).ops if op.model_flops and not op.is_comm)


def to_graph(operators: list[DagOperator], where: str) -> OpGraph:
    """Check names, dependencies and shapes, and build the OpGraph (operators may be in any order)."""
    by_name: dict[str, DagOperator] = {}
    for op in operators:
        if op.name in by_name:
            raise WindtunnelError(f"Operator DAG '{where}': operator name '{op.name}' is used twice; names must be unique.")
        by_name[op.name] = op
    for op in operators:
        for dep in op.deps:
            if dep not in by_name:
                raise WindtunnelError(f"Operator DAG '{where}': operator '{op.name}' depends on '{dep}', which is not "
                                      f"defined; defined operators: {', '.join(by_name)}.")
    # Kahn's algorithm: a topological order, or the cycle is reported.
    remaining = {op.name: len(op.deps) for op in operators}
    users: dict[str, list[str]] = {name: [] for name in by_name}
    for op in operators:
        for dep in op.deps:
            users[dep].append(op.name)
    ready = [op.name for op in operators if not op.deps]
    order: list[str] = []
    while ready:
        name = ready.pop(0)
        order.append(name)
        for user in users[name]:
            remaining[user] -= 1
            if remaining[user] == 0:
                ready.append(user)
    if len(order) != len(operators):
        stuck = [name for name, count in remaining.items() if count > 0]
        raise WindtunnelError(f"Operator DAG '{where}' has a dependency cycle among: {', '.join(stuck)}.")
    graph = OpGraph()
    index: dict[str, int] = {}
    for name in order:
        op = by_name[name]
        deps = tuple(index[d] for d in op.deps)
        index[name] = graph.add(_operator(op, deps, where))
    return graph


def _operator(op: DagOperator, deps: tuple[int, ...], where: str) -> Op:
    host = dict(host_ops=op.host_ops, library_calls=op.library_calls, host_sync=op.host_sync)

    def need(*fields: str) -> None:
        missing = [f for f in fields if getattr(op, f) in (None, 0.0)]
        if missing:
            raise WindtunnelError(f"Operator DAG '{where}': {op.kind} operator '{op.name}' needs field(s) "
                                  f"{', '.join(missing)}.")

    if op.kind == "conv":  # implicit GEMM: m = batch x output pixels, n = out channels/group, k = in/group x kernel
        need("m", "n", "k")
        return Op(op.name, "conv", flops=2.0 * op.m * op.n * op.k, bytes_moved=op.bytes,
                  saved_bytes=ACT_BYTES * op.m * op.k * op.count if op.saved_bytes is None else op.saved_bytes,
                  shape=(op.m, op.n, op.k), deps=deps, count=op.count, model_flops=op.model_flops, **host)
    if op.kind in ("gather", "sparse"):
        need("bytes", *(("flops",) if op.kind == "sparse" else ()))
        return Op(op.name, op.kind, flops=op.flops, bytes_moved=op.bytes, saved_bytes=op.saved_bytes or 0.0,
                  deps=deps, model_flops=op.kind == "sparse" and op.model_flops, **host)
    if op.kind == "gemm":
        need("m", "n", "k")
        saved = ACT_BYTES * op.m * op.k * op.count if op.saved_bytes is None else op.saved_bytes
        return Op(op.name, "gemm", flops=2.0 * op.m * op.n * op.k, bytes_moved=ACT_BYTES * (op.m * op.k + op.k * op.n + op.m * op.n),
                  saved_bytes=saved, shape=(op.m, op.n, op.k), deps=deps, count=op.count, model_flops=op.model_flops,
                  **host)
    if op.kind == "attention":
        need("flops", "kv_len")
        return Op(op.name, "attention", flops=op.flops, bytes_moved=op.bytes, saved_bytes=op.saved_bytes or 0.0,
                  exponentials=op.exponentials, shape=(1, op.q_len or op.kv_len, op.kv_len, 0), deps=deps,
                  model_flops=op.model_flops, precision="bf16", **host)
    if op.kind == "memory":
        need("bytes")
        return Op(op.name, "memory", flops=op.flops, bytes_moved=op.bytes, saved_bytes=op.saved_bytes or 0.0,
                  deps=deps, model_flops=False, **host)
    assert op.kind in COLLECTIVES
    need("bytes")
    if op.group is None:
        raise WindtunnelError(f"Operator DAG '{where}': collective '{op.name}' needs a group (tp, cp, ep or dp).")
    return Op(op.name, op.kind, stream=op.group, bytes_moved=op.bytes, group=op.group, deps=deps, **host)


def load_dag(path: str | Path) -> DagModel:
    """Load and check an operator-DAG model file."""
    doc = read_yaml(path)
    model = build(DagModel, doc, f"Operator-DAG model '{path}'")
    for part in ("layer", "first_stage", "last_stage"):
        model.graph(part)  # raises on bad names, cycles or missing shapes
    return model


def dag_stub_model(dag: DagModel) -> ModelSpec:
    """A ModelSpec carrying only what the pipeline needs from an operator-DAG model (layers, width)."""
    return ModelSpec(id=dag.name, name=dag.name, layers=dag.layers, hidden=dag.hidden, ffn_hidden=dag.hidden,
                     heads=1, vocab=1, sources={"shape": "operator DAG file"})

"""Parallelisation of an imported operator DAG: tensor-parallel sharding rules and pipeline stage cuts.

Tensor parallelism (``tp`` ranks) follows sharding rules per operator, in the style of Megatron-LM:

* a GEMM or convolution with a weight reading a whole (unsplit) tensor is **column**-parallel: its
  output features (channels) are split, FLOPs and weight /tp, no communication;
* one reading a split tensor is **row**-parallel: its reduction dimension (input channels) is split
  and its partial output is summed by an **all-reduce** over the TP group;
* an activation-activation GEMM (attention scores, context) on split inputs runs on its share of the
  heads (count /tp);
* pointwise, normalisation per channel, pooling and data movement keep their input's split (bytes
  /tp); operators that need the whole feature dimension (LayerNorm, reductions, concatenation,
  gathers/scatters, the loss) and mixed split/whole inputs of the same size first **all-gather** the
  split ones; broadcast operands smaller than the output (biases, masks) are sliced locally.
* annotations (``{node: column | row | replicate}``, from a side YAML ``MODEL.parallel.yaml`` with a
  ``tensor_parallel:`` mapping) override the rule; ``replicate`` runs the node whole on every rank.

Pipeline parallelism cuts the topological order into stages of balanced estimated time, choosing,
near each balanced boundary, the cut with the fewest activation bytes crossing it (the DAG's narrow
waists: block boundaries rather than the middle of a branch). Units: FLOPs, bytes, seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from windtunnel.graph.onnx_import import NEEDS_FULL, ImportedGraph, Node
from windtunnel.graph.ops import Op, OpGraph
from windtunnel.specs.errors import WindtunnelError

RULES = ("column", "row", "replicate")
TINY = 64  # an activation-activation matmul whose instances have m or n below this runs as a packed batch


@dataclass
class Stage:
    """One pipeline stage of the DAG on one rank: its forward graph, parameters and the bytes it sends on."""

    graph: OpGraph
    params: float = 0.0
    send_bytes: float = 0.0
    nodes: list[str] = field(default_factory=list)


def _op(node: Node, tp: int, rule: str | None, split: bool) -> Op:
    """The rank's Op of one node under a rule (None: not a weighted GEMM/conv) with split inputs or not."""
    share = tp if split or rule in ("column", "row") else 1
    flops, moved, saved = node.flops / share, node.bytes / share, node.saved / share
    precision = None
    if node.kind in ("gemm", "conv"):
        m, n, k = node.shape
        count = node.count
        if rule == "column":
            n = max(1, n // tp)
        elif rule == "row":
            k = max(1, k // tp)
        elif split:
            count = max(1, count // tp) if count >= tp else count
            if count == node.count:
                m = max(1, m // tp)
        kind = node.kind
        if kind == "gemm" and not node.weighted and count > 1 and min(m, n) < TINY:
            kind = "bmm"  # per-instance matrices smaller than a tile: packed batched kernels (cost/kinds.py)
        # Op.flops is per instance (the engine multiplies by count), the node's are all instances'.
        return Op(node.name, kind, flops=flops / count, bytes_moved=moved, saved_bytes=saved, shape=(m, n, k), count=count,
                  precision=precision, backward_bytes=0.0 if node.reads_model_input and kind == "conv" else None)
    return Op(node.name, node.kind, flops=flops, bytes_moved=moved, saved_bytes=saved, model_flops=False)


def build_forward(graph: ImportedGraph, tp: int = 1, annotations: dict[str, str] | None = None
                  ) -> tuple[OpGraph, list[int], list[float], dict[int, float]]:
    """The whole forward DAG of one rank under tensor parallelism.

    Returns (graph, the node position in ``graph.nodes`` of each op, the parameters each op holds on
    a rank, and each op's output bytes on a rank: what a pipeline cut after it sends)."""
    annotations = annotations or {}
    names = {n.name for n in graph.nodes}
    bad = {k: v for k, v in annotations.items() if k not in names or v not in RULES}
    if bad:
        key, value = next(iter(bad.items()))
        what = f"rule '{value}' (valid: {', '.join(RULES)})" if key in names else "a node the model does not have"
        raise WindtunnelError(f"Parallel annotation '{key}: {value}' names {what}.", field="tensor_parallel")
    out = OpGraph()
    owner: list[int] = []
    params: list[float] = []
    ready: dict[str, int] = {}     # tensor -> op index after which it is available on this rank
    split: dict[str, bool] = {}    # tensor -> whether it is split over the TP group
    sizes: dict[int, float] = {}

    def dep_of(tensor: str) -> tuple[int, ...]:
        return (ready[tensor],) if tensor in ready else ()

    def gather(tensor: str, position: int) -> None:
        """All-gather a split tensor so that it is whole on every rank."""
        size = graph.tensor_bytes.get(tensor, 0.0)
        index = out.add(Op(f"{tensor}.all_gather", "all_gather", stream="tp", group="tp", bytes_moved=size,
                           deps=dep_of(tensor)))
        owner.append(position)
        params.append(0.0)
        sizes[index] = size
        ready[tensor] = index
        split[tensor] = False

    for position, node in enumerate(graph.nodes):
        if node.kind == "view":
            state = any(split.get(t, False) for t in node.inputs)
            producers = [ready[t] for t in node.inputs if t in ready]
            for t in node.outputs:
                split[t] = state
                if producers:
                    ready[t] = max(producers)
            continue
        rule = annotations.get(node.name)
        states = [split.get(t, False) for t in node.inputs]
        if tp > 1:
            if node.weighted and node.kind in ("gemm", "conv") and rule != "replicate":
                rule = rule or ("row" if states and states[0] else "column")
                if rule == "column" and states and states[0]:
                    gather(node.inputs[0], position)
                elif rule == "row" and states and not states[0]:
                    split[node.inputs[0]] = True  # each rank slices its share of the whole input locally
            else:
                whole = rule == "replicate" or node.op_type in NEEDS_FULL
                if any(states) and not whole:
                    biggest = max(node.input_bytes) if node.input_bytes else 0.0
                    for s, size in zip(states, node.input_bytes, strict=False):
                        if not s and size >= biggest and size > 0:
                            whole = True  # a whole operand as big as the split ones: gather those instead
                if whole:
                    for t, s in zip(node.inputs, states, strict=True):
                        if s:
                            gather(t, position)
                rule = None
            states = [split.get(t, False) for t in node.inputs]
        else:
            rule = None
        is_split = tp > 1 and rule is None and any(states)
        deps = tuple(sorted({ready[t] for t in node.inputs if t in ready}))
        op = replace(_op(node, tp, rule, is_split), deps=deps)
        index = out.add(op)
        owner.append(position)
        held = node.params / tp if rule in ("column", "row") else node.params
        params.append(held)
        output_split = rule == "column" or is_split
        sizes[index] = node.out_bytes / (tp if output_split else 1)
        if rule == "row":
            for t in node.outputs:
                ready[t] = index
            reduce = out.add(Op(f"{node.name}.all_reduce", "all_reduce", stream="tp", group="tp",
                                bytes_moved=node.out_bytes, deps=(index,)))
            owner.append(position)
            params.append(0.0)
            sizes[reduce] = node.out_bytes
            index = reduce
        for t in node.outputs:
            ready[t] = index
            split[t] = output_split
    if tp > 1:
        for t in graph.graph_outputs:
            if split.get(t):
                gather(t, len(graph.nodes) - 1)
    return out, owner, params, sizes


def cut_stages(graph: OpGraph, stages: int, weight: Callable[[Op], float], sizes: dict[int, float]) -> list[int]:
    """Start index of each of ``stages`` contiguous stages of the topological order: balanced by ``weight``
    (seconds per op), each boundary moved within 15% of a stage's share to where the fewest bytes cross."""
    n = len(graph.ops)
    if stages > n:
        raise WindtunnelError(f"Plan pp*vpp = {stages} exceeds the DAG's {n} operators; use fewer stages.", field="pp")
    cost = [weight(op) for op in graph.ops]
    prefix = [0.0]
    for c in cost:
        prefix.append(prefix[-1] + c)
    total = prefix[-1] or 1.0
    last_use = {}
    for index, op in enumerate(graph.ops):
        for dep in op.deps:
            last_use[dep] = max(last_use.get(dep, 0), index)
    crossing = []
    for cut in range(n + 1):  # bytes produced before ``cut`` and read at or after it
        crossing.append(sum(sizes.get(i, 0.0) for i, last in last_use.items() if i < cut <= last))
    starts = [0]
    for s in range(1, stages):
        target = total * s / stages
        window = 0.15 * total / stages
        low = starts[-1] + 1
        high = n - (stages - s)
        candidates = [c for c in range(low, high + 1) if abs(prefix[c] - target) <= window]
        if not candidates:
            candidates = [min(range(low, high + 1), key=lambda c: abs(prefix[c] - target))]
        starts.append(min(candidates, key=lambda c: (crossing[c], abs(prefix[c] - target))))
    return starts


def split_stages(graph: OpGraph, params: list[float], starts: list[int], sizes: dict[int, float],
                 names: list[str]) -> list[Stage]:
    """The stages' own graphs (dependencies into earlier stages arrive by the pipeline's send/receive)."""
    bounds = starts + [len(graph.ops)]
    stages = []
    for s in range(len(starts)):
        lo, hi = bounds[s], bounds[s + 1]
        sub = OpGraph()
        for index in range(lo, hi):
            op = graph.ops[index]
            sub.add(replace(op, deps=tuple(d - lo for d in op.deps if d >= lo)))
        sent = sum(sizes.get(i, 0.0) for i in range(lo, hi)
                   if any(i in graph.ops[j].deps for j in range(hi, len(graph.ops))))
        stages.append(Stage(sub, sum(params[lo:hi]), sent, names[lo:hi]))
    return stages

"""Cost of one layer (and the embedding and head) on one rank, by playing its operator DAG.

Each distinct layer kind (dense, MoE; forward, backward with each recompute mode; DualPipe's
overlapped forward+backward pair) is played once on the event engine with its own streams
(compute, TP, CP, EP, DP), so overlap inside a layer (shared experts under the dispatch,
weight-gradient GEMMs under the backward reduce-scatter, chunked TP overlap) comes out of the
simulation. The pipeline level then reuses these durations. Times are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from windtunnel.cost.collectives import collective_time
from windtunnel.cost.compute import compute_op_time
from windtunnel.cost.efficiency import Efficiency
from windtunnel.engine.attribution import attribute
from windtunnel.engine.core import Engine, Timeline
from windtunnel.graph.ops import Op, OpGraph, backward_of
from windtunnel.specs.hardware import Cluster
from windtunnel.train.placement import Placement

SELECTIVE_OPS = ("core_attention", "core_attention_ring", "attn_scores", "attn_softmax", "attn_dropout", "attn_values")
# With multi-head latent attention, selective recomputation also re-runs the up-projections from the
# latent (Megatron's "mla_up_proj" module, DeepSeek-V3 report Sec. 3.2.3), so the per-head queries,
# keys and values are not stored: only the compressed latents are.
MLA_SELECTIVE_OPS = ("q_up_proj", "kv_up_proj", "rope")
# Megatron's selective recomputation modules (--recompute-modules). core_attn and mlp checkpoint a
# region: its output stays stored, the tensors inside it are dropped and the region re-runs. The
# others re-run a module and drop its output as well (Megatron's "output-discarding" recompute,
# used for the cheap memory-bound and up-projection modules): the operators that consume it no
# longer keep their input.
_REGION_MODULES = ("core_attn", "mlp", "moe", "attn_proj")


def _is_mla(forward: OpGraph) -> bool:
    return any(op.name == "kv_up_proj" for op in forward.ops)


def module_ops(forward: OpGraph, module: str) -> set[int]:
    """Indices of the operators a recompute module re-runs in this layer."""
    def wanted(op: Op) -> bool:
        if module in ("core_attn", "attn_output"):
            return op.name in SELECTIVE_OPS
        if module == "mla_up_proj":
            return op.name in MLA_SELECTIVE_OPS
        if module == "layernorm":
            return op.kind == "memory" and op.name.endswith("norm")
        if module == "moe_act":
            # Megatron checkpoints the whole bias-activation function, the GLU clamps included.
            return op.name in ("experts.act", "experts.act_clamp")
        if module == "mlp":
            return op.name.startswith("mlp.")
        if module == "elementwise":
            # Every memory-bound operator (JAX policies that save only matmul outputs): norms, activations,
            # rotary embedding, residual and bias adds; a stack that re-runs only what the backward reads
            # (memory.recompute_reads_only) then leaves out the layer's last residual add.
            return op.kind == "memory"
        if module == "attn_proj":
            return op.name in SELECTIVE_OPS or op.name in ("out_proj", "attn_residual")
        if module == "moe":
            return False  # an index range, below
        raise ValueError(f"unknown recompute module '{module}'")
    if module == "moe":
        # The MoE layer: every operator after its norm and before the residual add.
        names = [op.name for op in forward.ops]
        if "moe_norm" not in names or "moe_residual" not in names:
            return set()
        return set(range(names.index("moe_norm") + 1, names.index("moe_residual")))
    return {i for i, op in enumerate(forward.ops) if wanted(op)}


def selective_modules(forward: OpGraph, mode: str) -> tuple[str, ...]:
    """The modules a selective mode re-runs: ``selective`` is core attention (and, with MLA, the
    up-projections); ``selective[layernorm+moe_act]`` names them."""
    if "[" in mode:
        return tuple(mode[mode.index("[") + 1:-1].split("+"))
    return ("core_attn", "mla_up_proj") if _is_mla(forward) else ("core_attn",)


def recompute_selection(forward: OpGraph, mode: str) -> tuple[set[int], set[int]]:
    """(operators re-run before the backward, operators whose saved activations are not kept)."""
    rerun: set[int] = set()
    dropped: set[int] = set()
    module_of: dict[int, set[str]] = {}
    for module in selective_modules(forward, mode):
        ops = module_ops(forward, module)
        rerun |= ops
        for index in ops:
            module_of.setdefault(index, set()).add(module)
        for index in ops:
            op = forward.ops[index]
            inside = any(dep in ops for dep in op.deps)
            if module == "core_attn":
                # Checkpointed attention keeps its inputs (Q, K, V; with a ring, each block's) and
                # drops only an unfused attention's score-sized tensors.
                if op.kind == "memory":
                    dropped.add(index)
            elif inside:
                dropped.add(index)
        if module not in _REGION_MODULES:
            # Output-discarding recompute: the consumers' stored inputs are regenerated.
            dropped |= {i for i, op in enumerate(forward.ops) if i not in ops and any(d in ops for d in op.deps)}
    # An operator whose inputs are all re-run by other modules keeps nothing: its inputs are regenerated
    # before it re-runs (attn_proj re-runs the attention's residual add, so the MLP norm's input need not be
    # stored). Inside one module, the module's own rule above decides.
    dropped |= {i for i in rerun if forward.ops[i].deps and all(
        d in rerun and not module_of[d] & module_of[i] for d in forward.ops[i].deps)}
    return rerun, dropped


COMM_STREAMS = ("tp", "cp", "ep", "dp")
CATEGORY_OF_STREAM = {"tp": "tp_comm", "cp": "cp_comm", "ep": "ep_comm", "dp": "dp_comm", "pp": "pp_comm"}
TP_OVERLAP_CHUNKS = 4
# One host (CPU) thread issues a rank's kernels in program order.
HOST_STREAM = "host"


@dataclass
class Played:
    """A played DAG: wall time (seconds), seconds per category, FLOPs executed and model FLOPs."""

    time: float
    parts: dict[str, float] = field(default_factory=dict)
    flops: float = 0.0
    model_flops: float = 0.0
    # The played operator timeline (for per-operator traces, train/op_trace.py); sums and scalings drop it.
    timeline: Timeline | None = field(default=None, repr=False, compare=False)

    def __add__(self, other: Played) -> Played:
        parts = dict(self.parts)
        for key, value in other.parts.items():
            parts[key] = parts.get(key, 0.0) + value
        return Played(self.time + other.time, parts, self.flops + other.flops, self.model_flops + other.model_flops)

    def scaled(self, factor: float) -> Played:
        return Played(self.time * factor, {k: v * factor for k, v in self.parts.items()},
                      self.flops * factor, self.model_flops * factor)


ZERO = Played(0.0)


class LayerCoster:
    """Plays operator DAGs for one rank of a plan on a cluster."""

    def __init__(self, cluster: Cluster, placement: Placement, eff: Efficiency, precision: str,
                 *, tp_overlap: bool, single_queue: bool = False) -> None:
        self.cluster = cluster
        self.placement = placement
        self.eff = eff
        self.precision = precision
        self.tp_overlap = tp_overlap
        # One hardware queue per device (plan device_connections=1): kernels start in host issue order.
        self.single_queue = single_queue

    def op_time(self, op: Op) -> float:
        """Seconds for one operator on its stream."""
        if op.is_comm:
            group = self.placement.group(op.group)
            return collective_time(op.kind, op.bytes_moved, group, self.cluster, self.eff, fanout=op.fanout)
        return compute_op_time(op, self.cluster.chip, self.eff, self.precision)

    def _pieces(self, graph: OpGraph) -> list[int]:
        """How many chunks each operator is split into (chunked TP overlap splits a TP collective
        and the GEMM next to it so that they pipeline, as Megatron's userbuffer overlap does)."""
        pieces = [1] * len(graph.ops)
        if not self.tp_overlap:
            return pieces
        for index, op in enumerate(graph.ops):
            # Only a linear layer's own TP collective is overlapped. Expert linears communicate
            # explicitly in the MoE dispatcher (Megatron-Core explicit_expert_comm: is_expert and
            # tp > 1 or ep > 1 turns the TE layer's userbuffer overlap off; MindSpeed's MC2 replaces
            # only the non-expert Column/RowParallelLinear), so the expert-TP gather and
            # reduce-scatter run whole before and after the expert GEMMs.
            if op.group == "tp" and op.kind in ("all_gather", "reduce_scatter") and op.tp_chunked:
                pieces[index] = TP_OVERLAP_CHUNKS
                for dep in op.deps:
                    if graph.ops[dep].kind == "gemm":
                        pieces[dep] = TP_OVERLAP_CHUNKS
                for user, other in enumerate(graph.ops):
                    if index in other.deps and other.kind == "gemm":
                        pieces[user] = TP_OVERLAP_CHUNKS
        return pieces

    def _issue(self, engine: Engine, op: Op, stream: str, inputs: list[int]) -> int | None:
        """Submit the host's work to issue ``op`` (its framework ops and launches) on the host stream; returns the
        task the device work waits for, or None when host time is not modelled. The host runs ahead
        of the device, except where it must read a value the device computes (``host_sync``): having
        issued the op, it waits for the op's inputs, and the device idles once it has run out of
        issued work until the next launches arrive."""
        eff = self.eff
        seconds = (op.host_ops * eff.host_op_s + op.library_calls * eff.host_library_call_s
                   + op.launched_quantisations * eff.host_launch_s)
        if eff.host_op_s <= 0 and eff.host_library_call_s <= 0 and eff.host_launch_s <= 0:
            return None
        issued = engine.task(op.name + ".issue", stream, seconds, (), category="host_overhead")
        if op.host_sync:
            engine.task(op.name + ".wait", stream, 0.0, inputs, category="host_overhead")
        return issued

    def play(self, graphs: list[OpGraph], *, concurrent: bool = False, zero3_gather: float = 0.0,
             comm_units: int = 0) -> Played:
        """Play DAGs on one rank's streams. Sequential by default (each graph after the previous one);
        ``concurrent`` gives each graph its own streams that share the device's compute and links,
        as DualPipe runs a forward and a backward chunk together so that one's all-to-all hides
        under the other's compute. ``zero3_gather`` (seconds) is sharded data parallelism's transfer
        for the layer, run beside it; its kernels hold ``comm_units`` compute units meanwhile."""
        played = self._play(graphs, concurrent=concurrent)
        if zero3_gather <= 0:
            return played
        exposed = zero3_exposed(played.time, zero3_gather, comm_units / max(1, self.eff.compute_units))
        return played + Played(exposed, {"dp_comm": exposed})

    def _play(self, graphs: list[OpGraph], *, concurrent: bool = False) -> Played:
        engine = Engine()
        task_of: dict[tuple[int, int], list[int]] = {}
        flops = model_flops = 0.0
        previous_sinks: tuple[int, ...] = ()
        # Overlapped chunks run their all-to-alls beside the other chunk's compute: the communication
        # kernels hold some compute units, and the compute runs on the rest.
        carve = 1.0
        eff = self.eff
        paired = concurrent and len(graphs) > 1
        if paired and eff.overlap_comm_units and \
                any(op.stream == "ep" for graph in graphs for op in graph.ops):
            carve = eff.compute_units / max(1, eff.compute_units - eff.overlap_comm_units)
        # A pair shares the device's compute and links in one fixed order of its components
        # (overlap_order); alone or in sequence, each graph's operators run in their own order. With one
        # hardware queue the pair runs in Megatron's issue order, each all-to-all queued behind the kernels
        # issued before it (issue_order).
        queued = paired and self.single_queue and any(op.stream == "ep" for g in graphs for op in g.ops)
        sequence = issue_order(graphs) if queued else overlap_order(graphs) if paired else \
            [(gi, oi) for gi, graph in enumerate(graphs) for oi in range(len(graph.ops))]
        issued_kernels: list[int] = []  # tasks of the kernels issued so far, all-to-alls excepted
        pieces_of = [self._pieces(graph) for graph in graphs]
        for gi, oi in sequence:
            graph = graphs[gi]
            if oi == 0 and gi > 0 and not concurrent:
                previous_sinks = tuple(task_of[(gi - 1, i)][-1] for i in graphs[gi - 1].sinks())
            # One CPU thread issues both chunks of an overlapped pair, interleaved in the pair's order:
            # Megatron-Core's combined 1F1B calls the forward's and the backward's submodules one after
            # another from one Python loop (models/common/model_chunk_schedule_plan.py
            # TransformerLayerSchedulePlan.run, core_v0.15.0), so their host work adds up on one stream.
            op = graph.ops[oi]
            count = pieces_of[gi][oi]
            duration = self.op_time(op) / count * (1.0 if op.is_comm else carve)
            stream = op.stream
            inputs = [t for dep in op.deps for t in task_of[(gi, dep)]] if op.host_sync else []
            issued = self._issue(engine, op, HOST_STREAM, inputs)
            tasks = []
            queue_wait = issued_kernels[:] if queued and op.is_comm and op.stream == "ep" else []
            for piece in range(count):
                deps: list[int] = ([] if issued is None else [issued]) + queue_wait
                for dep in op.deps:
                    producer = task_of[(gi, dep)]
                    deps.append(producer[min(piece, len(producer) - 1)] if len(producer) == count else producer[-1])
                if not op.deps and not concurrent:
                    deps.extend(previous_sinks)
                if op.is_comm:
                    category = CATEGORY_OF_STREAM[op.stream]
                else:
                    category = "recompute" if op.phase == "recompute" else "compute"
                tasks.append(engine.task(op.name, stream, duration, deps, category=category))
            task_of[(gi, oi)] = tasks
            if queued and not (op.is_comm and op.stream == "ep"):
                issued_kernels.append(tasks[-1])
            if not op.is_comm:
                flops += op.flops * op.count
                if op.model_flops and op.phase != "recompute":
                    model_flops += op.flops * op.count
        timeline = engine.run()
        parts = attribute(timeline, primary=("compute",), others=COMM_STREAMS, background=(HOST_STREAM,))
        parts.pop("idle", None)
        return Played(timeline.makespan, parts, flops, model_flops, timeline=timeline)


def overlap_order(graphs: list[OpGraph]) -> list[tuple[int, int]]:
    """The fixed order, as (graph, operator) pairs, in which an overlapped forward and backward chunk
    (DualPipe's pair, Megatron's EP overlap) share one device: every stream (compute, each link) runs
    its share of the pair's operators in this order.

    Each graph is cut into segments at its all-to-alls (at its collectives when the pair has none):
    an operator's segment is the number of those communications on its longest path from the
    start. The backward's segment k runs before the forward's segment k, which runs before the
    backward's segment k + 1, so each chunk's communication runs under the other's compute, as the
    DeepSeek-V3 report (Sec. 3.2.1, Fig. 4) arranges the pair: the backward's combine beside the
    forward's attention, the forward's dispatch beside the backward's MLP, the backward's dispatch
    beside the forward's MLP, the forward's combine beside the backward's attention.

    The order depends on the graphs' structure only, never on operator durations, so the pair's
    time is a longest path over fixed orders: no operator getting faster (more bandwidth, more
    FLOP/s) can make the pair slower. (A greedy play, where a shared stream takes whichever ready
    operator was submitted first, is not monotone: a faster tensor-parallel link let the forward's
    operators take the compute units ahead of the backward's short prefix that feeds its first
    all-to-all, and the step got slower.) Keys only grow along each graph's dependencies, so the
    order is a topological order of the pair and its fixed stream orders never deadlock.
    """
    ep = any(op.is_comm and op.stream == "ep" for graph in graphs for op in graph.ops)
    segment_of = _segments(graphs, cut_at_ep_only=ep)
    keyed = []
    for gi, graph in enumerate(graphs):
        backward = any(op.phase != "fwd" for op in graph.ops)
        for oi in range(len(graph.ops)):
            keyed.append(((segment_of[(gi, oi)], 0 if backward else 1, gi, oi), gi, oi))
    keyed.sort()
    return [(gi, oi) for _, gi, oi in keyed]


# Where Megatron-Core's combined 1F1B issues each part of an overlapped MoE layer pair (issue_order), by segment
# (all-to-alls before it) and kind: a kernel, a weight-gradient kernel (issued late, backward_dw) or an all-to-all.
_BACKWARD_STEPS = {(0, "kernel"): 0, (0, "wgrad"): 0, (0, "a2a"): 1, (1, "kernel"): 3, (1, "wgrad"): 5, (1, "a2a"): 6}
_FORWARD_STEPS = {(0, "kernel"): 2, (0, "a2a"): 4, (1, "kernel"): 7, (1, "a2a"): 8}


def issue_order(graphs: list[OpGraph]) -> list[tuple[int, int]]:
    """The order in which Megatron-Core's combined 1F1B issues an overlapped forward and backward MoE layer
    from the host (models/common/model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run, core_v0.15.0):
    the backward's recomputed forward if any, the backward's combine, the forward's attention and router, the
    backward's expert input gradients, the forward's dispatch, the backward's expert weight gradients
    (backward_dw) and dispatch, the forward's experts and combine, then the backward's attention (its weight
    gradients last) and the forward's tail. Within a step, graph order. It matters where kernels wait in one
    hardware queue (plan device_connections=1): an all-to-all then starts only after every kernel issued
    before it."""
    segment_of = _segments(graphs, cut_at_ep_only=True)
    keyed = []
    for gi, graph in enumerate(graphs):
        backward = any(op.phase != "fwd" for op in graph.ops)
        # A recomputed forward (its all-to-alls included) runs first, at the head of the layer's backward.
        replayed = sum(op.phase == "recompute" and op.is_comm and op.stream == "ep" for op in graph.ops)
        for oi, op in enumerate(graph.ops):
            kind = "a2a" if op.is_comm and op.stream == "ep" else "wgrad" if op.weight_grad else "kernel"
            if backward and op.phase == "recompute":
                step = -1.0
            elif backward:
                step = _BACKWARD_STEPS.get((segment_of[(gi, oi)] - replayed, kind), 10 if kind == "wgrad" else 9)
            else:
                step = _FORWARD_STEPS.get((segment_of[(gi, oi)], kind), 8.5)
            keyed.append(((step, segment_of[(gi, oi)], 0 if backward else 1, oi), gi, oi))
    keyed.sort()
    return [(gi, oi) for _, gi, oi in keyed]


def _segments(graphs: list[OpGraph], *, cut_at_ep_only: bool) -> dict[tuple[int, int], int]:
    """Each operator's segment: the cuts on its longest path from its graph's start, a cut being an all-to-all
    (``cut_at_ep_only``) or any collective."""
    out = {}
    for gi, graph in enumerate(graphs):
        segment = [0] * len(graph.ops)
        for oi, op in enumerate(graph.ops):
            for dep in op.deps:
                cut = graph.ops[dep].is_comm and (graph.ops[dep].stream == "ep" or not cut_at_ep_only)
                segment[oi] = max(segment[oi], segment[dep] + (1 if cut else 0))
            out[(gi, oi)] = segment[oi]
    return out


def zero3_exposed(compute_s: float, transfer_s: float, held: float) -> float:
    """Seconds a layer's sharded-DP transfer adds to its ``compute_s``: ZeRO-3 / FSDP prefetch gathers the
    next layer's parameters (in backward also reduce-scatters this layer's gradients) while this layer
    computes, so in steady state the layer takes the longer of the two; meanwhile the collective kernels
    hold a share ``held`` of the compute units and the compute runs on the rest (rate 1 - held).

    With r = 1 - held, compute finishes at c + held * min(t, c / r) and the layer at the later of that and
    the transfer t.
    """
    if transfer_s <= 0:
        return 0.0
    rate = max(1e-6, 1.0 - held)
    slowed = compute_s + held * min(transfer_s, compute_s / rate)
    return max(transfer_s, slowed) - compute_s


def read_by_backward(forward: OpGraph, rerun: set[int], dropped: set[int]) -> set[int]:
    """The re-run operators whose outputs the backward reads, directly or through other re-run operators.

    An output is read when a consumer whose stored input was dropped needs that input for its own
    backward (a GEMM's weight gradient, a norm's or activation's derivative: ``saved_bytes`` > 0), when a
    consumer is itself read, or, for attention, always (the flash backward reads its own output and
    log-sum-exp). A residual add's backward reads nothing, so a region's last projection (the MLP's
    down projection before the residual add) and the add itself are read by nothing: the layer's output
    is the next layer's stored input. Walked consumers-first (operators are in topological order)."""
    read: set[int] = set()
    for index in sorted(rerun, reverse=True):
        op = forward.ops[index]
        consumers = [j for j, other in enumerate(forward.ops) if index in other.deps]
        if op.kind == "attention" or any(
                j in read or (j in dropped and forward.ops[j].saved_bytes > 0) for j in consumers):
            read.add(index)
    return read


def recompute_graph(forward: OpGraph, mode: str, *, reads_only: bool = False) -> OpGraph:
    """The forward work re-run before a backward: the whole layer (full) or the selective modules.

    ``reads_only``: the stack re-runs only what the backward reads (JAX's remat partial-evaluates the
    layer and dead-code-eliminates the staged recomputation, ad_checkpoint.remat_partial_eval: "DCE
    jaxpr_staged, keeping only instantiated outputs which are unknown"); Megatron's and PyTorch's
    checkpointing re-run the whole checkpointed module forward."""
    if mode == "full":
        rerun = set(range(len(forward.ops)))
        # A fully recomputed layer keeps only its input: every operator's stored input is dropped.
        dropped = set(rerun)
    elif mode.startswith("selective"):
        rerun, dropped = recompute_selection(forward, mode)
    else:
        return OpGraph()
    if reads_only:
        rerun = read_by_backward(forward, rerun, dropped)
    kept = OpGraph()
    index_map: dict[int, int] = {}
    for index, op in enumerate(forward.ops):
        if index in rerun:
            deps = tuple(index_map[d] for d in op.deps if d in index_map)
            index_map[index] = kept.add(replace(op, phase="recompute", saved_bytes=0.0, deps=deps))
    return kept


def backward_with_recompute(forward: OpGraph, mode: str, *, reads_only: bool = False) -> list[OpGraph]:
    """Graphs played for one backward pass: recomputation (if any) then the backward DAG
    (``reads_only``: see :func:`recompute_graph`)."""
    backward = backward_of(forward)
    recompute = recompute_graph(forward, mode, reads_only=reads_only)
    if not len(recompute):
        return [backward]
    joined = OpGraph(list(recompute.ops))
    joined.extend(backward, entry_deps=tuple(recompute.sinks()))
    return [joined]


def split_weight_gradients(graph: OpGraph) -> tuple[OpGraph, OpGraph]:
    """A backward graph cut as a zero-bubble pipeline runs it (Qi et al. 2023, "Zero Bubble Pipeline
    Parallelism"; DualPipe's WeightGradStore): (the input-gradient part, which the previous stage
    waits for, with any recomputation; the weight-gradient operators, run later as one block).
    Weight gradients are sinks of the backward (nothing waits for them), so the first part keeps every
    other dependency; in the second the operators wait for nothing but each other's stream order.
    An operator that something outside the weight gradients waits for stays in the first part whatever
    it is (the main-gradient add of an unfused accumulation waits for its weight gradients and is one)."""
    used = {dep for op in graph.ops if not op.weight_grad for dep in op.deps}
    deferred = {i for i, op in enumerate(graph.ops) if op.weight_grad and i not in used}
    inputs, weights = OpGraph(), OpGraph()
    index_map: dict[int, int] = {}
    for index, op in enumerate(graph.ops):
        if index in deferred:
            weights.add(replace(op, deps=()))
        else:
            index_map[index] = inputs.add(replace(op, deps=tuple(index_map[d] for d in op.deps)))
    return inputs, weights


def with_main_grad_add(graphs: list[OpGraph], params: float, main_grad_bytes: float) -> list[OpGraph]:
    """The backward graphs followed by the unfused main-gradient accumulation of ``params`` weights.

    Without gradient-accumulation fusion the weight-gradient GEMM writes a 16-bit ``param.grad`` and
    Megatron's DDP hook adds it to the main gradient each micro-batch (``param.main_grad.add_(param.grad.data)``
    in distributed_data_parallel.py _make_param_hook, core_r0.6.0 and core_v0.12.1; MindSpeed keeps the hook):
    read the 16-bit gradient and the main gradient, write the main gradient: 2 + 2 x main_grad_bytes per weight,
    on the compute stream."""
    if params <= 0 or not graphs:
        return graphs
    last = OpGraph(list(graphs[-1].ops))
    moved = params * (2.0 + 2.0 * main_grad_bytes)
    last.add(Op("main_grad_add", "memory", flops=params, bytes_moved=moved, deps=tuple(last.sinks()),
                model_flops=False, phase="bwd", weight_grad=True))
    return graphs[:-1] + [last]


def saved_activation_bytes(forward: OpGraph, mode: str) -> float:
    """Activation bytes one layer keeps for its backward under a recompute mode (per micro-batch)."""
    if not forward.ops:
        return 0.0
    if mode == "full":
        first = forward.ops[0]
        # Only the layer input is checkpointed: the (SP-sharded) hidden state, 16-bit.
        return first.saved_bytes if first.kind == "memory" else 0.0
    if mode.startswith("selective"):
        # Checkpointing core attention keeps its inputs (Q, K, V) but not the score-sized softmax
        # and dropout tensors in between (Korthikanti et al. 2022); see recompute_selection.
        _, dropped = recompute_selection(forward, mode)
        return sum(op.saved_bytes for i, op in enumerate(forward.ops) if i not in dropped)
    return sum(op.saved_bytes for op in forward.ops)

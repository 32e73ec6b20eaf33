"""Operators: the static cost of one piece of work (FLOPs, bytes moved, bytes resident) and its stream.

An :class:`OpGraph` is a DAG of operators in a valid topological order; each operator names the
indices of the operators it waits for. Units: FLOPs, bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

COMPUTE_KINDS = ("gemm", "attention", "memory")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")

# Streams an operator can run on; communication gets its own stream per parallel group kind so
# that overlap between them comes out of the simulation.
STREAMS = ("compute", "tp", "cp", "ep", "dp", "pp")


@dataclass(frozen=True)
class Op:
    """One operator of one rank.

    kind: gemm | attention | memory (compute stream) or a collective name (communication stream).
    flops: floating-point operations executed by one instance (FLOPs).
    bytes_moved: HBM traffic of one instance (bytes) for compute ops; message size (bytes, the full
        buffer) for collectives.
    saved_bytes: activation bytes kept resident for the backward pass, all instances together.
    shape: (m, n, k) for GEMMs, (batch*heads, q_len, kv_len, head_dim) for attention, else None.
    group: the parallel group a collective spans (tp, cp, ep, dp, pp).
    count: identical instances run back to back (e.g. the experts of a grouped GEMM).
    fanout: for an expert all-to-all, the copies of each token in the message (top-k); a
        deduplicating dispatcher sends each token once per remote domain instead of once per copy.
    exponentials: for attention, the softmax exponentials one instance evaluates (one per score;
        the backward recomputes the probabilities, so it evaluates as many again). They run on the
        special-function units, whose throughput can bound the kernel instead of the tensor cores.
    backward_bytes: for a memory-bound op, the HBM traffic of its backward when it is not twice the
        forward's (e.g. a loss whose forward already wrote the gradient); 0 on a GEMM or convolution
        whose input has no gradient (a one-hot of the token ids, the model's images): weight gradient only.
    host_ops: the host (CPU) work to issue this operator (all ``count`` instances together), in
        units of one eager framework operation (Python, dispatcher and kernel launch); a kernel
        cannot start before the host has issued it.
    library_calls: for a grouped GEMM run as one library GEMM per expert, those per-expert calls;
        each costs the host a library call's setup and launch.
    backward_host_ops: host ops of the backward when they differ from the forward's (e.g. routing
        bookkeeping that has no gradient); a GEMM's data and weight gradients split them.
    unvectorized: for a memory-bound op, the share of its HBM traffic moved by eager PyTorch
        kernels whose operands are broadcast, strided or of mixed dtypes: TensorIterator runs those
        without vectorized loads, at a fraction of the contiguous kernels' bandwidth.
    kernel: for attention, the named kernel that runs it (the stack's: flash, fa2, triton-fa, ...),
        whose efficiency profile the cost model uses.
    host_sync: after issuing this operator the host waits until its inputs are done on the device,
        because it must read a value they computed (e.g. MoE token counts, which size the dispatch
        and the grouped GEMMs); the next operator is issued only then, so the device may drain.
    tp_chunked: for a TP all-gather or reduce-scatter, whether it is a linear layer's own collective,
        which TP-communication overlap (TE userbuffers, MC2) pipelines with its GEMM in chunks; the MoE
        dispatcher's explicit expert-TP collectives are not.
    quantized_in: for an FP8 GEMM, the phases ('fwd', 'bwd') in which its activation operand arrives
        already quantised, written so by the kernel before it (a fused grouped MLP quantises the activation's
        output in its epilogue, and the activation's gradient in the fused backward), so no cast kernel runs.
    quant_launches: for an FP8 grouped GEMM whose library quantises the activation operand expert by expert
        (Transformer Engine's split_quantize), the kernels that quantisation launches for all the experts: each
        costs the host a kernel launch and the device a kernel's fixed overhead. A backward's data-gradient GEMM
        carries the output gradient's (one quantisation serves both gradient GEMMs).
    weight_grad: a backward operator that forms a weight gradient (a GEMM's or convolution's wgrad):
        nothing in the backward waits for it, so a zero-bubble pipeline (DualPipe, ZB1P) may run it
        later, apart from the input-gradient work (train/layers.split_weight_gradients).
    """

    name: str
    kind: str
    stream: str = "compute"
    flops: float = 0.0
    bytes_moved: float = 0.0
    saved_bytes: float = 0.0
    shape: tuple[int, ...] | None = None
    group: str | None = None
    deps: tuple[int, ...] = ()
    phase: str = "fwd"
    model_flops: bool = True
    count: int = 1
    precision: str | None = None
    fanout: int = 1
    exponentials: float = 0.0
    backward_bytes: float | None = None
    host_ops: float = 1.0
    library_calls: int = 0
    backward_host_ops: float | None = None
    host_sync: bool = False
    unvectorized: float = 0.0
    kernel: str = ""
    tp_chunked: bool = True
    quantized_in: tuple[str, ...] = ()
    quant_launches: int = 0
    weight_grad: bool = False

    @property
    def launched_quantisations(self) -> int:
        """The per-expert quantisation kernels this operator runs in its phase (none where its operand
        arrives quantised)."""
        return 0 if self.phase in self.quantized_in else self.quant_launches

    @property
    def is_comm(self) -> bool:
        return self.kind in COLLECTIVES


@dataclass
class OpGraph:
    """A DAG of operators; ``add`` returns the new operator's index for use in later ``deps``."""

    ops: list[Op] = field(default_factory=list)

    def add(self, op: Op) -> int:
        for dep in op.deps:
            if not 0 <= dep < len(self.ops):
                raise ValueError(f"operator '{op.name}' depends on unknown index {dep}")
        self.ops.append(op)
        return len(self.ops) - 1

    def __len__(self) -> int:
        return len(self.ops)

    def extend(self, other: OpGraph, entry_deps: tuple[int, ...] = ()) -> list[int]:
        """Append ``other``; its source operators also wait for ``entry_deps``. Returns the new indices."""
        offset = len(self.ops)
        indices = []
        for op in other.ops:
            deps = tuple(d + offset for d in op.deps) or entry_deps
            indices.append(self.add(replace(op, deps=deps)))
        return indices

    def sinks(self) -> list[int]:
        """Operators nothing else waits for."""
        used = {d for op in self.ops for d in op.deps}
        return [i for i in range(len(self.ops)) if i not in used]

    def total(self, attribute: str, *, kinds: tuple[str, ...] | None = None) -> float:
        """Sum of an attribute (times ``count``) over operators, optionally of some kinds only."""
        return sum(getattr(op, attribute) * op.count for op in self.ops if kinds is None or op.kind in kinds)


def no_input_gradient(op: Op) -> bool:
    """A GEMM or convolution whose input has no gradient (the model's images, a one-hot of the token ids):
    marked by ``backward_bytes`` 0; its backward is the weight gradient alone."""
    return op.kind in ("gemm", "conv") and op.backward_bytes == 0.0


def backward_of(forward: OpGraph, *, comm_swap: dict[str, str] | None = None) -> OpGraph:
    """Derive the backward graph of a forward graph: reversed dependencies, backward costs per kind.

    GEMM: a data-gradient and a weight-gradient GEMM (2x FLOPs). Flash attention: 2.5x FLOPs (the
    backward kernel recomputes the scores and forms dQ, dK, dV). Memory-bound ops: twice the bytes.
    Collectives turn into their transposes (all-gather <-> reduce-scatter; all-reduce stays;
    all-to-all stays).
    """
    swap = comm_swap or {"all_gather": "reduce_scatter", "reduce_scatter": "all_gather"}
    n = len(forward.ops)
    users: list[list[int]] = [[] for _ in range(n)]
    for index, op in enumerate(forward.ops):
        for dep in op.deps:
            users[dep].append(index)
    backward = OpGraph()
    new_index: dict[int, int] = {}
    for index in range(n - 1, -1, -1):
        op = forward.ops[index]
        deps = tuple(sorted(new_index[u] for u in users[index]))
        # The backward knows every size from its forward, so it never waits for the device.
        base = dict(deps=deps, phase="bwd", saved_bytes=0.0, host_sync=False, backward_host_ops=None)
        if op.backward_host_ops is not None:
            base["host_ops"] = op.backward_host_ops / (2.0 if op.kind == "gemm" else 1.0)
        if op.kind == "gemm":
            m, nn, k = op.shape
            # The data gradient is what the previous operator waits for; the weight gradient only
            # has to finish before the step ends (it is a sink of the backward graph).
            wgrad = replace(op, name=op.name + ".wgrad", shape=(k, nn, m), weight_grad=True, backward_bytes=None, **base)
            if no_input_gradient(op):
                new_index[index] = backward.add(wgrad)
                continue
            new_index[index] = backward.add(replace(op, name=op.name + ".dgrad", shape=(m, k, nn), **base))
            backward.add(replace(wgrad, quant_launches=0))
        elif op.kind == "attention":
            new_index[index] = backward.add(replace(op, name=op.name + ".bwd", flops=op.flops * 2.5,
                                                    bytes_moved=op.bytes_moved * 2.0, **base))
        elif op.kind in ("conv", "gather", "sparse", "bmm"):
            from windtunnel.graph.kinds import kind_backward

            new_index[index] = kind_backward(backward, op, base)
        elif op.kind == "memory":
            bytes_moved = op.bytes_moved * 2.0 if op.backward_bytes is None else op.backward_bytes
            new_index[index] = backward.add(replace(op, name=op.name + ".bwd", bytes_moved=bytes_moved,
                                                    flops=op.flops * 2.0, backward_bytes=None, **base))
        else:
            # A collective's backward moves its forward's bytes unless the op says otherwise (backward_bytes).
            moved = op.bytes_moved if op.backward_bytes is None else op.backward_bytes
            new_index[index] = backward.add(replace(op, name=op.name + ".bwd", kind=swap.get(op.kind, op.kind),
                                                    bytes_moved=moved, backward_bytes=None, **base))
    return backward

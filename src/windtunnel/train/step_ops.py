"""The compute operators one pipeline rank runs in a training step, for tools that compare them with
measurements (profiler traces: windtunnel.profiling.fit_trace). A public view of the step builder, so
callers do not depend on its internals."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from windtunnel.cost.efficiency import Efficiency
from windtunnel.graph.ops import Op
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import Chip
from windtunnel.specs.plan import Plan
from windtunnel.specs.stack import Stack
from windtunnel.train.step import TrainingJob, _StepBuilder


@dataclass(frozen=True)
class StepOps:
    """What a step runs on one pipeline rank: each compute operator (all layers' forward and backward
    graphs, recomputation included) with how many times it runs per step, and the context it is costed in."""

    chip: Chip
    stack: Stack
    plan: Plan  # the resolved plan (stack defaults applied, dp filled in)
    eff: Efficiency  # the efficiency profile the step is costed with
    attention_kernel: str  # the attention kernel the stack runs ('flash', 'fa2', ...)
    flash_attention: bool
    micro_batches: int
    ops: list[tuple[Op, int]]


def step_compute_ops(job: TrainingJob, rank: int = 0) -> StepOps:
    """The compute operators pipeline rank ``rank`` runs in one step of ``job``, sorted by name."""
    builder = _StepBuilder(job)
    if not 0 <= rank < builder.plan.pp:
        raise WindtunnelError(f"Field 'rank' is {rank}, but the plan has {builder.plan.pp} pipeline rank(s); valid: "
                              f"0..{builder.plan.pp - 1}.", field="rank")
    counts: Counter[int] = Counter()
    ops: dict[int, Op] = {}
    for chunk in builder.chunks().values():
        if chunk.rank != rank:
            continue
        for kind, mode in zip(chunk.layers, chunk.modes, strict=True):
            for graph in (builder.forward_graphs[kind], *builder.backward_graphs(kind, mode)):
                for op in graph.ops:
                    if not op.is_comm:
                        ops[id(op)] = op
                        counts[id(op)] += builder.micro_batches
    ordered = [(ops[key], counts[key]) for key in sorted(ops, key=lambda k: ops[k].name)]
    return StepOps(chip=builder.chip, stack=builder.stack, plan=builder.plan, eff=builder.eff,
                   attention_kernel=builder.shard.attention_kernel, flash_attention=builder.flash_attention,
                   micro_batches=builder.micro_batches, ops=ordered)

"""Per-operator events of one pipeline rank, for ``train simulate --trace FILE --trace-detail op``.

The step's timeline is played at the pipeline level: each block is a forward or backward pass of one model
chunk (or of one layer of it). Every layer kind was played once on the event engine with its own streams
(compute, TP, CP, EP, DP, host; train/layers.py); this lays those layer timelines back into the blocks of
the chosen rank, one layer after another at the block's start, so the trace shows each operator on its
stream; the rank's pipeline sends (PP) and data-parallel collectives (DP) join them as they ran. Only the first ``micro_batches`` micro-batches are expanded (the others repeat them; their blocks
stay whole), which keeps the trace small for large jobs. Times are seconds. Nothing here runs unless asked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from windtunnel.engine.core import Timeline
from windtunnel.specs.errors import WindtunnelError
from windtunnel.train.layers import Played
from windtunnel.train.step import TrainingJob, _StepBuilder

OP_MICRO_BATCHES = 2  # micro-batches expanded per chunk (warm-up and the first steady one)
_BLOCK = re.compile(r"^(?P<kind>[FBDW]) mb(?P<mb>\d+) c(?P<chunk>\d+)(?: L(?P<layer>\d+))?$")
# A block's layer phase: a backward, or DualPipe's zero-bubble halves of one (input, weight gradients).
_PHASE = {"B": "bwd", "D": "dgrad", "W": "wgrad"}


@dataclass(frozen=True)
class OpEvent:
    """One operator of the chosen rank: its stream (compute, tp, cp, ep, dp, pp, host), category and span (s)."""

    stream: str
    name: str
    category: str
    start: float
    end: float
    block: str  # the pipeline block it belongs to (e.g. 'F mb0 c0')


def op_events(job: TrainingJob, timeline: Timeline, rank: int = 0,
              micro_batches: int = OP_MICRO_BATCHES) -> tuple[list[OpEvent], dict]:
    """The operators pipeline rank ``rank`` runs in the expanded blocks of ``timeline`` (the step's trace) and a
    summary ({'rank', 'micro_batches_expanded', 'blocks_expanded', 'blocks_whole'})."""
    builder = _StepBuilder(job)
    if not 0 <= rank < builder.plan.pp:
        raise WindtunnelError(f"Field 'trace-rank' is {rank}, but the plan has {builder.plan.pp} pipeline rank(s); "
                              f"valid: 0..{builder.plan.pp - 1}.", field="trace-rank")
    chunks = builder.chunks()
    layer_timelines: dict[tuple[str, str], Timeline] = {}

    def layer_timeline(kind: str, phase: str) -> Timeline | None:
        key = (kind, phase)
        if key not in layer_timelines:
            graphs = builder.phase_graphs(kind, phase)
            played: Played = builder.coster.play(graphs)  # the DAG alone (before ZeRO / offload extensions)
            layer_timelines[key] = played.timeline
        return layer_timelines[key]

    events: list[OpEvent] = []
    expanded = whole = 0
    stream = f"r{rank}"
    lanes = {f"{stream}.pp": "pp", f"{stream}.dp": "dp"}  # the rank's pipeline sends and DP collectives, as they ran
    for task, name in enumerate(timeline.names):
        if timeline.streams[task] in lanes:
            if timeline.end[task] > timeline.start[task]:
                events.append(OpEvent(lanes[timeline.streams[task]], name, timeline.categories[task],
                                      timeline.start[task], timeline.end[task], name))
            continue
        if timeline.streams[task] != stream:
            continue
        match = _BLOCK.match(name)
        if match is None:
            continue
        if int(match["mb"]) >= micro_batches:
            whole += 1
            continue
        chunk = chunks[(rank, int(match["chunk"]))]
        pairs = list(zip(chunk.layers, chunk.modes, strict=True))
        if match["kind"] == "F":
            order = [(kind, "fwd") for kind, _ in pairs]
        else:
            order = [(kind, f"{_PHASE[match['kind']]}-{mode}") for kind, mode in reversed(pairs)]
        if match["layer"] is not None:
            order = order[int(match["layer"]):int(match["layer"]) + 1]
        at = timeline.start[task]
        for kind, phase in order:
            layer = layer_timeline(kind, phase)
            if layer is not None:
                for op in range(len(layer.names)):
                    if layer.end[op] > layer.start[op]:
                        events.append(OpEvent(layer.streams[op], f"{kind}.{layer.names[op]}", layer.categories[op],
                                              at + layer.start[op], at + layer.end[op], name))
            at += builder.played(kind, phase).time
        expanded += 1
    summary = {"rank": rank, "micro_batches_expanded": micro_batches, "blocks_expanded": expanded,
               "blocks_whole": whole, "operators": len(events)}
    return events, summary

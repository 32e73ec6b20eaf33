"""A compiled play of one training step's pipeline: the same tasks, streams and dependencies as
:class:`windtunnel.train.pipeline_play.PipelinePlay` submits to the event engine, computed directly
as per-rank arrays of start and end times (seconds).

Every stream runs its tasks in order on its own resource, so a task starts when its stream's
previous task and its dependencies have ended: the play is a longest-path pass over the blocks,
done here without building engine tasks, names or a timeline. It is what the steady-state path
(:mod:`windtunnel.train.steady`) plays for a few micro-batches before extending the steady part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from windtunnel.cost.collectives import p2p_time
from windtunnel.graph.transformer import ACT_BYTES
from windtunnel.specs.errors import WindtunnelError
from windtunnel.train.offload_optimizer import rank_step_seconds
from windtunnel.train.schedule import Block, schedule_orders


@dataclass
class RankPlay:
    """One pipeline rank's played tasks: compute-stream tasks (start, end seconds, index into the
    play's table of parts), point-to-point sends and data-parallel transfers, and per block of its
    order the start of the block's first task and the hardware FLOPs it runs."""

    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    parts: list[int] = field(default_factory=list)
    pp_starts: list[float] = field(default_factory=list)
    pp_ends: list[float] = field(default_factory=list)
    dp_starts: list[float] = field(default_factory=list)
    dp_ends: list[float] = field(default_factory=list)
    block_start: list[float] = field(default_factory=list)
    block_flops: list[float] = field(default_factory=list)


@dataclass
class StepPlay:
    """A compiled play: the step's makespan (seconds), every rank's tasks, the block orders played
    and the table of compute parts (a dict of seconds per category, or a category name)."""

    makespan: float
    ranks: list[RankPlay]
    orders: list[list[Block]]
    table: list[dict[str, float] | str]


def play_compiled(builder: Any, chunks: dict, micro_batches: int) -> StepPlay:
    """Play ``micro_batches`` micro-batches of ``builder``'s step on its costed ``chunks``."""
    plan, cluster = builder.plan, builder.job.cluster
    pp, dual = plan.pp, builder.schedule == "dualpipe"
    orders = schedule_orders(builder.schedule, pp, plan.vpp, micro_batches, ep_overlap=plan.ep_overlap)
    p2p_bytes = ACT_BYTES * plan.mbs * builder.job.seq_len // plan.cp * builder.job.model.hidden
    if plan.sequence_parallel:
        p2p_bytes /= plan.tp
    p2p = p2p_time(p2p_bytes, builder.placement.pp_tier, cluster, builder.eff) if pp > 1 else 0.0
    table: list[dict[str, float] | str] = []
    index_of: dict[int, int] = {}

    def part(played: Any) -> int:
        key = id(played)
        if key not in index_of:
            index_of[key] = len(table)
            table.append(played.parts or "compute")
        return index_of[key]

    # Each chunk's place on its path: (path, position); a path's positions hold arrays by micro-batch.
    where = {key: ((key[1] if dual else 0), chunk.position) for key, chunk in chunks.items()}
    length = {key: chunk.path_length for key, chunk in chunks.items()}
    paths = {w: [None] * micro_batches for w in where.values()}
    forward_end = {w: list(paths[w]) for w in paths}
    send_f = {w: list(paths[w]) for w in paths}
    send_b = {w: list(paths[w]) for w in paths}
    ranks = [RankPlay() for _ in range(pp)]
    tail = [0.0] * pp
    pp_tail = [0.0] * pp
    dp_tail = [0.0] * pp
    sync_ends: list[float] = []
    dp_active = builder.placement.dp_active
    collective: dict[tuple[str, float, float], float] = {}

    def dp_time(kind: str, dense: float, expert: float) -> float:
        if (kind, dense, expert) not in collective:
            timer = builder.dp_bucket_time if kind == "sync" else builder.param_gather_time
            collective[(kind, dense, expert)] = timer(dense, expert)
        return collective[(kind, dense, expert)]

    gathers: dict[tuple[int, int], list[float]] = {}
    if plan.zero in (1, 2) and dp_active:
        for key, chunk in sorted(chunks.items()):
            ends = []
            for dense, expert in reversed(chunk.bucket_params):
                start = dp_tail[key[0]]
                dp_tail[key[0]] = start + dp_time("gather", dense, expert)
                ranks[key[0]].dp_starts.append(start)
                ranks[key[0]].dp_ends.append(dp_tail[key[0]])
                ends.append(dp_tail[key[0]])
            gathers[key] = ends
        if not plan.overlap_param_gather:
            # Without --overlap-param-gather the all-gather is synchronous: no forward starts before it ends.
            gathers = {key: [dp_tail[key[0]]] * len(ends) for key, ends in gathers.items()}
    needs_sync = plan.zero <= 1 and dp_active
    last_backward: dict[tuple[int, int], int] = {}
    for rank, order in enumerate(orders):
        for index, block in enumerate(order):
            # A chunk's gradients are whole after its last backward, or its last deferred weight gradient.
            if block.kind in ("B", "FB", "W"):
                last_backward[(rank, (block.partner[1] if block.kind == "FB" else block.chunk))] = index
    fused: dict[tuple[int, int, int], Any] = {}
    bucket_times = {key: [dp_time("sync", d, e) for d, e in chunk.bucket_params] for key, chunk in chunks.items()}

    def forward_ready(rank: int, mb: int, ch: int) -> float | None:
        path, position = where[(rank, ch)]
        if position == 0:
            return 0.0
        return send_f[(path, position - 1)][mb]

    def backward_ready(rank: int, mb: int, ch: int) -> float | None:
        key = (rank, ch)
        w = where[key]
        done = forward_end[w][mb]
        if done is None:
            return None
        if w[1] < length[key] - 1:
            sent = send_b[(w[0], w[1] + 1)][mb]
            if sent is None:
                return None
            return done if done > sent else sent
        return done

    def send(rank: int, end: float) -> float:
        """A point-to-point send on the rank's send stream after ``end``; returns when it arrives."""
        start = pp_tail[rank] if pp_tail[rank] > end else end
        pp_tail[rank] = start + p2p
        ranks[rank].pp_starts.append(start)
        ranks[rank].pp_ends.append(start + p2p)
        return start + p2p

    def after_forward(rank: int, mb: int, ch: int, end: float) -> None:
        key = (rank, ch)
        w = where[key]
        forward_end[w][mb] = end
        if w[1] < length[key] - 1:
            send_f[w][mb] = send(rank, end)

    def after_backward(rank: int, mb: int, ch: int, end: float) -> None:
        w = where[(rank, ch)]
        if w[1] > 0:
            send_b[w][mb] = send(rank, end)

    deferred: list[tuple[int, tuple[int, int]]] = []

    def dp_sync(rank: int, key: tuple[int, int], ends: list[float], defer: bool = True) -> None:
        if plan.zero >= 2:
            return
        if defer and not plan.overlap_grad_reduce:
            deferred.append((rank, key))
            return
        mine = ranks[rank]
        for duration, end in zip(bucket_times[key], ends, strict=False):
            start = dp_tail[rank] if dp_tail[rank] > end else end
            dp_tail[rank] = start + duration
            mine.dp_starts.append(start)
            mine.dp_ends.append(start + duration)
            sync_ends.append(start + duration)

    def compute(rank: int, ready: float, played: Any) -> float:
        mine = ranks[rank]
        start = tail[rank] if tail[rank] > ready else ready
        tail[rank] = end = start + played.time
        mine.starts.append(start)
        mine.ends.append(end)
        mine.parts.append(part(played))
        return end

    positions = [0] * pp
    progress = True
    sweep = 0
    while progress:
        progress = False
        # Forwards flow to higher ranks, backwards to lower ones: sweep both ways in turn.
        sweep += 1
        for rank in (range(pp) if sweep % 2 else range(pp - 1, -1, -1)):
            order = orders[rank]
            mine = ranks[rank]
            while positions[rank] < len(order):
                index = positions[rank]
                block = order[index]
                kind, mb, ch = block.kind, block.micro_batch, block.chunk
                if kind in ("D", "W"):
                    # Zero-bubble halves of a backward: D (input gradients) waits as a backward does
                    # and sends its gradient on; W (weight gradients) waits only for its stream.
                    ready = backward_ready(rank, mb, ch) if kind == "D" else 0.0
                    if ready is None:
                        break
                    chunk = chunks[(rank, ch)]
                    played = chunk.dgrad if kind == "D" else chunk.wgrad
                    mine.block_start.append(tail[rank] if tail[rank] > ready else ready)
                    mine.block_flops.append(played.flops)
                    end = compute(rank, ready, played)
                    if kind == "D":
                        after_backward(rank, mb, ch, end)
                    elif last_backward[(rank, ch)] == index and needs_sync:
                        dp_sync(rank, (rank, ch), [end] * len(chunk.bucket_params))
                elif kind == "B":
                    ready = backward_ready(rank, mb, ch)
                    if ready is None:
                        break
                    chunk = chunks[(rank, ch)]
                    mine.block_start.append(tail[rank] if tail[rank] > ready else ready)
                    mine.block_flops.append(chunk.backward.flops)
                    if last_backward[(rank, ch)] == index and needs_sync:
                        ends = []
                        for piece in chunk.backward_pieces:
                            ready = compute(rank, ready, piece)
                            ends.append(ready)
                        after_backward(rank, mb, ch, ends[-1])
                        dp_sync(rank, (rank, ch), ends)
                    else:
                        after_backward(rank, mb, ch, compute(rank, ready, chunk.backward))
                elif kind == "F":
                    ready = forward_ready(rank, mb, ch)
                    if ready is None:
                        break
                    chunk = chunks[(rank, ch)]
                    mine.block_start.append(tail[rank] if tail[rank] > ready else ready)
                    mine.block_flops.append(chunk.forward.flops)
                    if mb == 0 and (rank, ch) in gathers:
                        mine.block_start[-1] = max(mine.block_start[-1], gathers[(rank, ch)][0])
                        for piece, gather in zip(chunk.forward_pieces, gathers[(rank, ch)], strict=True):
                            ready = compute(rank, ready if ready > gather else gather, piece)
                        end = ready
                    else:
                        end = compute(rank, ready, chunk.forward)
                    after_forward(rank, mb, ch, end)
                else:
                    bmb, bch = block.partner
                    ready_f = forward_ready(rank, mb, ch)
                    ready_b = backward_ready(rank, bmb, bch)
                    if ready_f is None or ready_b is None:
                        break
                    ready = ready_f if ready_f > ready_b else ready_b
                    if mb == 0 and (rank, ch) in gathers:
                        ready = max(ready, *gathers[(rank, ch)])
                    if (rank, ch, bch) not in fused:
                        fchunk, bchunk = chunks[(rank, ch)], chunks[(rank, bch)]
                        fused[(rank, ch, bch)] = builder.fused(list(fchunk.layers), list(reversed(bchunk.layers)),
                                                               list(reversed(bchunk.modes)))
                    played = fused[(rank, ch, bch)]
                    mine.block_start.append(tail[rank] if tail[rank] > ready else ready)
                    mine.block_flops.append(played.flops)
                    end = compute(rank, ready, played)
                    after_forward(rank, mb, ch, end)
                    after_backward(rank, bmb, bch, end)
                    if last_backward[(rank, bch)] == index:
                        dp_sync(rank, (rank, bch), [end] * len(chunks[(rank, bch)].bucket_params))
                positions[rank] += 1
                progress = True
    if any(positions[r] < len(orders[r]) for r in range(pp)):
        raise WindtunnelError("Pipeline schedule deadlock: a block waits for one that never runs.")
    for rank, key in deferred:
        # Without --overlap-grad-reduce every bucket is reduced after the rank's whole backward.
        dp_sync(rank, key, [tail[rank]] * len(bucket_times[key]), defer=False)
    # The optimizer step waits for every rank's gradients (the gradient-norm all-reduce).
    barrier = max([*sync_ends, *tail])
    table.append("optimizer")
    for rank in range(pp):
        duration = rank_step_seconds(builder, chunks, rank)
        start = tail[rank] if tail[rank] > barrier else barrier
        tail[rank] = start + (duration + builder.eff.kernel_overhead_s)
        ranks[rank].starts.append(start)
        ranks[rank].ends.append(tail[rank])
        ranks[rank].parts.append(len(table) - 1)
    makespan = max([*tail, *pp_tail, *dp_tail])
    return StepPlay(makespan, ranks, orders, table)

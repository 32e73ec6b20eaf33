"""Steady-state pipelines: a training step's time and breakdown at a cost that does not grow with
the number of micro-batches.

A pipeline schedule repeats in its steady state: every ``period`` micro-batches (1 for 1F1B and its
EP-overlap form, pp for Megatron's interleaved schedule, 2 for DualPipe's two directions) each rank
runs the same blocks again, shifted by one period of time. So the step is played exactly (the
compiled play of :mod:`windtunnel.train.steady_play`) for a reduced count of micro-batches that
keeps warm-up, a few steady periods and cool-down; the played timeline is checked to be periodic
(every rank's blocks one period apart start exactly one period of time apart, the same on every
rank), and the missing periods are added analytically: step time + n x period, and per rank the
breakdown of one period's time window (compute parts, exposed communication, bubble) n times over.
When the check fails the reduced count grows; a step too short to have a steady part is played
whole. ``exact=True`` (or a kept trace) plays every micro-batch on the event engine instead.
Times are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from windtunnel.engine.attribution import attribute
from windtunnel.engine.core import Timeline
from windtunnel.train.schedule import Block
from windtunnel.train.steady_parts import rank_parts
from windtunnel.train.steady_play import StepPlay, play_compiled

# Relative tolerance of the periodicity check (of the step time): float noise, not physics.
PERIODIC_TOLERANCE = 1e-9
STEADY_PERIODS = 4  # steady periods first played (three are checked: a window and the periods around it)


@dataclass
class PlayedStep:
    """A step's makespan (seconds), breakdown averaged over the pipeline ranks (seconds), the costed
    chunks, hardware FLOPs per rank, the event timeline (exact plays only) and how it was played."""

    step: float
    breakdown: dict[str, float]
    chunks: dict
    flops: list[float]
    timeline: Timeline | None
    played_micro_batches: int


def play_step(builder: Any, *, exact: bool = False) -> PlayedStep:
    """The step of ``builder`` (a train.step._StepBuilder): steady-state by default, every
    micro-batch on the event engine with ``exact``."""
    if exact:
        return _exact(builder)
    chunks = builder.chunks()
    total = builder.micro_batches
    period = period_of(builder)
    warm = _warm_up(builder)
    # Two reduced plays at most: a short one (most pipelines repeat every period), then one long
    # enough to show timing cycles of up to pp periods (a few per interleaved group); each only
    # where it plays at most half the step, else the step is played whole.
    longest = 3 if builder.schedule == "interleaved" and builder.plan.vpp > 1 else builder.plan.pp
    spent = 0
    for count in (warm + STEADY_PERIODS * period, warm + (3 * longest + 4) * period):
        count += (total - count) % period
        if count > total // 2 or count <= spent:
            break
        play = play_compiled(builder, chunks, count)
        spent += count
        ends = (0, builder.plan.pp - 1)  # a candidate cycle is first tried on the end ranks only
        cycle = 1
        while _target(builder, count, cycle * period) - cycle * period >= warm // 2:
            if _windows(play, builder, cycle * period, count, only=ends) is not None:
                windows = _windows(play, builder, cycle * period, count)
                if windows is not None:
                    extended = _extend_to(builder, chunks, play, windows, cycle * period, count, total,
                                          total - spent)
                    if extended is not None:
                        return extended
                    break
            cycle += 1
    play = play_compiled(builder, chunks, total)
    span = np.full(len(play.ranks), play.makespan)
    breakdown = _breakdown(rank_parts(play.ranks, play.table, np.zeros(len(play.ranks)), span))
    flops = [sum(rank.block_flops) for rank in play.ranks]
    return PlayedStep(play.makespan, breakdown, chunks, flops, None, total)


def _extend_to(builder: Any, chunks: dict, play: StepPlay, windows: list, cycle: int, count: int,
               total: int, budget: int) -> PlayedStep | None:
    """Extend a periodic play of ``count`` micro-batches (timing period ``cycle`` micro-batches) to
    ``total``; when the difference is not whole cycles, replay the few micro-batches more that make it
    so, if that play fits the ``budget`` of micro-batches left."""
    rest = (total - count) % cycle
    if rest:
        count += rest
        if count + cycle > total or count > budget:
            return None
        play = play_compiled(builder, chunks, count)
        windows = _windows(play, builder, cycle, count)
        if windows is None:
            return None
    return _extend(play, windows, chunks, (total - count) // cycle, count)


def _exact(builder: Any) -> PlayedStep:
    """Every micro-batch on the event engine; breakdown by the engine's attribution per rank."""
    timeline, chunks, flops = builder.run()
    step = timeline.makespan
    pp = builder.plan.pp
    breakdown: dict[str, float] = {}
    by_rank: dict[str, list[int]] = {}
    for index, stream in enumerate(timeline.streams):
        by_rank.setdefault(stream.split(".", 1)[0], []).append(index)
    for rank in range(pp):
        parts = attribute(timeline, primary=f"r{rank}", others=(f"r{rank}.pp", f"r{rank}.dp"), until=step,
                          idle_label="bubble", tasks=by_rank.get(f"r{rank}", []))
        for key, value in parts.items():
            breakdown[key] = breakdown.get(key, 0.0) + value / pp
    return PlayedStep(step, dict(sorted(breakdown.items())), chunks, flops, timeline, builder.micro_batches)


def period_of(builder: Any) -> int:
    """Micro-batches after which every rank's block order repeats."""
    plan = builder.plan
    if builder.schedule == "dualpipe":
        return 2
    if builder.schedule == "interleaved" and plan.vpp > 1:
        return plan.pp
    return 1


def _warm_up(builder: Any) -> int:
    """Micro-batches before the first rank's steady state begins (its warm-up forwards)."""
    plan = builder.plan
    if builder.schedule == "dualpipe":
        return 2 * plan.pp
    if builder.schedule == "interleaved" and plan.vpp > 1:
        return -(-(2 * (plan.pp - 1) + (plan.vpp - 1) * plan.pp) // plan.vpp)
    return plan.pp


def _target(builder: Any, count: int, period: int) -> int:
    """The micro-batch whose chunk-0 forward opens the window: two periods before the last forward
    (DualPipe's cool-down begins about pp micro-batches earlier; its chunk 0 carries even ones)."""
    target = count - 1 - 2 * period - (builder.plan.pp if builder.schedule == "dualpipe" else 0)
    if builder.schedule == "dualpipe" and target % 2:
        target -= 1
    return target


def _same_shifted(a: Block, b: Block, shift: int) -> bool:
    """Whether block ``b`` is block ``a`` with every micro-batch ``shift`` later."""
    if a.kind != b.kind or a.chunk != b.chunk or b.micro_batch != a.micro_batch + shift:
        return False
    if a.partner is None or b.partner is None:
        return a.partner == b.partner
    return b.partner == (a.partner[0] + shift, a.partner[1])


def _windows(play: StepPlay, builder: Any, period: int, count: int,
             only: tuple[int, ...] | None = None) -> list[tuple[int, int, float]] | None:
    """Per rank (first block index, end block index, window start in seconds) of one steady period,
    or None when the played timeline is not yet periodic (then more micro-batches are needed).
    ``only``: check just these ranks (a cheap first test of a candidate cycle)."""
    target = _target(builder, count, period)
    marks = (target - period, target, target + period)
    if marks[0] < 0:
        return None
    windows = []
    cycle = None
    tolerance = PERIODIC_TOLERANCE * play.makespan
    checked = range(len(play.ranks)) if only is None else only
    for order, rank in ((play.orders[r], play.ranks[r]) for r in checked):
        found = {}
        for index, block in enumerate(order):
            if block.micro_batch in marks and block.chunk == 0 and block.kind in ("F", "FB") and block.micro_batch not in found:
                found[block.micro_batch] = index
        if len(found) < len(marks):
            return None
        at = [found[m] for m in marks]
        span = at[1] - at[0]
        if at[2] - at[1] != span or at[2] + span > len(order):
            return None
        for i in range(at[0], at[2]):
            if not _same_shifted(order[i], order[i + span], period):
                return None
        starts = rank.block_start
        shifts = [starts[i + span] - starts[i] for i in range(at[0], at[2])]
        if cycle is None:
            cycle = shifts[-1]
        if max(abs(s - cycle) for s in shifts) > tolerance:
            return None
        windows.append((at[1], at[2], starts[at[1]]))
    if cycle is None or cycle <= 0:
        return None
    return windows


def _extend(play: StepPlay, windows: list[tuple[int, int, float]], chunks: dict, repeats: int,
            played: int) -> PlayedStep:
    """The full step from a periodic reduced play: each rank gets ``repeats`` more copies of its window."""
    lo, hi, start = windows[0]
    cycle = play.ranks[0].block_start[hi] - play.ranks[0].block_start[lo]
    step = play.makespan + repeats * cycle
    n = len(play.ranks)
    per_rank = rank_parts(play.ranks, play.table, np.zeros(n), np.full(n, play.makespan))
    starts = np.asarray([start for _, _, start in windows])
    for whole, window in zip(per_rank, rank_parts(play.ranks, play.table, starts, starts + cycle), strict=True):
        for key, value in window.items():
            whole[key] = whole.get(key, 0.0) + repeats * value
    flops = [sum(rank.block_flops) + repeats * sum(rank.block_flops[lo:hi])
             for (lo, hi, _), rank in zip(windows, play.ranks, strict=True)]
    return PlayedStep(step, _breakdown(per_rank), chunks, flops, None, played)


def _breakdown(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """Average of the ranks' seconds per category (each rank spans the whole step)."""
    totals: dict[str, float] = {}
    for parts in per_rank:
        for key, value in parts.items():
            totals[key] = totals.get(key, 0.0) + value / len(per_rank)
    return dict(sorted(totals.items()))

"""Pipeline schedules: the order in which each pipeline rank runs forward and backward blocks.

A block is (kind, micro_batch, chunk): kind "F" (forward), "B" (backward), "FB" (a DualPipe
forward and backward of two different micro-batches run together so that one's communication
hides under the other's compute), "D" (a zero-bubble backward: the input gradients only, whose
weight gradients run later) or "W" (those deferred weight gradients of micro_batch's chunk). The
event engine plays these orders with their cross-stage dependencies; bubbles are what that
leaves idle.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Block:
    kind: str            # "F", "B", "FB", "D" or "W"
    micro_batch: int
    chunk: int
    partner: tuple[int, int] | None = None   # for "FB": the backward's (micro_batch, chunk)


def one_f_one_b(pp: int, rank: int, micro_batches: int) -> list[Block]:
    """Non-interleaved 1F1B (PipeDream-Flush): warm-up forwards, steady F/B pairs, cool-down backwards."""
    warmup = min(micro_batches, pp - rank - 1)
    order = [Block("F", i, 0) for i in range(warmup)]
    for i in range(micro_batches - warmup):
        order.append(Block("F", warmup + i, 0))
        order.append(Block("B", i, 0))
    order.extend(Block("B", i, 0) for i in range(micro_batches - warmup, micro_batches))
    return order


def interleaved(pp: int, vpp: int, rank: int, micro_batches: int) -> list[Block]:
    """Megatron's interleaved 1F1B with ``vpp`` model chunks per rank (Narayanan et al. 2021).

    Virtual micro-batch k runs chunk (k // pp) % vpp forwards (reversed for backwards) on
    micro-batch (k // (pp*vpp)) * pp + k % pp.
    """
    total = micro_batches * vpp

    def forward(k: int) -> Block:
        return Block("F", (k // (pp * vpp)) * pp + k % pp, (k // pp) % vpp)

    def backward(k: int) -> Block:
        return Block("B", (k // (pp * vpp)) * pp + k % pp, vpp - 1 - (k // pp) % vpp)

    warmup = min(total, (pp - rank - 1) * 2 + (vpp - 1) * pp)
    order = [forward(k) for k in range(warmup)]
    for i in range(total - warmup):
        order.append(forward(warmup + i))
        order.append(backward(i))
    order.extend(backward(k) for k in range(total - warmup, total))
    return order


def dualpipe(pp: int, micro_batches: int) -> list[list[Block]]:
    """DualPipe's bidirectional schedule (DeepSeek-V3 report arXiv:2412.19437 Sec. 3.2.1).

    Even micro-batches flow down (chunk 0: stage r on rank r), odd ones flow up (chunk 1: stage
    r on rank pp-1-r), so each rank holds two chunks and the pipeline fills from both ends. Where
    DualPipe itself runs (an even count of at least 2 pp micro-batches: dualpipe.py asserts
    ``num_chunks % 2 == 0 and num_chunks >= num_ranks * 2``) this is its own eight-step order,
    zero-bubble weight gradients included (:func:`dualpipe_step_order`); for other counts, which
    the engine still accepts, a greedy policy of the same shape (:func:`dualpipe_greedy`).
    """
    if micro_batches % 2 == 0 and micro_batches >= 2 * pp:
        return [dualpipe_step_order(pp, rank, micro_batches) for rank in range(pp)]
    return dualpipe_greedy(pp, micro_batches)


def dualpipe_step_order(pp: int, rank: int, micro_batches: int) -> list[Block]:
    """One rank's block order as deepseek-ai/DualPipe dualpipe.py ``DualPipe.step()`` runs it (at
    commit 3da1bbe), for ``micro_batches`` (even, >= 2 pp) split evenly between the two directions.

    A rank at distance h = min(rank, pp-1-rank) from an end calls "phase 0" its shallow stage
    (stage h: chunk 0 on the first half of the ranks, chunk 1 on the second) and "phase 1" its deep
    one. Steps: (1) 2(pp/2-h-1) forwards of phase 0; (2) h+1 times a forward of each phase;
    (3) pp/2-h-1 times a zero-bubble backward of phase 1 ("D"), one deferred weight gradient ("W",
    first in, first out) and a forward of phase 1; (4) the main step, half-pp+h+1 times an
    overlapped forward of phase 0 with a backward of phase 1 and a forward of phase 1 with a
    backward of phase 0 (the two middle ranks run their first pair apart, "to further reduce
    bubble size"); (5) pp/2-h-1 times a backward of phase 1 and an overlapped forward of phase 1
    with a backward of phase 0; (6) h+1 times a backward of each phase, zero-bubble from the middle
    iteration on; (7) pp/2-h-1 times a deferred weight gradient and a zero-bubble backward of
    phase 0; (8) the h+1 weight gradients left. The overlapped pairs run full backwards.
    """
    half_ranks, half = pp // 2, micro_batches // 2
    h = min(rank, pp - 1 - rank)
    second = rank >= half_ranks
    middle = h == half_ranks - 1
    chunk_of = (1, 0) if second else (0, 1)            # phase -> chunk
    forwards, backwards = [0, 0], [0, 0]               # per chunk: blocks issued
    deferred: list[tuple[int, int]] = []               # (micro_batch, chunk) of the D blocks, FIFO
    order: list[Block] = []

    def forward(phase: int) -> Block:
        chunk = chunk_of[phase]
        forwards[chunk] += 1
        return Block("F", 2 * (forwards[chunk] - 1) + chunk, chunk)

    def backward(phase: int, zero_bubble: bool = False) -> Block:
        chunk = chunk_of[phase]
        backwards[chunk] += 1
        mb = 2 * (backwards[chunk] - 1) + chunk
        if zero_bubble:
            deferred.append((mb, chunk))
            return Block("D", mb, chunk)
        return Block("B", mb, chunk)

    def pair(forward_phase: int) -> Block:
        f = forward(forward_phase)
        b = backward(1 - forward_phase)
        return Block("FB", f.micro_batch, f.chunk, partner=(b.micro_batch, b.chunk))

    def weight() -> Block:
        mb, chunk = deferred.pop(0)
        return Block("W", mb, chunk)

    order += [forward(0) for _ in range(2 * (half_ranks - h - 1))]                      # step 1
    for _ in range(h + 1):                                                              # step 2
        order += [forward(0), forward(1)]
    for _ in range(half_ranks - h - 1):                                                 # step 3
        order += [backward(1, zero_bubble=True), weight(), forward(1)]
    for i in range(half - pp + h + 1):                                                  # step 4
        order += [forward(0), backward(1)] if (i == 0 and middle) else [pair(0)]
        order.append(pair(1))
    for _ in range(half_ranks - h - 1):                                                 # step 5
        order += [backward(1), pair(1)]
    zero_bubble = False                                                                 # step 6
    for i in range(h + 1):
        if i == (h + 1) // 2 and h % 2 == 1:
            zero_bubble = True
        order.append(backward(1, zero_bubble))
        if i == (h + 1) // 2 and h % 2 == 0:
            zero_bubble = True
        order.append(backward(0, zero_bubble))
    for _ in range(half_ranks - h - 1):                                                 # step 7
        order += [weight(), backward(0, zero_bubble=True)]
    order += [weight() for _ in range(len(deferred))]                                   # step 8
    return order


def dualpipe_greedy(pp: int, micro_batches: int) -> list[list[Block]]:
    """A DualPipe-shaped schedule for micro-batch counts DualPipe itself does not run (odd, or
    fewer than 2 pp): each direction keeps at most the 1F1B number of micro-batches in flight; when
    a rank has both a forward and a backward ready it runs them as one overlapped "FB" block. The
    order is found by playing this policy in unit time steps, which makes it free of deadlocks by
    construction.
    """
    done: set[tuple[str, int, int]] = set()
    next_forward = [[mb for mb in range(micro_batches) if mb % 2 == 0], [mb for mb in range(micro_batches) if mb % 2 == 1]]
    forward_index = [[0, 0] for _ in range(pp)]
    in_flight = [[0, 0] for _ in range(pp)]
    pending_backward: list[list[tuple[int, int]]] = [[] for _ in range(pp)]
    orders: list[list[Block]] = [[] for _ in range(pp)]

    def stage_of(rank: int, chunk: int) -> int:
        return rank if chunk == 0 else pp - 1 - rank

    def forward_ready(rank: int, chunk: int) -> int | None:
        index = forward_index[rank][chunk]
        if index >= len(next_forward[chunk]):
            return None
        limit = (pp - rank) if chunk == 0 else (rank + 1)
        if in_flight[rank][chunk] >= limit:
            return None
        mb = next_forward[chunk][index]
        stage = stage_of(rank, chunk)
        if stage > 0 and ("F", mb, stage - 1) not in done:
            return None
        return mb

    def backward_ready(rank: int) -> tuple[int, int] | None:
        for mb, chunk in pending_backward[rank]:
            stage = stage_of(rank, chunk)
            if stage == pp - 1 and ("F", mb, stage) in done:
                return mb, chunk
            if stage < pp - 1 and ("B", mb, stage + 1) in done:
                return mb, chunk
        return None

    total = 2 * micro_batches * pp
    finished = 0
    guard = 0
    while finished < total:
        guard += 1
        if guard > 4 * total + 16:
            raise RuntimeError("DualPipe schedule did not converge")
        completed: list[tuple[str, int, int]] = []
        for rank in range(pp):
            back = backward_ready(rank)
            fwd_chunk = None
            fwd_mb = None
            # alternate directions so that both pipelines fill
            for chunk in sorted((0, 1), key=lambda c: forward_index[rank][c]):
                mb = forward_ready(rank, chunk)
                if mb is not None:
                    fwd_chunk, fwd_mb = chunk, mb
                    break
            if back is not None and fwd_mb is not None:
                orders[rank].append(Block("FB", fwd_mb, fwd_chunk, partner=back))
            elif back is not None:
                orders[rank].append(Block("B", back[0], back[1]))
            elif fwd_mb is not None:
                orders[rank].append(Block("F", fwd_mb, fwd_chunk))
            if back is not None:
                pending_backward[rank].remove(back)
                in_flight[rank][back[1]] -= 1
                completed.append(("B", back[0], stage_of(rank, back[1])))
                finished += 1
            if fwd_mb is not None:
                forward_index[rank][fwd_chunk] += 1
                in_flight[rank][fwd_chunk] += 1
                pending_backward[rank].append((fwd_mb, fwd_chunk))
                completed.append(("F", fwd_mb, stage_of(rank, fwd_chunk)))
                finished += 1
        done.update(completed)
    return orders


def overlapped(order: list[Block]) -> list[Block]:
    """Megatron's EP all-to-all overlap: one more warm-up forward, then every forward runs together
    with the next backward (of an earlier micro-batch) as one "FB" block, so neither half of a pair
    waits for the other; the remaining backwards cool down alone."""
    forwards = [block for block in order if block.kind == "F"]
    backwards = [block for block in order if block.kind == "B"]
    # The plain order runs its warm-up forwards and the first steady forward before any backward;
    # all of those now run alone, so the first pair's forward is one micro-batch further ahead.
    lead = next((i for i, block in enumerate(order) if block.kind == "B"), len(order))
    pairs = [Block("FB", f.micro_batch, f.chunk, partner=(b.micro_batch, b.chunk))
             for f, b in zip(forwards[lead:], backwards, strict=False)]
    return forwards[:lead] + pairs + backwards[len(pairs):]


def schedule_orders(name: str, pp: int, vpp: int, micro_batches: int, *, ep_overlap: bool = False) -> list[list[Block]]:
    """The block order of every pipeline rank for schedule ``name`` (fresh lists; the orders are
    built once per process for each schedule, pipeline and micro-batch count)."""
    return [list(order) for order in _orders(name, pp, vpp, micro_batches, ep_overlap)]


@lru_cache(maxsize=256)
def _orders(name: str, pp: int, vpp: int, micro_batches: int, ep_overlap: bool) -> tuple[tuple[Block, ...], ...]:
    return tuple(tuple(order) for order in _build_orders(name, pp, vpp, micro_batches, ep_overlap=ep_overlap))


def _build_orders(name: str, pp: int, vpp: int, micro_batches: int, *, ep_overlap: bool = False) -> list[list[Block]]:
    if name == "dualpipe":
        return dualpipe(pp, micro_batches)
    if name == "interleaved" and vpp > 1:
        orders = [interleaved(pp, vpp, rank, micro_batches) for rank in range(pp)]
    else:
        orders = [one_f_one_b(pp, rank, micro_batches) for rank in range(pp)]
    return [overlapped(order) for order in orders] if ep_overlap else orders


def in_flight_micro_batches(name: str, pp: int, vpp: int, rank: int, micro_batches: int) -> float:
    """Micro-batch activations (in units of one chunk's layers) a rank holds at its peak.

    The EP overlap holds no more than this plus one layer (train/memory.py step_memory): it runs one more
    warm-up forward alone (the one the plain schedule runs before its first backward), then each forward
    together with an earlier micro-batch's backward, layer by layer (forward layer i beside backward layer
    L-1-i: Megatron-Core core_v0.15.0 TransformerModelChunkSchedulePlan.run, combined_1f1b.py), so the
    backward frees a layer as the forward fills one."""
    if name == "dualpipe":
        return float(min(micro_batches, pp + 1))
    if name == "interleaved" and vpp > 1:
        warmup = min(micro_batches * vpp, (pp - rank - 1) * 2 + (vpp - 1) * pp)
        return float(min(micro_batches * vpp, warmup + 1))
    return float(min(micro_batches, pp - rank))

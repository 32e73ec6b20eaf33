"""Pipeline schedules (1F1B, interleaved, DualPipe), the event engine, and the pipeline bubble."""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from conftest import small_dense
from windtunnel import simulate_training
from windtunnel.cost.efficiency import _fitted
from windtunnel.engine.core import Engine
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.model import load_model
from windtunnel.specs.plan import parse_plan
from windtunnel.train.schedule import (
    dualpipe,
    in_flight_micro_batches,
    interleaved,
    one_f_one_b,
    schedule_orders,
)
from windtunnel.train.step import TrainingJob, simulate


def work_items(order):
    """(kind, micro_batch, chunk) items of an order; an FB block counts as its F and its partner's B, a
    zero-bubble D as the B it starts (its W, which must come after it, adds no item)."""
    items = []
    deferred = set()
    for block in order:
        if block.kind in ("F", "B"):
            items.append((block.kind, block.micro_batch, block.chunk))
        elif block.kind == "D":
            items.append(("B", block.micro_batch, block.chunk))
            deferred.add((block.micro_batch, block.chunk))
        elif block.kind == "W":
            deferred.remove((block.micro_batch, block.chunk))
        else:
            assert block.kind == "FB" and block.partner is not None
            items.append(("F", block.micro_batch, block.chunk))
            items.append(("B", *block.partner))
    return items


def peak_in_flight(order) -> int:
    """Most forward chunks whose backward has not run yet, walking the order."""
    current = best = 0
    for block in order:
        if block.kind == "F":
            current += 1
        elif block.kind in ("B", "D"):  # a zero-bubble D frees what its deferred W does not need
            current -= 1
        elif block.kind == "FB":  # the forward's activations exist while the backward runs
            best = max(best, current + 1)
        best = max(best, current)
    return best


@pytest.mark.parametrize("pp,mb", [(1, 1), (4, 2), (4, 4), (4, 16), (8, 3)])
def test_one_f_one_b_complete(pp, mb):
    """1F1B: every rank runs F and B of every micro-batch exactly once, each B after its F."""
    for rank in range(pp):
        items = work_items(one_f_one_b(pp, rank, mb))
        expected = {(k, i, 0) for k in "FB" for i in range(mb)}
        assert Counter(items) == Counter(expected)
        assert all(items.index(("F", i, 0)) < items.index(("B", i, 0)) for i in range(mb))


@pytest.mark.parametrize("pp,vpp,mb", [(2, 2, 2), (4, 2, 4), (4, 2, 8), (4, 3, 12), (2, 4, 6)])
def test_interleaved_complete(pp, vpp, mb):
    """Interleaved 1F1B: every (F/B, micro-batch, chunk) exactly once per rank; each B after its F; backward
    of a micro-batch runs its chunks in reverse order."""
    for rank in range(pp):
        items = work_items(interleaved(pp, vpp, rank, mb))
        expected = {(k, i, c) for k in "FB" for i in range(mb) for c in range(vpp)}
        assert Counter(items) == Counter(expected)
        for i in range(mb):
            for c in range(vpp):
                assert items.index(("F", i, c)) < items.index(("B", i, c))
            fwd = [items.index(("F", i, c)) for c in range(vpp)]
            bwd = [items.index(("B", i, c)) for c in reversed(range(vpp))]
            assert fwd == sorted(fwd) and bwd == sorted(bwd)


@pytest.mark.parametrize("pp,mb", [(2, 2), (4, 4), (4, 9), (8, 16)])
def test_dualpipe_complete(pp, mb):
    """DualPipe: on every rank each micro-batch runs F and B once, on chunk mb % 2 (even down, odd up), B after F."""
    orders = dualpipe(pp, mb)
    assert len(orders) == pp
    for order in orders:
        items = work_items(order)
        expected = {(k, i, i % 2) for k in "FB" for i in range(mb)}
        assert Counter(items) == Counter(expected)
        for i in range(mb):
            assert items.index(("F", i, i % 2)) < items.index(("B", i, i % 2))
    if mb >= 2 * pp:  # at steady state every rank overlaps a forward with a backward
        assert all(any(b.kind == "FB" for b in order) for order in orders)


def test_schedule_orders_dispatch():
    """schedule_orders picks the schedule by name; interleaved with vpp=1 is plain 1F1B."""
    assert schedule_orders("1f1b", 4, 1, 8) == [one_f_one_b(4, r, 8) for r in range(4)]
    assert schedule_orders("interleaved", 4, 2, 8) == [interleaved(4, 2, r, 8) for r in range(4)]
    assert schedule_orders("interleaved", 4, 1, 8) == [one_f_one_b(4, r, 8) for r in range(4)]
    assert schedule_orders("dualpipe", 4, 1, 8) == dualpipe(4, 8)


@pytest.mark.parametrize("pp,mb", [(4, 2), (4, 8), (8, 3), (2, 16)])
def test_in_flight_matches_1f1b_order(pp, mb):
    """Activation memory count for 1F1B = peak forwards-without-backward in the rank's order."""
    for rank in range(pp):
        assert in_flight_micro_batches("1f1b", pp, 1, rank, mb) == peak_in_flight(one_f_one_b(pp, rank, mb))


@pytest.mark.parametrize("pp,vpp,mb", [
    (4, 2, 8),
    (4, 3, 16),
    (2, 2, 2),
    (4, 2, 4),
])
def test_in_flight_matches_interleaved_order(pp, vpp, mb):
    """Activation memory count for interleaved 1F1B = peak chunks in flight in the rank's order
    (never more than the micro_batches*vpp chunks that exist)."""
    for rank in range(pp):
        got = in_flight_micro_batches("interleaved", pp, vpp, rank, mb)
        assert got <= mb * vpp
        assert got == peak_in_flight(interleaved(pp, vpp, rank, mb))


@pytest.mark.parametrize("pp,mb", [(4, 4), (4, 16), (8, 32)])
def test_in_flight_bounds_dualpipe_order(pp, mb):
    """DualPipe's activation count is an upper bound on (and at steady state equal to) the order's peak."""
    orders = dualpipe(pp, mb)
    for rank in range(pp):
        assert in_flight_micro_batches("dualpipe", pp, 1, rank, mb) >= peak_in_flight(orders[rank])
    if mb >= 2 * pp:
        assert max(peak_in_flight(o) for o in orders) == in_flight_micro_batches("dualpipe", pp, 1, 0, mb)


# ---- engine ------------------------------------------------------------------------------------------


def test_engine_overlaps_streams():
    """Two independent tasks on different streams overlap: makespan is the longer one."""
    e = Engine()
    e.task("a", "compute", 3.0)
    e.task("b", "tp", 2.0)
    t = e.run()
    assert t.makespan == pytest.approx(3.0)
    assert t.start == [0.0, 0.0]


def test_engine_dependency_serialises():
    """A dependency across streams serialises: makespan is the sum, and the user starts at the producer's end."""
    e = Engine()
    a = e.task("a", "compute", 3.0)
    b = e.task("b", "tp", 2.0, deps=[a])
    t = e.run()
    assert t.start[b] == pytest.approx(3.0) and t.makespan == pytest.approx(5.0)


def test_engine_stream_is_in_order():
    """Tasks on one stream run one at a time in submission order, even when a later one is ready first."""
    e = Engine()
    slow = e.task("slow", "comm", 5.0)
    waiting = e.task("waiting", "compute", 1.0, deps=[slow])
    ready = e.task("ready", "compute", 1.0)  # behind 'waiting' on the same stream
    t = e.run()
    assert t.start[waiting] == pytest.approx(5.0)
    assert t.start[ready] == pytest.approx(6.0)
    assert t.makespan == pytest.approx(7.0)


def test_engine_diamond():
    """A diamond DAG over three streams: makespan is the critical path."""
    e = Engine()
    a = e.task("a", "s0", 1.0)
    b = e.task("b", "s1", 4.0, deps=[a])
    c = e.task("c", "s2", 2.0, deps=[a])
    d = e.task("d", "s0", 1.0, deps=[b, c])
    t = e.run()
    assert t.start[d] == pytest.approx(5.0) and t.makespan == pytest.approx(6.0)


def test_engine_rejects_impossible_order():
    """A task that waits for one queued behind it on the same stream can never run: WindtunnelError."""
    e = Engine()
    e.task("first", "compute", 1.0, deps=[1])
    e.task("second", "compute", 1.0)
    with pytest.raises(WindtunnelError, match="deadlock"):
        e.run()


def test_engine_rejects_cross_stream_cycle():
    """Two streams each waiting on the other's second task: WindtunnelError, not a hang."""
    e = Engine()
    e.task("x1", "s0", 1.0, deps=[3])
    e.task("x2", "s0", 1.0)
    e.task("y1", "s1", 1.0, deps=[1])
    e.task("y2", "s1", 1.0)
    with pytest.raises(WindtunnelError):
        e.run()


def test_engine_negative_duration_rejected():
    """Negative durations are a programming error."""
    with pytest.raises(ValueError):
        Engine().task("bad", "compute", -1.0)


# ---- bubble ------------------------------------------------------------------------------------------


def _bubble_share(gb: int, plan: str) -> float:
    r = simulate_training(small_dense(), "h100-sxm", 4, seq_len=2048, global_batch=gb, plan=plan)
    assert r.micro_batches == gb
    return r.breakdown.get("bubble", 0.0) / r.step_time_s


def test_bubble_shrinks_with_more_micro_batches():
    """pp=4 1F1B: the bubble share falls from ~(p-1)/(m+p-1) = 3/7 at 4 micro-batches to well under half of it at 32."""
    few = _bubble_share(4, "tp=1,pp=4")
    many = _bubble_share(32, "tp=1,pp=4")
    assert few == pytest.approx(3 / 7, abs=0.08)
    assert many < few / 2


def test_no_pipeline_no_bubble():
    """pp=1 has no pipeline bubble."""
    r = simulate_training(small_dense(), "h100-sxm", 4, seq_len=2048, global_batch=8, plan="tp=1")
    assert r.breakdown.get("bubble", 0.0) == pytest.approx(0.0, abs=1e-9 * r.step_time_s)


@pytest.mark.parametrize("plan", ["tp=1,pp=4,vpp=2", "tp=1,pp=4,schedule=dualpipe"])
def test_interleaving_and_dualpipe_shrink_the_bubble(plan):
    """At 8 micro-batches, interleaving (vpp=2) and DualPipe leave a smaller bubble than plain 1F1B."""
    assert _bubble_share(8, plan) < _bubble_share(8, "tp=1,pp=4")


@pytest.mark.parametrize("pp,vpp,mb", [(1, 1, 2), (1, 1, 7), (2, 2, 4), (4, 2, 8), (4, 3, 12)])
def test_ep_overlap_pairs_every_steady_forward_with_an_earlier_backward(pp, vpp, mb):
    """EP overlap: the same work as the plain schedule, each B after its F, and no FB block holds a
    forward and a backward of the same micro-batch and chunk (they would wait for each other)."""
    name = "interleaved" if vpp > 1 else "1f1b"
    plain = schedule_orders(name, pp, vpp, mb)
    paired = schedule_orders(name, pp, vpp, mb, ep_overlap=True)
    for rank in range(pp):
        items = work_items(paired[rank])
        assert Counter(items) == Counter(work_items(plain[rank]))
        assert all(items.index(("F", i, c)) < items.index(("B", i, c)) for i in range(mb) for c in range(vpp))
        blocks = [b for b in paired[rank] if b.kind == "FB"]
        assert blocks and all((b.micro_batch, b.chunk) != b.partner for b in blocks)
        # Counted in whole blocks, a pair holds both its micro-batches until it ends: at most one more than the
        # plain schedule's peak. Layer by layer it holds one layer more (train/memory.py step_memory).
        assert peak_in_flight(paired[rank]) <= in_flight_micro_batches(name, pp, vpp, rank, mb) + 1


@pytest.mark.parametrize("plan", ["tp=1,pp=1,ep=8,mbs=1", "tp=1,pp=2,vpp=4,ep=4,mbs=1"])
def test_ep_overlap_hides_all_to_all_and_costs_memory(plan):
    """Overlapping the expert all-to-alls with another micro-batch's compute never slows the step, hides
    communication, and holds one more layer of activations (the forward fills a layer beside the backward that
    frees one), not one more micro-batch."""
    kwargs = dict(seq_len=4096, global_batch=32, moe_imbalance=1.0)
    base = simulate_training("qwen3-30b-a3b", "gb200", 8, plan=plan + ",recompute=none,precision=fp8", **kwargs)
    over = simulate_training("qwen3-30b-a3b", "gb200", 8, plan=plan + ",recompute=none,precision=fp8,ep_overlap=true",
                             **kwargs)
    assert over.step_time_s < base.step_time_s
    assert over.breakdown["ep_comm"] < base.breakdown["ep_comm"]
    assert over.memory_breakdown["activations"] > base.memory_breakdown["activations"]
    layers = load_model("qwen3-30b-a3b").layers
    pp = 2 if "pp=2" in plan else 1
    # One MoE layer more: well under the two layers a rank's own chunk share would add at pp=1.
    assert over.memory_breakdown["activations"] - base.memory_breakdown["activations"] < \
        2.5 * base.memory_breakdown["activations"] / (layers / pp)


@pytest.mark.parametrize(("plan", "needle"), [
    ("tp=1,pp=1,ep=1,ep_overlap=true", "ep is 1"),
    ("tp=1,pp=2,ep=4,ep_overlap=true", "interleaved"),
    ("tp=1,pp=2,ep=4,schedule=dualpipe,ep_overlap=true", "DualPipe"),
])
def test_ep_overlap_outside_its_schedules_is_a_clear_error(plan, needle):
    with pytest.raises(WindtunnelError, match=needle):
        simulate_training("qwen3-30b-a3b", "gb200", 8, seq_len=4096, global_batch=32, plan=plan)


def test_overlapped_all_to_alls_take_compute_units_from_the_overlapped_compute():
    """With EP overlap the all-to-all kernels hold SMs (20 by the catalog's prior), so the overlapped
    compute runs slower than the same blocks would with a free communication engine."""
    kwargs = dict(seq_len=4096, global_batch=512, moe_imbalance=1.0)
    plan = "tp=1,pp=1,ep=8,mbs=4,recompute=none,precision=fp8,ep_overlap=true"
    carved = simulate_training("qwen3-30b-a3b", "gb200", 8, plan=plan, **kwargs)
    free = copy.deepcopy(_fitted())
    free.setdefault("chips", {}).setdefault("gb200", {})["overlap_comm_units"] = 0
    job = TrainingJob(model=load_model("qwen3-30b-a3b"), cluster=load_hardware("gb200", 8), plan=parse_plan(plan),
                      fitted_override=free, **kwargs)
    uncarved = simulate(job)
    assert carved.breakdown["compute"] > uncarved.breakdown["compute"]
    assert carved.step_time_s > uncarved.step_time_s
    # Without overlap nothing runs beside the compute: no carve-out.
    plain = "tp=1,pp=1,ep=8,mbs=4,recompute=none,precision=fp8"
    a = simulate_training("qwen3-30b-a3b", "gb200", 8, plan=plain, **kwargs)
    b = simulate(TrainingJob(model=load_model("qwen3-30b-a3b"), cluster=load_hardware("gb200", 8),
                             plan=parse_plan(plain), fitted_override=free, **kwargs))
    assert a.step_time_s == b.step_time_s

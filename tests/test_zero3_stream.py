"""DeepSpeed ZeRO-3 played on the compute stream and one collective stream (train/zero3_stream.py): one-ahead
prefetch, releases under the reuse distance, reduce buckets with the small gradients, and the step builder's
use of it (train/zero3.py stream_exposed). Seconds; sizes in parameters."""

from __future__ import annotations

import pytest

from conftest import small_dense
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.plan import parse_plan
from windtunnel.specs.stack import Sharding, load_stack
from windtunnel.train.step import TrainingJob, _StepBuilder, simulate
from windtunnel.train.zero3 import stream_exposed
from windtunnel.train.zero3_stream import Submodule, play_step

P = 1.0e8  # one weight matrix, above the prefetch bucket


def _play(layer, layers=4, *, recompute=False, gather=0.1, reduce=0.1, max_reuse=0.0, bucket=P, counts=None):
    def g(n):
        if counts is not None:
            counts["gather"] += 1
        return gather

    def r(n):
        if counts is not None:
            counts["reduce"] += 1
        return reduce

    return play_step(layer, layers, recompute=recompute, gather=g, reduce=r, prefetch_bucket=5e7,
                     max_live=float("inf"), max_reuse=max_reuse, reduce_bucket=bucket)


def test_compute_bound_forward_exposes_only_the_first_gather():
    """Each gather runs one submodule ahead, under the previous one's compute: only the first waits."""
    layer = [Submodule(P, 1.0, 2.0, (P,)), Submodule(P, 1.0, 2.0, (P,))]
    for layers in (2, 8):
        assert _play(layer, layers).forward_exposed_s == pytest.approx(0.1)


def test_transfer_bound_forward_takes_the_gathers():
    layer = [Submodule(P, 0.2, 0.4, (P,))]
    step = _play(layer, 6, gather=1.0)
    assert step.forward_s == pytest.approx(6 * 1.0 + 0.2)
    assert step.forward_comm_s == pytest.approx(6.0)


def test_released_parameters_are_gathered_again_after_a_recomputed_forward():
    """With full recomputation a layer is gathered for the forward and the recomputed forward; its backward
    gathers again what was released in between (beyond the reuse distance), nothing when all is kept."""
    layer = [Submodule(P, 1.0, 2.0, (P,)), Submodule(P, 1.0, 2.0, (P,)), Submodule(P, 1.0, 2.0, (P,))]
    kept, released = {"gather": 0, "reduce": 0}, {"gather": 0, "reduce": 0}
    _play(layer, 4, recompute=True, max_reuse=1e15, counts=kept)
    _play(layer, 4, recompute=True, max_reuse=1.5 * P, counts=released)
    assert kept["gather"] == 3 * 4  # each weight once a step
    # Within 1.5 weights of reuse: the forward and the recomputed forward gather every weight (two other
    # weights run between any forward use and its recomputation); after the recomputation only the last
    # submodule, whose backward comes next, keeps its weight: two gathered again per layer.
    assert released["gather"] == 3 * 4 + 3 * 4 + 2 * 4


def test_small_gradients_between_weights_get_their_own_reduce_scatter():
    """A norm's or bias's gradient cannot join a weight's in a bucket smaller than both: one call each."""
    counts = {"gather": 0, "reduce": 0}
    _play([Submodule(P, 1.0, 2.0, (P, 1e4)), Submodule(P, 1.0, 2.0, (P, 1e4))], 3, bucket=9e7, counts=counts)
    assert counts["reduce"] == 2 * 2 * 3
    counts = {"gather": 0, "reduce": 0}
    _play([Submodule(P, 1.0, 2.0, (P, 1e4)), Submodule(P, 1.0, 2.0, (P, 1e4))], 3, bucket=1e12, counts=counts)
    assert counts["reduce"] == 1


def test_reduce_scatters_wait_for_their_gradients():
    """The last bucket is reduced after the backward's compute: the backward ends one reduce-scatter later."""
    layer = [Submodule(P, 1.0, 2.0, (P,))]
    step = _play(layer, 3, reduce=0.5)
    assert step.backward_s == pytest.approx(step.backward_compute_s + 0.5)


def _job(stack, devices: int) -> TrainingJob:
    return TrainingJob(model=small_dense(), cluster=load_hardware("a100-80g", devices),
                       plan=parse_plan(f"tp=1,pp=1,dp={devices},mbs=1,recompute=full,zero=3"),
                       seq_len=2048, global_batch=devices, framework=stack)


def test_step_builder_plays_deepspeed_on_one_stream_and_fsdp_per_layer():
    ds = _StepBuilder(_job(load_stack("deepspeed"), 64))
    assert stream_exposed(ds, "dense", "fwd") is not None
    assert stream_exposed(ds, "dense", "bwd-full") is not None
    assert stream_exposed(ds, "dense", "bwd-none") is None  # not the plan's mode
    assert stream_exposed(_StepBuilder(_job(load_stack("pytorch-fsdp"), 64)), "dense", "fwd") is None


def test_more_ranks_expose_more_of_deepspeeds_transfers():
    """Same bytes per rank, longer rings: the per-collective latency shows in the played step."""
    stack = load_stack("deepspeed")
    small, large = simulate(_job(stack, 16)), simulate(_job(stack, 512))
    assert large.breakdown["dp_comm"] > small.breakdown["dp_comm"]
    assert large.step_time_s > small.step_time_s


def test_shared_stream_needs_module_fetching():
    with pytest.raises(ValueError, match="fetch_unit 'module'"):
        Sharding(collective_stream="shared", fetch_unit="layer")


def test_a_hooked_call_without_parameters_prefetches_too():
    """A norm's or dropout's call runs the coordinator's prefetch as well. In the backward that queues the
    next gathers ahead of the reduce-scatters the host then waits for (more than two outstanding), so the
    host issues the following compute later: prefetching further lengthens this backward."""
    def layer(hooked: bool):
        return [Submodule(P, 2.0, 4.0, (P, 1e4)), Submodule(0.0, 0.0, 0.0, hooked=hooked),
                Submodule(P, 0.1, 0.2, (P, 1e4)), Submodule(P, 0.1, 0.2, (P, 1e4))]
    ahead = _play(layer(True), 4, gather=1.0, reduce=1.0, recompute=True, bucket=9e7)
    one = _play(layer(False), 4, gather=1.0, reduce=1.0, recompute=True, bucket=9e7)
    assert ahead.forward_s == pytest.approx(one.forward_s)  # transfer-bound forward: the stream decides
    assert ahead.backward_s > one.backward_s + 1.0


def test_megatron_deepspeed_hooks_follow_megatrons_module_tree():
    assert load_stack("megatron-deepspeed").sharding.hooks_before_weights == (3, 2, 2, 0)
    assert load_stack("deepspeed").sharding.hooks_before_weights == ()

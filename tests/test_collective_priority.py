"""Collectives at the compute's stream priority (stack sharding.collective_priority 'normal', DeepSpeed's
ProcessGroupNCCL default): in the ZeRO-3 stream play (train/zero3_stream.py) a collective that becomes ready
while a compute kernel runs starts when that kernel ends. Seconds; sizes in parameters."""

from __future__ import annotations

import re

import pytest

from conftest import small_dense
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.plan import parse_plan
from windtunnel.specs.stack import load_stack
from windtunnel.train.step import TrainingJob, simulate
from windtunnel.train.zero3_stream import Submodule, play_step
from windtunnel.train.zero3_timing import DeviceOp, HostWait, time_program

P = 1.0e8


def _ends(program, wait: bool = True) -> list:
    return time_program(program, wait_for_kernel=wait)


@pytest.mark.parametrize("wait, end", [(True, 1.5), (False, 0.9)])
def test_a_collective_ready_mid_kernel_starts_when_the_kernel_ends(wait, end):
    # The second gather is ready at 0.4 (behind the first on the NCCL stream), inside the kernel [0, 1).
    program = [DeviceOp("gather", 0.4), DeviceOp("kernel", 1.0), DeviceOp("gather", 0.5)]
    assert _ends(program, wait)[2] == pytest.approx(end)


def test_a_collective_ready_between_kernels_starts_at_once():
    # Kernel [0, 1), idle until the first gather ends at 1.2, the next kernel from 1.2: the second gather,
    # ready at 1.2, finds no kernel running (one starting at the same moment does not hold it back).
    program = [DeviceOp("kernel", 1.0), DeviceOp("gather", 1.2), DeviceOp("gather", 0.5),
               DeviceOp("kernel", 1.0, after=(1,))]
    ends = _ends(program)
    assert ends[2] == pytest.approx(1.7)
    assert ends[3] == pytest.approx(2.2)
    # A kernel op standing for two kernels: the gather waits only for the half running when it is ready.
    program = [DeviceOp("gather", 0.2), DeviceOp("kernel", 2.0, kernels=2), DeviceOp("gather", 0.5)]
    assert _ends(program)[2] == pytest.approx(1.5)


def test_a_kernel_issued_later_still_holds_back_a_queued_collective():
    """The second gather is queued behind a long one; the host then issues compute that needs neither. When
    the gather becomes ready (t = 2) that kernel runs, so the gather starts at its end (t = 3): the loop
    handles events in time order, so a kernel issued after a collective is seen by it."""
    program = [DeviceOp("gather", 2.0), DeviceOp("gather", 1.0), DeviceOp("kernel", 3.0)]
    assert _ends(program)[1] == pytest.approx(4.0)


def test_a_pass_holds_the_compute_units_and_follows_the_previous_reduce_scatter():
    # Ready with the next kernel (t = 1): the pass goes first and the kernel waits for it.
    program = [DeviceOp("kernel", 1.0), DeviceOp("pass", 0.5, after=(0,)), DeviceOp("kernel", 1.0)]
    assert _ends(program)[1:] == pytest.approx([1.5, 2.5])
    # Ready inside a kernel (t = 0.4): it starts when the kernel ends, as a collective would.
    program = [DeviceOp("kernel", 1.0), DeviceOp("gather", 0.4), DeviceOp("pass", 0.3, after=(1,))]
    assert _ends(program)[2] == pytest.approx(1.3)
    # The reduce stream waited for the previous reduce-scatter; the next one waits for the pass.
    program = [DeviceOp("reduce", 2.0), DeviceOp("pass", 0.3, after=(0,)), DeviceOp("reduce", 1.0, after=(1,))]
    assert _ends(program) == pytest.approx([2.0, 2.3, 3.3])


def test_the_host_blocks_until_its_target_ends_and_a_program_that_cannot_run_is_an_error():
    program = [DeviceOp("gather", 2.0), HostWait(0, extra=0.5), DeviceOp("kernel", 1.0)]
    assert _ends(program)[2] == pytest.approx(3.5)  # issued at 2.5
    with pytest.raises(RuntimeError, match="deadlock"):
        _ends([HostWait(1), DeviceOp("kernel", 1.0)])


def _total(wait: bool, gather: float) -> float:
    """Wall seconds of a step of six layers of four submodules of unequal compute (forward 1.0, 0.3, 1.7
    and 0.6 s, backward twice that), full recomputation, each weight gathered ``gather`` s and its gradient
    reduce-scattered in 0.7 x that."""
    layer = [Submodule(P, f, 2 * f, (P,)) for f in (1.0, 0.3, 1.7, 0.6)]
    step = play_step(layer, 6, recompute=True, gather=lambda n: gather, reduce=lambda n: 0.7 * gather,
                     prefetch_bucket=5e7, max_live=float("inf"), max_reuse=0.0, reduce_bucket=P,
                     wait_for_kernel=wait)
    return step.forward_s + step.backward_s


def test_waiting_for_kernels_costs_most_where_transfers_match_compute():
    """Compute-bound: the collectives find the compute busy but nothing waits for them. Transfer-bound: the
    compute mostly waits for them, so they seldom find a kernel running. Between the two the waits land on
    the critical path. Never shorter than with the collectives at high priority."""
    growth = {g: _total(True, g) / _total(False, g) - 1 for g in (0.1, 0.3, 0.6, 0.9, 1.2, 2.0, 4.0)}
    assert min(growth.values()) >= -1e-12
    assert growth[0.1] == pytest.approx(0.0, abs=1e-12)
    assert growth[0.9] > 0.1
    assert growth[4.0] < 0.02
    assert max(growth, key=growth.get) in (0.9, 1.2)


def _job(stack, devices: int = 256, mbs: int = 4) -> TrainingJob:
    return TrainingJob(model=small_dense(), cluster=load_hardware("a100-80g", devices),
                       plan=parse_plan(f"tp=1,pp=1,dp={devices},mbs={mbs},recompute=full,zero=3"),
                       seq_len=2048, global_batch=devices * mbs, framework=stack)


def test_deepspeed_collectives_run_at_normal_priority_and_cost_time():
    stack = load_stack("deepspeed")
    assert stack.sharding.collective_priority == "normal"
    assert "is_high_priority_stream" in stack.sources["collective_priority"]
    high = stack.model_copy(update={"sharding": stack.sharding.model_copy(update={"collective_priority": "high"})})
    normal_step, high_step = simulate(_job(stack)), simulate(_job(high))
    assert normal_step.step_time_s > high_step.step_time_s
    assert normal_step.breakdown["compute"] == pytest.approx(high_step.breakdown["compute"])


def test_a_bad_priority_in_a_stack_file_names_the_field(tmp_path):
    path = tmp_path / "my-deepspeed.yaml"
    path.write_text("inherits: deepspeed\nsharding: {collective_priority: urgent}\n")
    with pytest.raises(WindtunnelError) as caught:
        load_stack(str(path))
    text = str(caught.value)
    assert "collective_priority" in text and "urgent" in text and "normal" in text and "high" in text


def test_the_assumptions_say_how_the_collectives_run_and_the_stacks_memory():
    deepspeed = simulate(_job(load_stack("deepspeed"), devices=64, mbs=1))
    assert any("ZeRO-3 played per weight matrix" in a and "starts when that kernel ends" in a
               for a in deepspeed.assumptions)
    assert any("10% allocator fragmentation" in a for a in deepspeed.assumptions)  # deepspeed memory.fragmentation
    fsdp = simulate(_job(load_stack("pytorch-fsdp"), devices=64, mbs=1))
    assert not any("ZeRO-3 played" in a for a in fsdp.assumptions)
    jax = simulate(_job(load_stack("jax"), devices=64, mbs=1))
    assert any(re.search(r"(?<!\d)0% allocator fragmentation", a) for a in jax.assumptions)  # no caching allocator


def test_the_jax_stacks_run_their_collectives_at_high_priority():
    for name in ("jax", "paxml"):
        stack = load_stack(name)
        assert stack.sharding.collective_priority == "high"
        assert "highest_priority_async_stream" in stack.sources["collective_priority"]


def test_a_pre_divide_pass_per_bucket_adds_its_time_to_a_compute_bound_step():
    """Compute-bound (transfers of 0.1 s beside 0.3-3.4 s of compute): every pass lands on the compute units, so
    the step grows by exactly the passes' time; transfer-bound, they hide beside the gathers."""
    layer = [Submodule(P, f, 2 * f, (P,)) for f in (1.0, 0.3, 1.7, 0.6)]

    def total(gather: float, pass_s: float | None) -> tuple[float, int]:
        calls = {"reduce": 0}

        def reduce(n: float) -> float:
            calls["reduce"] += 1
            return 0.7 * gather

        step = play_step(layer, 6, recompute=True, gather=lambda n: gather, reduce=reduce, prefetch_bucket=5e7,
                         max_live=float("inf"), max_reuse=0.0, reduce_bucket=P, wait_for_kernel=True,
                         grad_pass=None if pass_s is None else (lambda n: pass_s))
        return step.forward_s + step.backward_s, calls["reduce"]

    base, buckets = total(0.1, None)
    for pass_s in (0.05, 0.2):
        with_passes, _ = total(0.1, pass_s)
        assert with_passes - base == pytest.approx(buckets * pass_s)
    heavy, _ = total(4.0, None)
    assert total(4.0, 0.05)[0] - heavy < 0.25 * buckets * 0.05


def test_deepspeed_pre_divides_its_buckets():
    stack = load_stack("deepspeed")
    assert stack.sharding.grad_predivide
    assert "div_(world_sz)" in stack.sources["grad_predivide"]
    off = stack.model_copy(update={"sharding": stack.sharding.model_copy(update={"grad_predivide": False})})
    with_pass, without = simulate(_job(stack)), simulate(_job(off))
    assert with_pass.step_time_s > without.step_time_s
    assert with_pass.breakdown["compute"] == pytest.approx(without.breakdown["compute"])
    assert any("grad_predivide" in a for a in with_pass.assumptions)
    assert not any("grad_predivide" in a for a in without.assumptions)


def test_a_pass_waits_for_the_running_kernel_whatever_the_collectives_priority():
    """The pass runs on DeepSpeed's reduce stream, at the compute's priority even where NCCL's stream is high."""
    program = [DeviceOp("kernel", 1.0), DeviceOp("gather", 0.4), DeviceOp("pass", 0.3, after=(1,)),
               DeviceOp("gather", 0.2, after=(1,))]
    ends = _ends(program, wait=False)
    assert ends[2] == pytest.approx(1.3)  # the pass waited for the kernel
    assert ends[3] == pytest.approx(0.6)  # the collective did not

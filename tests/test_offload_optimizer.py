"""Optimizer CPU offload (plan offload_optimizer; DeepSpeed ZeRO-Offload, Megatron-Core HybridDeviceOptimizer):
device memory, host memory, copy and CPU-step time, the share 0 path, aliases and errors."""

from __future__ import annotations

import pytest

from windtunnel import simulate_training
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.plan import parse_plan
from windtunnel.train.offload_optimizer import COPY_BYTES_PER_PARAM, CPU_ADAM_BYTES_PER_PARAM

KW = dict(seq_len=4096, global_batch=64)
BASE = "tp=1,pp=1,mbs=1,recompute=full"
GIB = 2**30


def _run(plan: str, framework: str = "megatron", hardware="a100-80g", devices=8):
    return simulate_training("llama3-8b", hardware, devices, plan=plan, framework=framework, **KW)


@pytest.mark.parametrize("share", [0.25, 0.5, 1.0])
def test_device_optimizer_memory_falls_by_the_offloaded_share(share):
    base = _run(BASE + ",zero=1")
    off = _run(BASE + f",zero=1,offload_optimizer={share}")
    assert off.memory_breakdown["optimizer"] == pytest.approx(base.memory_breakdown["optimizer"] * (1 - share))
    # Megatron keeps its DDP gradient buffer on the device.
    assert off.memory_breakdown["gradients"] == base.memory_breakdown["gradients"]
    assert off.peak_memory_bytes < base.peak_memory_bytes


def test_deepspeed_moves_partitioned_gradients_but_not_unpartitioned_ones():
    for zero, moved in ((1, False), (2, True), (3, True)):
        base = _run(BASE + f",zero={zero}", framework="deepspeed")
        off = _run(BASE + f",zero={zero},offload_optimizer=0.5", framework="deepspeed")
        expected = base.memory_breakdown["gradients"] * (0.5 if moved else 1.0)
        assert off.memory_breakdown["gradients"] == pytest.approx(expected), zero


def test_step_grows_by_the_copies_and_the_cpu_step():
    base = _run(BASE + ",zero=1")
    off = _run(BASE + ",zero=1,offload_optimizer=1")
    chip = load_hardware("a100-80g", 8).chip
    owned = base.memory_breakdown["optimizer"] / 12.0  # fp32 master + two fp32 moments per owned parameter
    link = chip.host_link_bandwidth * 0.8   # efficiency.yaml host_link_efficiency
    dram = chip.host_memory_bandwidth * 0.75  # efficiency.yaml host_memory_efficiency
    # Megatron's default (no --overlap-cpu-optimizer-d2h-h2d): gradients down, CPU step, parameters up in turn.
    expected = owned * (2 * COPY_BYTES_PER_PARAM / link + CPU_ADAM_BYTES_PER_PARAM / dram)
    assert off.breakdown["optimizer"] == pytest.approx(expected, rel=1e-3)
    assert off.step_time_s - base.step_time_s == pytest.approx(expected - base.breakdown["optimizer"], rel=1e-3)
    # DeepSpeed copies the gradients out during the backward: less exposed than Megatron's serial order.
    deepspeed = _run(BASE + ",zero=1,offload_optimizer=1", framework="deepspeed")
    assert deepspeed.breakdown["optimizer"] == pytest.approx(expected - owned * COPY_BYTES_PER_PARAM / link, rel=1e-3)


def test_a_partial_share_steps_device_and_host_together():
    half = _run(BASE + ",zero=1,offload_optimizer=0.5")
    full = _run(BASE + ",zero=1,offload_optimizer=1")
    base = _run(BASE + ",zero=1")
    assert half.breakdown["optimizer"] == pytest.approx(full.breakdown["optimizer"] / 2, rel=1e-3)
    assert base.step_time_s < half.step_time_s < full.step_time_s


@pytest.mark.parametrize("framework", ["megatron", "deepspeed"])
def test_share_zero_reproduces_the_plan_without_offload(framework):
    plain = _run(BASE + ",zero=3", framework=framework)
    zero = _run(BASE + ",zero=3,offload_optimizer=0", framework=framework)
    assert zero.step_time_s == plain.step_time_s
    assert zero.memory_breakdown == plain.memory_breakdown
    assert zero.breakdown == plain.breakdown


def test_host_memory_overflow_is_an_infeasible_result():
    cluster = load_hardware("a100-80g", 8)
    small = cluster.chip.model_copy(update={"host_memory_bytes": 8.0 * GIB})
    result = simulate_training("llama3-8b", cluster.model_copy(update={"chip": small}),
                               plan=BASE + ",zero=1,offload_optimizer=1", **KW)
    assert not result.feasible
    assert "host memory" in result.infeasible_reason and "offload_optimizer=1" in result.infeasible_reason
    assert result.feasible is not _run(BASE + ",zero=1,offload_optimizer=1").feasible


def test_a_slower_host_is_slower():
    cluster = load_hardware("a100-80g", 8)
    slow = cluster.chip.model_copy(update={"host_memory_bandwidth": cluster.chip.host_memory_bandwidth / 4})
    slow_run = simulate_training("llama3-8b", cluster.model_copy(update={"chip": slow}),
                                 plan=BASE + ",zero=1,offload_optimizer=1", **KW)
    assert slow_run.step_time_s > _run(BASE + ",zero=1,offload_optimizer=1").step_time_s


@pytest.mark.parametrize("text,share", [
    ("offload_optimizer=1", 1.0), ("optimizer-cpu-offload=true", 1.0), ("optimizer_cpu_offload=false", 0.0),
    ("optimizer_offload_fraction=0.25", 0.25), ("offload-optimizer=cpu", 1.0), ("offload_optimizer=none", 0.0),
])
def test_aliases_and_round_trip(text, share):
    plan = parse_plan(text)
    assert plan.offload_optimizer == share
    assert parse_plan(plan.to_string()).offload_optimizer == share
    assert parse_plan(plan.short()).offload_optimizer == share


@pytest.mark.parametrize("value", ["1.5", "-0.1", "half", "nan"])
def test_bad_shares_are_clear_errors(value):
    with pytest.raises(WindtunnelError, match="offload_optimizer") as info:
        parse_plan(f"offload_optimizer={value}")
    assert value in str(info.value) and "0" in str(info.value) and "1" in str(info.value)


def test_chip_without_host_memory_bandwidth_is_a_clear_error():
    with pytest.raises(WindtunnelError, match="host_memory_bandwidth"):
        simulate_training("llama3-8b", "ascend-910b", 8, plan=BASE + ",offload_optimizer=1", **KW)

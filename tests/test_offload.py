"""Activation offloading (Megatron's --cpu-offloading-num-layers): memory, copy time, Megatron's rules."""

from __future__ import annotations

import pytest

from windtunnel import simulate_training
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware

KW = dict(seq_len=8192, global_batch=128)
BASE = "tp=1,pp=1,mbs=2,zero=3,precision=fp8"


def _run(plan: str, hardware="gb200", devices=64, **kw):
    return simulate_training("llama3-70b", hardware, devices, plan=plan, **{**KW, **kw})


def test_offloading_moves_activations_to_host_and_costs_copy_time():
    none = _run(BASE + ",recompute=none")
    offload = _run(BASE + ",offload_layers=40")
    assert offload.memory_breakdown["activations"] < 0.6 * none.memory_breakdown["activations"]
    assert offload.step_time_s >= none.step_time_s  # copies can only add time
    assert "recompute=none" in offload.plan and "offload_layers=40" in offload.plan
    assert any("activation offloading" in a for a in offload.assumptions)


def test_a_faster_host_link_is_never_slower():
    cluster = load_hardware("gb200", 64)
    slow_chip = cluster.chip.model_copy(update={"host_link_bandwidth": cluster.chip.host_link_bandwidth / 8})
    slow = simulate_training("llama3-70b", cluster.model_copy(update={"chip": slow_chip}), plan=BASE + ",offload_layers=40",
                             **KW)
    fast = _run(BASE + ",offload_layers=40")
    assert slow.breakdown["offload"] > fast.breakdown.get("offload", 0.0)
    assert slow.step_time_s > fast.step_time_s


def test_host_memory_overflow_is_an_infeasible_result():
    result = _run(BASE + ",offload_layers=79")
    assert not result.feasible
    assert "host memory" in result.infeasible_reason and "GiB available" in result.infeasible_reason


@pytest.mark.parametrize("plan,words", [
    ("tp=1,pp=2,offload_layers=10", "pp=1"),
    ("tp=1,pp=1,offload_layers=10,recompute=selective", "recompute"),
    ("tp=1,pp=1,offload_layers=10,cuda_graphs=modules", "cuda_graphs"),
    ("tp=1,pp=1,offload_layers=80", "0 to 79"),
])
def test_megatron_rules_are_clear_errors(plan, words):
    with pytest.raises(WindtunnelError, match="offload_layers") as info:
        _run(plan)
    assert words in str(info.value)


def test_chip_without_a_host_link_is_a_clear_error():
    with pytest.raises(WindtunnelError, match="host link"):
        simulate_training("llama3-8b", "ascend-910b", 8, plan="tp=1,pp=1,offload_layers=4", seq_len=4096,
                          global_batch=8)

"""Optimizer-state precision: bf16 main gradients (and DP reduction) and bf16 Adam moments."""

from __future__ import annotations

import pytest

from conftest import search_once
from windtunnel import simulate_training
from windtunnel.search.backends import LocalBackend
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.model import load_model
from windtunnel.specs.plan import parse_plan
from windtunnel.train.memory import ParamShare, StateBytes, state_bytes
from windtunnel.train.search import TrainingProblem
from windtunnel.train.space import SearchSpace

KW = dict(seq_len=4096, global_batch=64)
PLAN = "tp=2,pp=2,mbs=1,recompute=selective,zero=1"


def test_state_bytes_per_parameter():
    assert (StateBytes.of().grads, StateBytes.of().optimizer) == (4.0, 12.0)
    assert StateBytes.of("bf16", "bf16") == StateBytes(grads=2.0, optimizer=8.0)
    # Adam traffic: 16-bit gradients read 2 bytes less, 16-bit moments read and write 8 bytes less.
    assert StateBytes.of().optimizer_traffic(36.0) == 36.0
    assert StateBytes.of("bf16", "bf16").optimizer_traffic(36.0) == 26.0


def test_zero_sharding_of_each_state():
    share = ParamShare(dense=1e9, expert=2e9, dense_dp=8, expert_dp=2)
    weights, grads, optimizer = state_bytes(share, 1, StateBytes.of("bf16", "bf16"))
    assert weights == pytest.approx(2 * 3e9)
    assert grads == pytest.approx(2 * 3e9)
    assert optimizer == pytest.approx(8 * (1e9 / 8 + 2e9 / 2))
    _, grads3, _ = state_bytes(share, 3, StateBytes.of("bf16"))
    assert grads3 == pytest.approx(2 * (1e9 / 8 + 2e9 / 2))


def test_bf16_states_shrink_memory_and_the_dp_reduction():
    fp32 = simulate_training("llama3-8b", "h100-sxm", 16, plan=PLAN, **KW)
    moments = simulate_training("llama3-8b", "h100-sxm", 16, plan=PLAN + ",moments=bf16", **KW)
    grads = simulate_training("llama3-8b", "h100-sxm", 16, plan=PLAN + ",grads=bf16", **KW)
    assert moments.memory_breakdown["optimizer"] == pytest.approx(fp32.memory_breakdown["optimizer"] * 8 / 12)
    assert moments.memory_breakdown["gradients"] == fp32.memory_breakdown["gradients"]
    assert moments.breakdown["optimizer"] < fp32.breakdown["optimizer"]
    assert grads.memory_breakdown["gradients"] == pytest.approx(fp32.memory_breakdown["gradients"] / 2)
    assert grads.step_time_s <= fp32.step_time_s  # half the bytes to reduce, never slower
    assert any("bf16 moments" in a for a in moments.assumptions)


def test_plan_fields_parse_print_and_reject_bad_values():
    plan = parse_plan("tp=2,exp_avg_dtype=BF16,main_grads=bf16")
    assert (plan.moments, plan.grads) == ("bf16", "bf16")
    assert "moments=bf16" in plan.to_string() and "grads=bf16" in plan.short()
    assert parse_plan(plan.to_string()) == parse_plan(plan.to_string())
    assert "moments" not in parse_plan("tp=2").to_string()
    with pytest.raises(WindtunnelError, match="moments"):
        parse_plan("moments=fp8")


def test_search_screens_with_the_space_state_precision_and_baseline_follows():
    space = SearchSpace(load_model("llama3-8b"), load_hardware("h100-sxm", 16), 4096, 32, moments="bf16", grads="bf16",
                        choices={"tp": [2], "pp": [1, 2], "vpp": [1], "mbs": [1], "recompute": ["selective"],
                                 "zero": [1], "cp": [1], "sp": [True], "tp_overlap": [False], "schedule": ["1f1b"],
                                 "order": ["tp-cp-dp-pp"]})
    document = search_once(space, top=3, refine_count=2, baseline="tp=2,pp=1,mbs=1")
    assert (document["grads"], document["moments"]) == ("bf16", "bf16")
    assert "moments=bf16" in document["plans"][0]["plan"] and "grads=bf16" in document["baseline"]["plan"]



def test_screen_memory_counts_the_same_state_bytes_as_the_engine():
    """The vectorised screen and the engine differ in activations, not in model states: the
    optimizer-state saving of bf16 moments is the same in both."""
    saved = {}
    for moments in ("fp32", "bf16"):
        space = SearchSpace(load_model("llama3-8b"), load_hardware("h100-sxm", 16), 4096, 32, moments=moments,
                            choices={"tp": [2], "pp": [2], "vpp": [1], "mbs": [1], "recompute": ["selective"],
                                     "zero": [1], "cp": [1], "sp": [True], "tp_overlap": [False],
                                     "schedule": ["1f1b"], "order": ["tp-cp-dp-pp"]})
        problem = TrainingProblem(space)
        chunk = problem.chunk(0, 1)
        problem.prepare(chunk, LocalBackend(1))
        _, memory, _ = problem.screen(chunk)
        engine = simulate_training("llama3-8b", "h100-sxm", 16, plan=space.plan_of(
            {key: value[0] for key, value in chunk.items()}), seq_len=4096, global_batch=32)
        saved[moments] = (float(memory[0]), engine.peak_memory_bytes)
    screen_saving = saved["fp32"][0] - saved["bf16"][0]
    engine_saving = saved["fp32"][1] - saved["bf16"][1]
    assert screen_saving > 0
    assert screen_saving == pytest.approx(engine_saving, rel=0.05)

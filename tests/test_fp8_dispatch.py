"""The precision of the MoE dispatch all-to-all: 16-bit tokens unless the plan says fp8_dispatch (Megatron-Core's
dispatchers quantise only inside the expert GEMMs; DeepSeek-V3 dispatches in FP8)."""

from __future__ import annotations

import pytest

from conftest import assert_one_clear_error
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.model import load_model
from windtunnel.specs.plan import parse_plan
from windtunnel.train.step import TrainingJob, _StepBuilder, simulate

BASE = "tp=1,pp=1,ep=16,mbs=1,recompute=none,dispatcher=deepep"


def _job(plan: str) -> TrainingJob:
    return TrainingJob(model=load_model("qwen3-30b-a3b"), cluster=load_hardware("h100-sxm", 16),
                       plan=parse_plan(plan), seq_len=4096, global_batch=64)


def _moe_ops(plan: str) -> dict:
    return {op.name: op for op in _StepBuilder(_job(plan)).forward_graphs["moe"].ops}


def test_fp8_gemms_still_dispatch_16_bit_tokens():
    bf16, fp8 = _moe_ops(BASE + ",precision=bf16"), _moe_ops(BASE + ",precision=fp8")
    assert fp8["dispatch"].bytes_moved == bf16["dispatch"].bytes_moved > 0
    assert fp8["combine"].bytes_moved == bf16["combine"].bytes_moved


def test_fp8_dispatch_halves_the_dispatch_only():
    plain, quantised = _moe_ops(BASE + ",precision=fp8"), _moe_ops(BASE + ",precision=fp8,fp8_dispatch=true")
    assert quantised["dispatch"].bytes_moved == pytest.approx(plain["dispatch"].bytes_moved / 2)
    assert quantised["combine"].bytes_moved == plain["combine"].bytes_moved  # the combine stays 16-bit
    slow, fast = simulate(_job(BASE + ",precision=fp8")), simulate(_job(BASE + ",precision=fp8,fp8_dispatch=true"))
    assert fast.breakdown["ep_comm"] < slow.breakdown["ep_comm"] and fast.step_time_s < slow.step_time_s
    assert "fp8_dispatch=true" in fast.plan and any("dispatch in FP8" in line for line in fast.assumptions)
    assert parse_plan(fast.plan).fp8_dispatch


def test_an_fp8_dispatch_is_an_extrapolation():
    from windtunnel.api import simulate_training

    plan = BASE + ",precision=fp8"
    plain = simulate_training("qwen3-30b-a3b", "h100-sxm", 16, plan=plan, seq_len=4096, global_batch=64)
    quantised = simulate_training("qwen3-30b-a3b", "h100-sxm", 16, plan=plan + ",fp8_dispatch=true", seq_len=4096,
                                  global_batch=64)
    reason = "plan fp8_dispatch=true: no validation row runs this kernel path"
    assert reason in quantised.extrapolation["reasons"] and quantised.extrapolation["extrapolating"]
    assert not any("fp8_dispatch" in line for line in plain.extrapolation["reasons"])


def test_fp8_dispatch_needs_fp8(cli):
    with pytest.raises(WindtunnelError) as err:
        simulate(_job(BASE + ",fp8_dispatch=true"))
    assert err.value.field == "fp8_dispatch" and "precision=fp8" in str(err.value)
    assert_one_clear_error(cli("train", "simulate", "--model", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--devices",
                               "16", "--global-batch", "64", "--seq-len", "4096", "--plan", BASE + ",fp8_dispatch=true"),
                           "fp8_dispatch", "precision=fp8")


def test_fp8_attention_says_it_extrapolates_on_dense_models():
    """No dense validation row runs FP8 attention (its cost comes from cuDNN's kernel timings; the MoE rows of
    Megatron-Bridge 26.06 state it in their recipes), so a dense plan that does says so; the same plan without it
    does not name it."""
    from windtunnel import load_model, simulate_training

    reason = "plan fp8_attention=true: no validation row runs this kernel path"
    dense = simulate_training(load_model("llama3-8b"), "h100-sxm", 8, seq_len=4096, global_batch=64,
                              plan="tp=1,pp=1,mbs=1,precision=fp8,fp8_attention=true")
    assert reason in dense.extrapolation["reasons"] and dense.extrapolation["extrapolating"]
    plain = simulate_training(load_model("llama3-8b"), "h100-sxm", 8, seq_len=4096, global_batch=64,
                              plan="tp=1,pp=1,mbs=1,precision=fp8")
    assert not any("fp8_attention" in r for r in plain.extrapolation["reasons"])

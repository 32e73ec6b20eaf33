"""A stack's FP8 GEMM level where its calibration family fitted only 16 bits (stack kernels.fp8_gemm_of_bf16):
its own fit times the ratio measured on its kernels (XLA's, for MaxText), or the Megatron family's FP8 fit."""

from __future__ import annotations

import pytest

from windtunnel.api import simulate_training
from windtunnel.specs.errors import WindtunnelError

JOB = dict(hardware="h100-sxm", devices=8, seq_len=4096, global_batch=32, plan="tp=1,pp=1,mbs=1,precision=fp8")


def _stack(tmp_path, value: str) -> str:
    path = tmp_path / "jax-variant.yaml"
    path.write_text(f"inherits: jax\nkernels: {{fp8_gemm_of_bf16: {value}}}\nsources: {{fp8_gemm_of_bf16: 'a test'}}\n")
    return str(path)


def test_the_ratio_sets_an_fp8_step_and_leaves_a_bf16_one(tmp_path):
    shipped = simulate_training(model="llama3-8b", framework="jax", **JOB)
    borrowed = simulate_training(model="llama3-8b", framework=_stack(tmp_path, "null"), **JOB)
    # The xla family's BF16 fit x 0.974 is above the Megatron family's FP8 fit on Hopper: the step is shorter.
    assert shipped.step_time_s < borrowed.step_time_s
    lower = simulate_training(model="llama3-8b", framework=_stack(tmp_path, "0.5"), **JOB)
    assert lower.step_time_s > shipped.step_time_s
    bf16 = dict(JOB, plan="tp=1,pp=1,mbs=1,precision=bf16")
    assert simulate_training(model="llama3-8b", framework="jax", **bf16).step_time_s == \
        simulate_training(model="llama3-8b", framework=_stack(tmp_path, "0.5"), **bf16).step_time_s


def test_a_chip_the_family_never_fitted_keeps_the_default_fp8_level(tmp_path):
    """On B200 the xla family has no fit of its own, so the ratio has nothing to scale."""
    job = dict(JOB, hardware="b200")
    assert simulate_training(model="llama3-8b", framework="jax", **job).step_time_s == \
        simulate_training(model="llama3-8b", framework=_stack(tmp_path, "null"), **job).step_time_s


def test_a_bad_ratio_names_the_field(tmp_path):
    with pytest.raises(WindtunnelError, match="fp8_gemm_of_bf16"):
        simulate_training(model="llama3-8b", framework=_stack(tmp_path, "2.0"), **JOB)

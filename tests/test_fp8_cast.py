"""Where an FP8 GEMM's 16-bit operand is quantised (stack kernels.fp8_cast): a cast kernel of its own
(Transformer Engine, torchao) or folded into the kernel that produces it (XLA with delayed scaling)."""

from __future__ import annotations

import pytest

from windtunnel.api import simulate_training
from windtunnel.cost.compute import compute_op_time
from windtunnel.cost.efficiency import efficiency_for
from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_chip
from windtunnel.specs.model import load_model
from windtunnel.specs.stack import load_stack

LLAMA = load_model("llama3-8b")
JOB = dict(hardware="h100-sxm", devices=8, seq_len=4096, global_batch=32, plan="tp=1,pp=1,mbs=1,precision=fp8")


@pytest.mark.parametrize("stack,cast", [("jax", "fused"), ("paxml", "separate"), ("megatron", "separate"),
                                        ("torchtitan-compile", "separate"), ("pytorch-fsdp", "separate")])
def test_which_stacks_fuse_the_fp8_cast(stack, cast):
    assert load_stack(stack).kernels.fp8_cast == cast


def test_fused_casts_make_every_gemm_take_a_quantised_operand_and_cost_less():
    chip = load_chip("h100-sxm")
    eff = efficiency_for(chip)
    gemms = {}
    for fused in (False, True):
        ops = layer_forward(LLAMA, Sharding(seq_len=4096, precision="fp8", fp8_cast_fused=fused), moe=False).ops
        gemms[fused] = [op for op in ops if op.kind == "gemm"]
    assert gemms[True] and all(op.quantized_in == ("fwd", "bwd") for op in gemms[True])
    assert all(op.quantized_in == () for op in gemms[False])
    for separate, fused in zip(gemms[False], gemms[True], strict=True):
        # The cast reads the m x k operand's 2 bytes and writes 1, plus one launch.
        m, _, k = separate.shape
        cast = 3.0 * m * k / (chip.hbm_bandwidth * eff.memory_bandwidth) + eff.kernel_overhead_s
        assert compute_op_time(separate, chip, eff, "fp8") - compute_op_time(fused, chip, eff, "fp8") == \
            pytest.approx(cast, rel=1e-9)


def test_a_stack_that_fuses_the_cast_runs_fp8_faster_and_bf16_the_same(tmp_path):
    path = tmp_path / "jax-te-casts.yaml"
    path.write_text("inherits: jax\nkernels: {fp8_cast: separate}\nsources: {fp8_cast: 'a test'}\n")
    fused = simulate_training(model="llama3-8b", framework="jax", **JOB)
    separate = simulate_training(model="llama3-8b", framework=str(path), **JOB)
    assert fused.step_time_s < separate.step_time_s
    bf16 = dict(JOB, plan="tp=1,pp=1,mbs=1,precision=bf16")
    assert simulate_training(model="llama3-8b", framework="jax", **bf16).step_time_s == \
        simulate_training(model="llama3-8b", framework=str(path), **bf16).step_time_s
    assert any("no cast kernels" in line for line in fused.assumptions)
    assert any("cast kernel of its own" in line for line in separate.assumptions)


def test_a_bad_fp8_cast_names_the_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("inherits: jax\nkernels: {fp8_cast: sometimes}\n")
    with pytest.raises(WindtunnelError, match="kernels.fp8_cast.*'separate' or 'fused'"):
        load_stack(str(path))

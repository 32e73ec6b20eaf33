"""Per-expert FP8 quantisation in a grouped GEMM (Op.quant_launches): Transformer Engine's split_quantize quantises
each expert's operand with its own kernels (current scaling: amax, scale and cast; MXFP8: the cast; delayed
scaling: one fused cast for all experts), each launched by the host and run by the device."""

from __future__ import annotations

import pytest

from windtunnel.api import simulate_training
from windtunnel.cost.compute import compute_op_time
from windtunnel.cost.efficiency import efficiency_for
from windtunnel.graph.cuda_graphs import captured
from windtunnel.graph.ops import backward_of
from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.specs.hardware import load_chip
from windtunnel.specs.model import load_model
from windtunnel.specs.stack import load_stack

QWEN = load_model("qwen3-30b-a3b")
EXPERTS_PER_RANK = QWEN.moe.experts // 8


def _experts(launches: int, precision: str = "fp8"):
    shard = Sharding(seq_len=4096, ep=8, precision=precision, fp8_quant_launches=launches)
    return [op for op in layer_forward(QWEN, shard, moe=True).ops if op.name.startswith("experts.") and op.kind == "gemm"]


@pytest.mark.parametrize("stack,recipe,launches", [("megatron-bridge", "tensor", 3), ("megatron-bridge", "mx", 1),
                                                   ("megatron", "tensor", 0), ("megatron", "mx", 1),
                                                   ("megatron-bridge", "tensor-bf16", 0)])
def test_launches_per_expert_follow_the_stack_scaling_and_the_recipe(stack, recipe, launches):
    precision, recipe = ("bf16", "tensor") if recipe == "tensor-bf16" else ("fp8", recipe)
    assert load_stack(stack).kernels.fp8_quant_launches(precision, recipe) == launches


def test_each_expert_gemm_quantises_per_expert_and_the_weight_gradient_reuses_the_data_gradients():
    gemms = _experts(3)
    assert gemms and all(op.count == EXPERTS_PER_RANK and op.quant_launches == 3 * EXPERTS_PER_RANK for op in gemms)
    assert all(op.quant_launches == 0 for op in _experts(3, precision="bf16"))
    assert all(op.quant_launches == 0 for op in _experts(0))
    shard = Sharding(seq_len=4096, ep=8, precision="fp8", fp8_quant_launches=3)
    backward = backward_of(layer_forward(QWEN, shard, moe=True))
    for op in backward.ops:
        if op.name.startswith("experts.") and op.kind == "gemm":
            assert op.quant_launches == (0 if op.weight_grad else 3 * EXPERTS_PER_RANK), op.name


def test_the_launches_cost_the_device_a_kernel_overhead_each_and_graphs_remove_them():
    chip = load_chip("h100-sxm")
    eff = efficiency_for(chip)
    with_launches, without = _experts(3)[0], _experts(0)[0]
    extra = compute_op_time(with_launches, chip, eff, "fp8") - compute_op_time(without, chip, eff, "fp8")
    assert extra == pytest.approx(3 * EXPERTS_PER_RANK * eff.kernel_overhead_s, rel=1e-9)
    shard = Sharding(seq_len=4096, ep=8, precision="fp8", fp8_quant_launches=3)
    graph = layer_forward(QWEN, shard, moe=True)
    assert all(op.quant_launches == 0 for op in captured(graph, [], "full").ops)


def test_current_scaling_makes_a_host_bound_moe_step_slower_than_delayed_scaling():
    """Same job on two stacks that differ only in FP8 scaling here (megatron-bridge inherits nemo): the
    per-expert launches of current scaling cost the step time; a BF16 plan is unaffected."""
    job = dict(model="qwen3-30b-a3b", hardware="h100-sxm", devices=16, seq_len=4096, global_batch=256)
    plan = "tp=1,pp=1,ep=16,mbs=1,recompute=none,dispatcher=hybridep"
    current = simulate_training(plan=plan + ",precision=fp8", framework="megatron-bridge", **job)
    delayed = simulate_training(plan=plan + ",precision=fp8", framework="nemo", **job)
    assert current.step_time_s > delayed.step_time_s
    bf16 = [simulate_training(plan=plan + ",precision=bf16", framework=f, **job).step_time_s
            for f in ("megatron-bridge", "nemo")]
    assert bf16[0] == pytest.approx(bf16[1], rel=0.02)

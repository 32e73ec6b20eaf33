"""Where the rotary embedding runs fused and where as eager ops (stack kernels.rope, ModelSpec.rope_scaling):
Megatron fuses plain RoPE only, Hugging Face models and eager torchtitan never, compilers always."""

from __future__ import annotations

import pytest

from windtunnel.api import simulate_training
from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.specs.model import load_model
from windtunnel.specs.stack import eager_rope, load_stack

GPT_OSS, LLAMA, DEEPSEEK = load_model("gpt-oss-120b"), load_model("llama3-8b"), load_model("deepseek-v3")


@pytest.mark.parametrize("stack,model,eager", [
    ("megatron-bridge", GPT_OSS, True),      # YaRN: Megatron turns apply_rope_fusion off
    ("megatron-bridge", LLAMA, False),
    ("megatron-lm", DEEPSEEK, False),        # latent attention keeps its fused path, YaRN or not
    ("pytorch-fsdp", LLAMA, True),           # Hugging Face apply_rotary_pos_emb
    ("torchtitan", LLAMA, True),             # the complex multiply in eager PyTorch
    ("torchtitan-compile", LLAMA, False),    # Inductor fuses it
    ("jax", GPT_OSS, False),                 # XLA fuses it
])
def test_which_stacks_run_the_rotary_embedding_eagerly(stack, model, eager):
    assert eager_rope(load_stack(stack).kernels.rope, model) is eager


def test_the_eager_path_moves_more_bytes_and_issues_more_ops():
    costs = load_stack("megatron").kernels.rope_eager_costs
    fused = next(op for op in layer_forward(LLAMA, Sharding(seq_len=4096), moe=False).ops if op.name == "rope")
    eager = next(op for op in layer_forward(LLAMA, Sharding(seq_len=4096, rope_eager=costs), moe=False).ops
                 if op.name == "rope")
    assert eager.bytes_moved == pytest.approx(fused.bytes_moved * costs[0] / 2.0)
    assert eager.backward_bytes == pytest.approx(fused.bytes_moved * costs[1] / 2.0)
    assert eager.host_ops == 2 * costs[2] > fused.host_ops


def test_yarn_makes_a_megatron_step_slower_not_a_compiled_one():
    # The same GPT-OSS job with its RoPE scaling dropped: Megatron then fuses the rotary embedding.
    plain = GPT_OSS.model_copy(update={"rope_scaling": "none"})
    job = dict(hardware="b200", devices=64, seq_len=4096, global_batch=256, plan="tp=1,pp=1,ep=8,mbs=2,recompute=full")
    yarn_step = simulate_training(model=GPT_OSS, framework="megatron-bridge", **job).step_time_s
    plain_step = simulate_training(model=plain, framework="megatron-bridge", **job).step_time_s
    assert yarn_step > plain_step
    assert simulate_training(model=GPT_OSS, framework="jax", **job).step_time_s == \
        simulate_training(model=plain, framework="jax", **job).step_time_s


def test_the_step_says_when_the_rotary_embedding_runs_eagerly():
    job = dict(hardware="b200", devices=64, seq_len=4096, global_batch=256, plan="tp=1,pp=1,ep=8,mbs=2,recompute=full")
    said = simulate_training(model=GPT_OSS, framework="megatron-bridge", **job).assumptions
    assert any("rotary embedding as eager ops" in line and "YaRN" in line for line in said)
    plain = simulate_training(model=LLAMA, framework="megatron-bridge", **dict(job, plan="tp=1,mbs=2")).assumptions
    assert not any("rotary embedding as eager ops" in line for line in plain)

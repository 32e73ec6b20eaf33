"""Selective recomputation by module (Megatron's --recompute-modules): what each keeps and re-runs."""

from __future__ import annotations

import pytest

from windtunnel import load_model, simulate_training
from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.plan import parse_plan
from windtunnel.train.layers import recompute_graph, saved_activation_bytes


def _mla_layer():
    return layer_forward(load_model("deepseek-v3"), Sharding(ep=64, seq_len=4096, precision="fp8"), moe=True)


def test_default_selective_is_core_attention_and_mla_up_projections():
    layer = _mla_layer()
    assert saved_activation_bytes(layer, "selective") == saved_activation_bytes(layer, "selective[core_attn+mla_up_proj]")
    names = {op.name for op in recompute_graph(layer, "selective").ops}
    assert names == {"core_attention", "q_up_proj", "kv_up_proj", "rope"}


def test_each_output_discarding_module_drops_what_its_consumers_kept():
    layer = _mla_layer()
    none = saved_activation_bytes(layer, "none")
    by = {m: none - saved_activation_bytes(layer, f"selective[{m}]") for m in ("mla_up_proj", "layernorm", "moe_act")}
    saved = {op.name: op.saved_bytes for op in layer.ops}
    # The up-projections' outputs are the attention's Q, K and V; the activation's output is the
    # expert down-projection's input; the norms' outputs are the GEMM inputs after them.
    assert by["mla_up_proj"] == pytest.approx(saved["core_attention"])
    assert by["moe_act"] == pytest.approx(saved["experts.down_proj"])
    assert by["layernorm"] == pytest.approx(sum(saved[n] for n in ("q_down_proj", "kv_down_proj", "q_up_proj",
                                                                 "kv_up_proj", "router", "shared_experts.up_proj")))
    combined = none - saved_activation_bytes(layer, "selective[layernorm+mla_up_proj+moe_act]")
    assert combined == pytest.approx(by["mla_up_proj"] + by["layernorm"] + by["moe_act"])  # disjoint savings


def test_modules_rerun_only_their_operators():
    layer = _mla_layer()
    assert [op.name for op in recompute_graph(layer, "selective[moe_act]").ops] == ["experts.act"]
    assert all(op.phase == "recompute" and op.saved_bytes == 0 for op in recompute_graph(layer, "selective[layernorm]").ops)


def test_cheap_modules_beat_attention_recompute_on_a_flash_model():
    """With flash attention, checkpointing core attention re-runs it for almost no memory; re-running
    the norms costs little and frees the GEMM inputs."""
    kwargs = dict(seq_len=8192, global_batch=16)
    attention = simulate_training("llama3-8b", "h100-sxm", 8, plan="tp=1,pp=1,recompute=selective", **kwargs)
    norms = simulate_training("llama3-8b", "h100-sxm", 8, plan="tp=1,pp=1,recompute=selective,recompute_modules=layernorm",
                              **kwargs)
    assert norms.step_time_s < attention.step_time_s
    assert norms.memory_breakdown["activations"] < attention.memory_breakdown["activations"]


def test_deepseek_v3_recipe_fits_in_80_gb():
    """DeepSeek-V3 trained on 2,048 H800 without TP by recomputing RMSNorm and the MLA up-projections
    (report Sec. 3.2.3) and caching the SwiGLU input: with those modules the plan fits in 80 GB, with
    attention recompute it does not. The MTP module is left out (mtp=0); with it and the default MoE
    imbalance (1.1) the recipe also needs the FP8 SwiGLU-input cache (tests/test_memory_dualpipe.py)."""
    kwargs = dict(seq_len=4096, global_batch=15360, moe_imbalance=1.0)
    plan = "tp=1,pp=16,ep=64,mbs=1,zero=1,schedule=dualpipe,precision=fp8,recompute=selective,mtp=0"
    recipe = simulate_training("deepseek-v3", "h800", 2048, plan=plan + ",recompute_modules=layernorm+mla_up_proj+moe_act",
                               **kwargs)
    default = simulate_training("deepseek-v3", "h800", 2048, plan=plan, **kwargs)
    assert recipe.feasible and not default.feasible


@pytest.mark.parametrize(("text", "needle"), [
    ("recompute=selective,recompute_modules=layernorm+attention", "attention"),
    ("recompute=full,recompute_modules=layernorm", "selective only"),
])
def test_bad_modules_are_a_clear_error(text, needle):
    with pytest.raises(WindtunnelError, match=needle):
        simulate_training("llama3-8b", "h100-sxm", 8, seq_len=4096, global_batch=8, plan="tp=1,pp=1," + text)


def test_modules_round_trip_in_the_plan_string():
    plan = parse_plan("tp=1,pp=1,recompute=selective,recompute_modules=layernorm+moe_act")
    assert plan.recompute_modules == "layernorm+moe_act"
    assert parse_plan(plan.to_string()).to_string() == plan.to_string()
    assert "recompute_modules=layernorm+moe_act" in plan.short()


def test_attn_proj_keeps_only_the_layer_input_and_qkv_like_maxtext_save_qkv_proj():
    """attn_proj + mlp + layernorm (MaxText's save_qkv_proj): the layer keeps its input and the attention's Q, K,
    V (with the log-sum-exp); the attention output, the residual after it and everything in the MLP are
    regenerated, so the out projection re-runs as well."""
    layer = layer_forward(load_model("llama3-70b"), Sharding(seq_len=8192), moe=False)
    saved = {op.name: op.saved_bytes for op in layer.ops}
    kept = saved_activation_bytes(layer, "selective[attn_proj+mlp+layernorm]")
    assert kept == pytest.approx(saved["attn_norm"] + saved["core_attention"])
    region = saved_activation_bytes(layer, "selective[core_attn+mlp+layernorm]")
    assert region - kept == pytest.approx(saved["out_proj"] + saved["mlp_norm"])
    rerun = {op.name for op in recompute_graph(layer, "selective[attn_proj+mlp+layernorm]").ops}
    assert {"core_attention", "out_proj", "attn_residual", "mlp.up_proj", "mlp.down_proj"} <= rerun
    assert "qkv_proj" not in rerun


def test_attn_output_drops_only_the_attention_output_like_paxml_save_qkv_out_proj():
    """attn_output + mlp + layernorm (PaxML SAVE_QKV_OUT_PROJ): core attention re-runs and the output projection
    no longer keeps its input (the context), but the projection itself does not re-run: its output is saved, as
    the residual the MLP norm keeps."""
    layer = layer_forward(load_model("llama3-70b"), Sharding(seq_len=8192), moe=False)
    saved = {op.name: op.saved_bytes for op in layer.ops}
    kept = saved_activation_bytes(layer, "selective[attn_output+mlp+layernorm]")
    assert kept == pytest.approx(saved["attn_norm"] + saved["core_attention"] + saved["mlp_norm"])
    assert saved_activation_bytes(layer, "selective[core_attn+mlp+layernorm]") - kept == pytest.approx(saved["out_proj"])
    rerun = {op.name for op in recompute_graph(layer, "selective[attn_output+mlp+layernorm]").ops}
    assert "core_attention" in rerun and "out_proj" not in rerun


def test_elementwise_keeps_only_matmul_outputs_like_maxtext_minimal_flash():
    """elementwise (JAX policies that save only matmul outputs: MaxText minimal / minimal_flash, PaxML
    SAVE_DOT_ONLY): every memory-bound operator re-runs and keeps nothing, so each operator that reads one of
    their outputs (the projections after the norms, the attention after the rotary embedding, the down
    projection after the activation) no longer keeps its input; the matmul outputs themselves stay stored."""
    layer = layer_forward(load_model("llama3-8b"), Sharding(seq_len=4096), moe=False)
    saved = {op.name: op.saved_bytes for op in layer.ops}
    none = saved_activation_bytes(layer, "none")
    kept = saved_activation_bytes(layer, "selective[elementwise]")
    # The readers of a norm, the rotary embedding, the residual add or the activation; the first norm keeps
    # the layer input (the checkpoint), the activation its matmul input.
    readers = {op.name for op in layer.ops if any(layer.ops[d].kind == "memory" for d in op.deps)}
    assert readers == {"qkv_proj", "core_attention", "mlp_norm", "mlp.up_proj", "mlp.down_proj"}
    assert none - kept == pytest.approx(sum(saved[n] for n in readers))
    # A superset of the norms alone, and of the MoE-style activation-only saving.
    assert kept < saved_activation_bytes(layer, "selective[layernorm]")
    rerun = {op.name for op in recompute_graph(layer, "selective[elementwise]").ops}
    assert {"attn_norm", "rope", "attn_residual", "mlp_norm", "mlp.act"} <= rerun
    assert not rerun & {"qkv_proj", "core_attention", "out_proj", "mlp.up_proj", "mlp.down_proj"}


def test_elementwise_under_reads_only_skips_the_layer_output():
    """A stack that re-runs only what the backward reads (JAX) leaves out the last residual add: its output is
    the next layer's stored input, read by nothing in this layer's backward."""
    layer = layer_forward(load_model("llama3-8b"), Sharding(seq_len=4096), moe=False)
    whole = {op.name for op in recompute_graph(layer, "selective[core_attn+elementwise]").ops}
    pruned = {op.name for op in recompute_graph(layer, "selective[core_attn+elementwise]", reads_only=True).ops}
    assert "mlp_residual" in whole and "mlp_residual" not in pruned
    assert {"attn_norm", "rope", "core_attention", "attn_residual", "mlp_norm", "mlp.act"} <= pruned


def test_elementwise_plan_field_parses_and_slows_the_step():
    plan = parse_plan("tp=1,pp=1,dp=8,mbs=1,recompute=selective,recompute_modules=core_attn+elementwise")
    assert plan.recompute_modules == "core_attn+elementwise"
    model = load_model("llama3-8b")
    base = simulate_training(model, "h100-sxm", 8, seq_len=4096, global_batch=64,
                             plan="tp=1,pp=1,dp=8,mbs=1,recompute=selective,recompute_modules=core_attn")
    more = simulate_training(model, "h100-sxm", 8, seq_len=4096, global_batch=64, plan=plan.to_string())
    assert more.step_time_s > base.step_time_s
    assert more.peak_memory_bytes < base.peak_memory_bytes

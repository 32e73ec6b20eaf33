"""JAX remat re-runs only what the backward reads (stack field memory.recompute_reads_only)."""

from __future__ import annotations

import pytest

from windtunnel import load_model, simulate_training
from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.specs.stack import load_stack
from windtunnel.train.layers import recompute_graph, saved_activation_bytes


def _layer():
    return layer_forward(load_model("llama3-70b"), Sharding(seq_len=8192), moe=False)


@pytest.mark.parametrize("mode", ["selective[attn_proj+mlp+layernorm]", "selective[attn_output+mlp+layernorm]",
                                  "selective[core_attn+mlp]"])
def test_checkpointed_mlp_does_not_rerun_its_down_projection(mode):
    """The down projection's output only feeds the residual add, whose backward reads nothing: the
    pruned recompute leaves out exactly it and the adds after it; the up projection and activation stay,
    because the activation's derivative and the down projection's weight gradient read their outputs."""
    layer = _layer()
    whole = [op.name for op in recompute_graph(layer, mode).ops]
    pruned = [op.name for op in recompute_graph(layer, mode, reads_only=True).ops]
    assert "mlp.down_proj" in whole and "mlp.down_proj" not in pruned
    assert {"mlp.up_proj", "mlp.act", "core_attention"} <= set(pruned)
    assert set(whole) - set(pruned) <= {"mlp.down_proj", "mlp_residual"}
    # What is stored does not change: only the re-run work does.
    assert saved_activation_bytes(layer, mode) > 0


def test_attn_proj_still_reruns_the_out_projection():
    """MaxText save_qkv_proj: the out projection's output feeds the residual the MLP norm reads (and the
    recomputed MLP), so it re-runs even when only read outputs are recomputed."""
    pruned = {op.name for op in recompute_graph(_layer(), "selective[attn_proj+mlp+layernorm]", reads_only=True).ops}
    assert {"out_proj", "attn_residual", "mlp_norm"} <= pruned


def test_full_recompute_prunes_the_last_projection_too():
    layer = _layer()
    whole = recompute_graph(layer, "full")
    pruned = recompute_graph(layer, "full", reads_only=True)
    assert len(whole.ops) == len(layer.ops)
    assert {op.name for op in whole.ops} - {op.name for op in pruned.ops} == {"mlp.down_proj", "mlp_residual"}
    # The pruned graph's dependencies point inside it.
    assert all(0 <= d < len(pruned.ops) for op in pruned.ops for d in op.deps)


def test_only_the_jax_stack_prunes():
    assert load_stack("jax").memory.recompute_reads_only
    assert not load_stack("megatron").memory.recompute_reads_only
    assert not load_stack("pytorch-fsdp").memory.recompute_reads_only


def test_pruned_recompute_shortens_the_step_by_less_than_the_down_projection():
    """Same plan, same memory; the jax stack's recompute time drops, by at most the down projection's
    share of the forward GEMM FLOPs (for Llama 3 70B 28672 / (8192 + 2048 + 8192 + 3 x 28672) = 27%)."""
    kwargs = dict(seq_len=8192, global_batch=16, framework="jax")
    plan = "tp=1,pp=1,zero=3,mbs=2,recompute=selective,recompute_modules=attn_proj+mlp+layernorm"
    jax_run = simulate_training("llama3-70b", "h100-sxm", 8, plan=plan, **kwargs)
    stack = load_stack("jax")
    whole_stack = stack.model_copy(update={"memory": stack.memory.model_copy(update={"recompute_reads_only": False})})
    whole = simulate_training("llama3-70b", "h100-sxm", 8, plan=plan, **{**kwargs, "framework": whole_stack})
    assert jax_run.peak_memory_bytes == pytest.approx(whole.peak_memory_bytes)
    saved = whole.breakdown["recompute"] - jax_run.breakdown["recompute"]
    assert 0 < saved < 0.28 * whole.breakdown["compute"]

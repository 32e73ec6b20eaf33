"""FLOP counts against closed forms (Kaplan/Narayanan 6N + attention; GEMM FLOPs of the op graph)."""

from __future__ import annotations

import pytest

from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.specs.model import load_model
from windtunnel.train.flops import model_flops_per_token


def _attention_weights(m) -> int:
    """Q, K, V and output projection weights (plus QKV bias) of one layer, from the raw shape."""
    h, d = m.hidden, m.head_dim
    bias = (m.heads + 2 * m.kv_heads) * d if m.qkv_bias else 0
    return h * m.heads * d + 2 * h * m.kv_heads * d + m.heads * d * h + bias


def _mlp_weights(m, width: int) -> int:
    return (3 if m.activation == "swiglu" else 2) * m.hidden * width


def _gemm_flops(graph) -> float:
    return sum(op.flops * op.count for op in graph.ops if op.kind == "gemm")


@pytest.mark.parametrize("name", ["llama3-8b", "gpt3-175b"])
@pytest.mark.parametrize("seq", [2048, 8192])
def test_flops_per_token_is_6n_plus_attention(name, seq):
    """Non-causal training FLOPs/token = 6 * matmul weights (layers + LM head) + 12 * L * a * d_head * s."""
    m = load_model(name)
    n_matmul = m.layers * (_attention_weights(m) + _mlp_weights(m, m.ffn_hidden)) + m.vocab * m.hidden
    # the same count, as the brief phrases it: active params minus norms minus the untied input embedding
    norms = 2 * m.hidden * m.layers + m.hidden
    lookup = 0 if m.tied_embeddings else m.vocab * m.hidden
    assert n_matmul == m.active_params() - norms - lookup
    expected = 6 * n_matmul + 12 * m.layers * m.heads * m.head_dim * seq
    assert model_flops_per_token(m, seq, causal=False) == pytest.approx(expected, rel=1e-9)


def test_causal_attention_halves_the_attention_term():
    """Causal masking halves only the attention term: full - causal = 6 * L * a * d_head * s."""
    m = load_model("llama3-8b")
    s = 4096
    diff = model_flops_per_token(m, s, causal=False) - model_flops_per_token(m, s, causal=True)
    assert diff == pytest.approx(6 * m.layers * m.heads * m.head_dim * s, rel=1e-9)


def test_405b_total_flops_close_to_6_params_tokens():
    """Llama 3 405B at seq 8192: training FLOPs within 10% of 6 * total params * tokens (attention is small)."""
    m = load_model("llama3-405b")
    seq, batch = 8192, 16
    tokens = seq * batch
    total = model_flops_per_token(m, seq) * tokens
    assert total == pytest.approx(6 * m.total_params() * tokens, rel=0.10)
    assert m.total_params() == pytest.approx(405e9, rel=0.01)


@pytest.mark.parametrize("name", ["llama3-8b", "llama3-70b", "gpt3-175b"])
def test_dense_layer_gemm_flops_equal_2_tokens_params(name):
    """Forward GEMM FLOPs of one dense layer (tp=1) = 2 * tokens * (attention + MLP weights), within 1%."""
    m = load_model(name)
    seq, mbs = 2048, 2
    graph = layer_forward(m, Sharding(tp=1, seq_len=seq, micro_batch=mbs), moe=False)
    expected = 2 * seq * mbs * (_attention_weights(m) + _mlp_weights(m, m.ffn_hidden))
    assert _gemm_flops(graph) == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"])
def test_moe_layer_gemm_flops_equal_2_tokens_active_params(name):
    """Forward GEMM FLOPs of one MoE layer with balanced routing = 2 * tokens * (attention + top-k experts
    + shared experts + router), within 1%."""
    m = load_model(name)
    seq = 4096
    graph = layer_forward(m, Sharding(tp=1, seq_len=seq, moe_imbalance=1.0), moe=True)
    active = m.attention_params() + m.moe.topk * m.expert_params() + m.shared_expert_params() + m.hidden * m.moe.experts
    assert _gemm_flops(graph) == pytest.approx(2 * seq * active, rel=0.01)


@pytest.mark.parametrize("name", ["llama3-8b", "llama3-70b"])
@pytest.mark.parametrize("sp", [True, False])
def test_tensor_parallel_splits_gemm_flops(name, sp):
    """With KV heads divisible by tp, each of 8 TP ranks runs 1/8 of the layer's GEMM FLOPs."""
    m = load_model(name)
    assert m.kv_heads % 8 == 0
    one = _gemm_flops(layer_forward(m, Sharding(tp=1, seq_len=2048), moe=False))
    eight = _gemm_flops(layer_forward(m, Sharding(tp=8, sp=sp, seq_len=2048), moe=False))
    assert eight == pytest.approx(one / 8, rel=0.01)


def test_flash_attention_flops_match_closed_form():
    """Fused causal attention FLOPs of one layer = 2 * 2 * b * a * s * (s/2) * d_head (QK^T and PV)."""
    m = load_model("llama3-8b")
    s, b = 4096, 1
    graph = layer_forward(m, Sharding(tp=1, seq_len=s, micro_batch=b), moe=False)
    attention = sum(op.flops * op.count for op in graph.ops if op.kind == "attention")
    assert attention == pytest.approx(4 * b * m.heads * s * (s / 2) * m.head_dim, rel=1e-9)


def test_context_parallel_splits_all_flops():
    """With cp=2 each rank does half of the layer's GEMM and attention FLOPs (load-balanced causal ring)."""
    m = load_model("llama3-8b")

    def total(cp: int) -> float:
        graph = layer_forward(m, Sharding(cp=cp, seq_len=8192), moe=False)
        return sum(op.flops * op.count for op in graph.ops if op.kind in ("gemm", "attention"))

    assert total(2) == pytest.approx(total(1) / 2, rel=0.01)

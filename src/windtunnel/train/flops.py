"""Model FLOPs per step: what MFU counts (no recomputation), from the model's shape.

Per token, a forward pass costs 2 FLOPs per active weight of every matrix multiply (including the
LM head, excluding the embedding lookup) plus the attention score and value products; backward
costs twice the forward. Attention is causal, so each query sees on average half the sequence
(capped by a sliding window where the model has one). Units: FLOPs.
"""

from __future__ import annotations

from windtunnel.specs.model import ModelSpec


def attention_flops_per_token(model: ModelSpec, seq_len: int, *, causal: bool = True) -> float:
    """Forward FLOPs of QK^T and PV for one token, summed over layers."""
    if model.mla is not None:
        qk = model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
        v = model.mla.v_head_dim
    else:
        qk = v = model.head_dim
    keys = seq_len / 2.0 if causal else float(seq_len)
    if model.attention_window:
        windowed = min(float(model.attention_window), keys)
        keys = (1 - model.windowed_layer_fraction) * keys + model.windowed_layer_fraction * windowed
    return 2.0 * model.heads * (qk + v) * keys * model.layers


def matmul_params_per_token(model: ModelSpec) -> float:
    """Active weights of matrix multiplies touched by one token (LM head included, lookup excluded)."""
    norms = 2 * model.hidden * model.layers + model.hidden
    # An untied input embedding is a table lookup, not a matrix multiply; a tied one is the LM head.
    lookup = 0 if model.tied_embeddings else model.vocab * model.hidden
    return float(model.active_params() - norms - lookup)


def mtp_matmul_params_per_token(model: ModelSpec) -> float:
    """Active matrix-multiply weights of one multi-token-prediction module per token: its projection,
    its transformer layer (top-k routed and shared experts for MoE) and the shared output layer."""
    inactive = (model.moe.experts - model.moe.topk) * model.expert_params() if model.moe and model.moe_layers else 0
    norms = 2 * model.hidden + 3 * model.hidden  # the layer's two and the module's three (not matmuls)
    return float(model.mtp_params() - inactive - norms + model.vocab * model.hidden)


def model_flops_per_token(model: ModelSpec, seq_len: int, *, causal: bool = True, mtp: int = 0) -> float:
    """Training FLOPs (forward + backward) per token; ``mtp`` multi-token-prediction modules add
    one layer's attention and their matrix multiplies each."""
    forward = 2.0 * matmul_params_per_token(model) + attention_flops_per_token(model, seq_len, causal=causal)
    if mtp:
        per_layer_attention = attention_flops_per_token(model, seq_len, causal=causal) / model.layers
        forward += mtp * (2.0 * mtp_matmul_params_per_token(model) + per_layer_attention)
    return 3.0 * forward

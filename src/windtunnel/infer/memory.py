"""Serving memory per device: weight bytes, KV-cache bytes per token and layer, activation workspace.

Used by :func:`windtunnel.infer.deployment.resolve_instance` to size each instance's paged KV cache.
Sizes are bytes, lengths tokens.
"""

from __future__ import annotations

from windtunnel.specs.model import ModelSpec


def kv_bytes_per_token_layer(model: ModelSpec, tp: int, kv_bytes: float) -> float:
    """KV-cache bytes one token adds to one layer on one device of a ``tp``-way attention group.

    MLA keeps one compressed latent plus the decoupled RoPE key per token and layer
    ((kv_lora_rank + qk_rope_head_dim) elements), replicated on every TP rank; grouped-query attention
    keeps a key and a value per KV head (2 x kv_heads x head_dim), KV heads split over TP (a rank holds
    at least one, replicated when TP exceeds the KV heads).
    """
    if model.mla is not None:
        return (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * kv_bytes
    local_heads = max(1, model.kv_heads // tp)
    return 2.0 * local_heads * model.head_dim * kv_bytes


WEIGHT_ONLY = {"w4a16": ("bf16", 0.5), "w8a16": ("bf16", 1.0)}  # precision: (compute precision, weight bytes)


def bytes_of(precision: str) -> float:
    """Bytes per stored element of a serving precision (fp8/int8: 1, int4 weights (w4a16): 0.5, bf16/fp16: 2)."""
    if precision in WEIGHT_ONLY:
        return WEIGHT_ONLY[precision][1]
    return 1.0 if precision in ("fp8", "int8") else 2.0


def weight_bytes_per_device(model: ModelSpec, tp: int, dp: int, ep: int, pp: int, precision: str) -> float:
    """Weight bytes on one device: attention and dense MLPs split over TP (replicated over DP groups),
    routed experts spread over the stage's tp x dp devices, shared experts over TP, the router replicated,
    the embedding and LM head vocabulary-parallel over TP; layers split over ``pp`` stages (the embedding
    and head counted on the busiest stage). Norms and biases are negligible and omitted."""
    b = bytes_of(precision)
    stage_devices = tp * dp
    attn = model.attention_params() / tp
    dense = model.mlp_params(model.ffn_hidden) / tp
    per_layer_dense = attn + dense
    moe_layer = 0.0
    if model.moe is not None:
        moe = model.moe
        local_experts = -(-moe.experts // ep) / (stage_devices // ep)  # expert slices per device (EP x expert-TP)
        moe_layer = (attn + local_experts * model.expert_params()
                     + model.shared_expert_params() / tp + model.hidden * moe.experts)
    layers_dense, layers_moe = model.dense_layers, model.moe_layers
    per_stage = (layers_dense * per_layer_dense + layers_moe * moe_layer) / pp
    embed = model.vocab * model.hidden / tp
    # Stage 0 holds the embedding and the last stage the head; with one stage both.
    extra = 2 * embed if pp == 1 else embed
    return (per_stage + extra) * b


def activation_bytes(model: ModelSpec, tp: int, max_tokens: int, max_batch: int, etp: int = 1) -> float:
    """Activation workspace per device: the widest iteration's hidden states and local FFN input
    (max_tokens x (4 x hidden + 2 x widest local FFN width) x 2 bytes) plus fp32 logits of the batch.
    A routed token's expert intermediate is split over the ``etp`` expert-tensor-parallel ranks."""
    widest = model.ffn_hidden // tp
    if model.moe is not None:
        widest = max(widest, 2 * model.moe.ffn_hidden * model.moe.topk // max(1, etp))
    per_token = (4 * model.hidden + 2 * widest) * 2.0
    return max_tokens * per_token + max_batch * model.vocab / tp * 4.0

"""The work of one fused (flash) attention call: scores, FLOPs, exponentials, bytes and the shape the cost
model reads (:func:`windtunnel.cost.compute.attention_time`). One place for it, so that a layer's graph
(:meth:`windtunnel.graph.transformer._Builder.core_attention`) and the kernel-level check against published
attention benchmarks (validation/attention_kernels.py) cost the same call the same way.
Units: elements, FLOPs, bytes (16-bit activations), tokens."""

from __future__ import annotations

from dataclasses import dataclass

ACT_BYTES = 2  # bf16/fp16 activations


@dataclass(frozen=True)
class AttentionWork:
    """One attention call on ``batch_heads`` = batch x query heads rows.

    ``scores``: query-key pairs computed (causal masking halves the matrix, a sliding window caps each
    query's keys); ``flops``: the score and value matmuls (2 FLOPs per multiply-add); ``exponentials``: one
    per score; ``qkv_bytes`` and ``out_bytes``: the inputs read and the output written; ``shape``: what
    the cost model reads, (batch x heads, queries, keys, head dim, window keys, windowed share of FLOPs)."""

    scores: float
    flops: float
    exponentials: float
    qkv_bytes: float
    out_bytes: float
    shape: tuple


def attention_work(batch: int, heads: int, kv_heads: int, q_len: int, kv_len: int, qk_dim: int, v_dim: int, *,
                   window: int | None = None, windowed_fraction: float = 0.0, causal: bool = True) -> AttentionWork:
    """The work of attention of ``q_len`` queries against ``kv_len`` keys per sequence.

    ``window``: a sliding window of that many keys on ``windowed_fraction`` of the calls (the model's
    windowed layers; 1.0 for a call that is all windowed). Causal, the average query sees half the keys
    (the whole sequence's, also when a context-parallel rank holds ``q_len`` < ``kv_len`` of the queries)."""
    effective_kv = kv_len / 2.0 if causal else float(kv_len)
    window_keys, window_share = 0, 0.0
    if window:
        windowed = min(float(window), effective_kv)
        effective_kv = (1 - windowed_fraction) * effective_kv + windowed_fraction * windowed
        # The kernel's efficiency depends on the keys each query block sees, so the windowed calls' share of
        # the work is costed at the window's length (cost.compute.attention_time).
        window_keys = min(window, kv_len)
        window_share = windowed_fraction * windowed / effective_kv
    scores = batch * heads * q_len * effective_kv
    flops = 2.0 * scores * qk_dim + 2.0 * scores * v_dim
    qkv_bytes = ACT_BYTES * batch * q_len * (heads * qk_dim + kv_heads * (qk_dim + v_dim))
    out_bytes = ACT_BYTES * batch * q_len * heads * v_dim
    shape = (batch * heads, q_len, kv_len, qk_dim, window_keys, window_share)
    return AttentionWork(scores, flops, scores, qkv_bytes, out_bytes, shape)

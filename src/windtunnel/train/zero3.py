"""DeepSpeed ZeRO-3's transfer units: the weight matrices its parameter coordinator fetches one submodule at a
time, and the reduce buckets its gradients fill (parameters; seconds come from the collective model)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def layer_weights(model, tp: int, moe: bool) -> list[float]:
    """A layer's dense weight matrices on one device in forward order (parameters): the fused QKV and output
    projections (three quarters and one quarter of the attention's weights with as many KV as query
    heads; the split follows the heads otherwise) and, for a dense layer, the MLP's input projection (fused
    gate and up with SwiGLU) and output projection."""
    attention = model.attention_params()
    head_dim = model.head_dim or model.hidden // model.heads
    out = model.heads * head_dim * model.hidden
    weights = [max(0.0, attention - out), float(min(out, attention))]
    if not moe:
        mats = 3 if model.activation == "swiglu" else 2
        mlp = model.mlp_params(model.ffn_hidden)
        weights += [mlp * (mats - 1) / mats, mlp / mats]
    return [w / max(1, tp) for w in weights]


def reduce_buckets(grads: list[float], bucket: float | None) -> list[float]:
    """Gradient sizes (parameters) grouped as DeepSpeed ZeRO-3 fills its reduce bucket: a gradient that
    would overflow a non-empty bucket first reduces the bucket (stage3.py
    reduce_independent_p_g_buckets_and_remove_grads); None: one bucket for all."""
    if bucket is None:
        return [sum(grads)]
    out: list[float] = []
    filled = 0.0
    for grad in grads:
        if filled > 0 and filled + grad > bucket:
            out.append(filled)
            filled = 0.0
        filled += grad
    if filled > 0:
        out.append(filled)
    return out


def module_transfers(weights: list[float], rest: float, bucket: float | None,
                     collective: Callable[[str, float], float]) -> tuple[float, float]:
    """(all-gather, reduce-scatter) seconds for one layer fetched per weight matrix: ``weights`` in forward order,
    ``rest`` (norms, biases; everything when ``weights`` is empty) gathered with the last one; gradients reduced in buckets in backward order.
    ``collective(kind, params)`` gives the seconds of one collective over that many parameters."""
    units = list(weights) or [0.0]  # no weights: the whole layer as one unit
    units[-1] += max(0.0, rest)
    gather = sum(collective("all_gather", w) for w in units)
    reduce = sum(collective("reduce_scatter", b) for b in reduce_buckets(list(reversed(units)), bucket))
    return gather, reduce


def zero3_layer_times(builder: Any, kind: str, weight_bytes: float) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's ZeRO-3 transfers for a step builder (train/step.py): the
    forward all-gathers the parameters, the backward gathers them again and reduce-scatters the gradients.
    One collective per block (FSDP's units) or per weight matrix (DeepSpeed's fetch_sub_module)."""
    dense, expert = builder.layer_params(kind)
    sharding = builder.stack.sharding

    def collective(name: str, params: float, experts: float = 0.0) -> float:
        # Gradients in the main-gradient dtype (FSDP's reduce_dtype, DeepSpeed's communication_data_type).
        return builder._dp_collective(name, params, experts, weight_bytes if name == "all_gather" else builder.states.grads)

    weights = layer_weights(builder.job.model, builder.plan.tp, kind == "moe") \
        if sharding.fetch_unit == "module" and kind in ("dense", "moe") else []
    gather, reduce = module_transfers(weights, dense - sum(weights), sharding.reduce_bucket_params if weights else None,
                                      collective)
    gather += collective("all_gather", 0.0, expert)
    reduce += collective("reduce_scatter", 0.0, expert)
    return gather, gather + reduce

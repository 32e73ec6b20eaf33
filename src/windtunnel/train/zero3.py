"""DeepSpeed ZeRO-3's transfer units: the weight matrices its parameter coordinator fetches one submodule at a
time, the reduce buckets its gradients fill and the small persistent parameters it re-gathers after each step
(parameters; seconds come from the collective model)."""

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


def small_tensors(model, tp: int, threshold: float, layers: int) -> dict[float, int]:
    """A device's parameter tensors of fewer than ``threshold`` elements, as {elements: count}: for each of
    its ``layers`` transformer layers the norms (LayerNorm: weight and bias; RMSNorm: weight), the QK-Norm
    weights and the projection biases (``linear_bias``: QKV, output, MLP input and output; ``qkv_bias``:
    QKV only; the column-parallel ones split over ``tp``), and the final norm (counted on every device: a
    tiny overcount under pipelining). Experts and routers are left out (their tensors are large)."""
    h = model.hidden
    head_dim = model.head_dim or h // model.heads
    kv = model.kv_heads or model.heads
    per_norm = [float(h)] * (2 if model.norm == "layernorm" else 1)
    layer: list[float] = per_norm * 2
    if model.qk_norm:
        layer += [float(head_dim)] * 2
    if model.linear_bias or model.qkv_bias:
        layer.append((model.heads + 2 * kv) * head_dim / max(1, tp))
    if model.linear_bias:
        up = model.ffn_hidden * (2 if model.activation == "swiglu" else 1)
        layer += [float(h), up / max(1, tp), float(h)]
    counts: dict[float, int] = {}
    for size in [*layer * layers, *per_norm]:
        if size < threshold:
            counts[size] = counts.get(size, 0) + 1
    return counts


def persistent_gather_seconds(builder, layers: int) -> float:
    """Seconds DeepSpeed ZeRO-3 spends after each optimizer step re-gathering its persistent parameters
    (those under the stack's ``sharding.persistence_threshold_params``: norms and biases) on a device
    holding ``layers`` transformer layers. microsoft/DeepSpeed v0.6.2 stage3.py ``_post_step`` calls
    ``all_gather`` on the persistent parameters, and partition_parameters.py ``_allgather_params_coalesced``
    issues one ``_all_gather_base`` per parameter on the data-parallel group (the batching context is
    commented out), then ``torch.cuda.synchronize()``: the collectives run one after another on the group's
    stream and nothing overlaps them. Each moves a few kilobytes, so it costs its ring's latency. Zero under
    ZeRO < 3 or for a stack without the threshold."""
    from windtunnel.train.memory import WEIGHT_BYTES  # memory imports this module

    if builder.plan.zero < 3 or builder.placement.dp.size <= 1:
        return 0.0
    threshold = builder.stack.sharding.persistence_threshold_params
    if threshold is None:
        return 0.0
    counts = small_tensors(builder.job.model, builder.plan.tp, threshold, layers)
    return sum(count * builder._dp_collective("all_gather", size, 0.0, WEIGHT_BYTES) for size, count in counts.items())


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


def stream_exposed(builder: Any, kind: str, phase: str) -> float | None:
    """Seconds one layer's ZeRO-3 transfers add to ``phase`` ('fwd' or 'bwd-<recompute mode>') when the
    stack runs gathers and reduce-scatters on one collective stream in issue order (sharding
    collective_stream 'shared', DeepSpeed): the step is played per submodule by train/zero3_stream.py
    and its exposed time shared evenly over the layers. None where that play does not apply (ZeRO < 3,
    another stack, MoE layers, pipeline parallelism, zero-bubble phase splits): the caller then uses the
    per-layer overlap of :func:`zero3_layer_times`."""
    sharding, plan = builder.stack.sharding, builder.plan
    if plan.zero < 3 or sharding.collective_stream != "shared" or sharding.fetch_unit != "module" \
            or kind != "dense" or plan.pp > 1:
        return None
    if phase != "fwd" and not phase.startswith("bwd-"):
        return None
    modes = set(builder.recompute_modes(builder.job.model.layers))
    if len(modes) != 1:
        return None  # layers recomputed differently: not one repeated layer
    # The forward's exposure comes from the same played step as the backward of the plan's mode.
    mode = modes.pop()
    if phase != "fwd" and phase != f"bwd-{mode}":
        return None
    cache = builder.__dict__.setdefault("_zero3_stream", {})
    if mode not in cache:
        cache[mode] = _play_stream(builder, kind, mode)
    played, layers, held = cache[mode]
    exposed = played.forward_exposed_s if phase == "fwd" else played.backward_exposed_s
    comm = played.forward_comm_s if phase == "fwd" else played.backward_comm_s
    compute = played.forward_compute_s if phase == "fwd" else played.backward_compute_s
    # The collective kernels hold a share of the compute units while they run beside the compute.
    slowed = held * min(max(0.0, comm - exposed), compute)
    return (exposed + slowed) / max(1, layers)


def _play_stream(builder: Any, kind: str, mode: str):
    from windtunnel.train.memory import WEIGHT_BYTES
    from windtunnel.train.zero3_stream import Submodule, play_step

    model, plan, sharding = builder.job.model, builder.plan, builder.stack.sharding
    dense, _ = builder.layer_params(kind)
    weights = layer_weights(model, plan.tp, moe=False)
    recompute = mode == "full"
    fwd = builder.coster.play(builder.phase_graphs(kind, "fwd")).time
    bwd = builder.coster.play(builder.phase_graphs(kind, f"bwd-{mode}")).time - (fwd if recompute else 0.0)
    # Split the layer's compute over its submodules by FLOPs per token: 2 per weight for its GEMM, and
    # 4 x sequence x attention width for the core attention (scores and context, no parameters) between
    # the input and output projections.
    head_dim = model.head_dim or model.hidden // model.heads
    core = 4.0 * builder.job.seq_len * model.heads * head_dim / max(1, plan.tp)
    flops = [2.0 * weights[0], core] + [2.0 * w for w in weights[1:]]
    total = sum(flops)
    # Norms and biases: small gradients reduced beside the weights' (one group after each weight's);
    # their parameters stay gathered (below stage3_param_persistence_threshold), so they are not fetched.
    small = max(0.0, dense - sum(weights)) / max(1, len(weights))
    # The module calls without gathered parameters before each weight (norms, dropouts, containers) run
    # the coordinator's prefetch too; the core attention is one of those before the output projection.
    hooks = list(sharding.hooks_before_weights) + [0] * len(weights)
    layer: list[Submodule] = []
    for i, weight in enumerate(weights):
        if i == 1:
            layer.append(Submodule(0.0, fwd * flops[1] / total, max(0.0, bwd) * flops[1] / total,
                                   hooked=hooks[1] > 0))
        layer += [Submodule(0.0, 0.0, 0.0)] * max(0, hooks[i] - (1 if i == 1 else 0))
        share = flops[0 if i == 0 else i + 1] / total
        layer.append(Submodule(weight, fwd * share, max(0.0, bwd) * share, (weight, small)))
    layers = model.layers // max(1, plan.pp)

    def gather(n: float) -> float:
        return builder._dp_collective("all_gather", n, 0.0, WEIGHT_BYTES)

    def reduce(n: float) -> float:
        return builder._dp_collective("reduce_scatter", n, 0.0, builder.states.grads)

    host_copy = None
    if plan.offload_optimizer and builder.stack.memory.optimizer_offload_blocking_copy:
        # The offloaded share of each reduced partition goes to host memory, 2 bytes a parameter.
        link = builder.chip.host_link_bandwidth * builder.eff.host_link
        share = plan.offload_optimizer / max(1, builder.placement.dp.size)

        def host_copy(n: float) -> float:
            return n * share * WEIGHT_BYTES / link

    grad_pass = None
    if sharding.grad_predivide:
        # One read and one write of the bucket's gradients at the chip's sustained memory bandwidth.
        bandwidth = builder.chip.hbm_bandwidth * builder.eff.memory_bandwidth

        def grad_pass(n: float) -> float:
            return 2.0 * builder.states.grads * n / bandwidth

    # CPU checkpointing: the checkpoint's synchronous copy each way (the stack's 'blocking' kind).
    layer_sync = builder.checkpoint_copy_s(kind, mode)
    played = play_step(layer, layers, recompute=recompute, gather=gather, reduce=reduce,
                       prefetch_bucket=sharding.prefetch_bucket_params,
                       max_live=sharding.max_live_params or float("inf"),
                       max_reuse=sharding.max_reuse_params,
                       reduce_bucket=sharding.reduce_bucket_params or float("inf"), host_copy=host_copy,
                       layer_sync_s=layer_sync, wait_for_kernel=sharding.collective_priority == "normal",
                       grad_pass=grad_pass)
    held = builder.comm_units / max(1, builder.coster.eff.compute_units)
    return played, layers, held

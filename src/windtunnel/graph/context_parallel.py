"""Context-parallel attention beyond the generic ring (graph.transformer): PyTorch's context_parallel with its
all-gather rotater, whose backward re-gathers the keys and values and rotates fp32 dK/dV accumulators, and
Ulysses' head/sequence all-to-alls. Units: bytes, FLOPs; each function adds operators to a layer builder."""

from __future__ import annotations

from windtunnel.graph.ops import Op
from windtunnel.specs.errors import WindtunnelError

ACT_BYTES = 2


def pytorch_allgather(builder, deps: tuple[int, ...], kv_block: float, work: tuple[float, float, float, float],
                      shape: tuple) -> tuple[int, ...]:
    """PyTorch's context_parallel with the all-gather rotater (torch/distributed/tensor/experimental/_attention.py,
    Dec 2024: _templated_ring_attention, _templated_ring_attention_backward, _AllGatherRotater): the forward
    all-gathers this CP group's keys and values once, runs the local block first and then the other ranks'
    blocks; the backward all-gathers them again (its kv_rotater) and, after each of its cp steps, sends the
    fp32 dK/dV accumulator to the next rank (dkv_rotater = _RotateMethod.ALL_TO_ALL, one permute_tensor per
    step), the last one bringing each rank its own gradients back. ``kv_block``: bytes of this rank's K and V;
    ``work``: the attention's (FLOPs, exponentials, bytes per kernel, saved bytes) over all steps; ``shape``:
    the attention operator's, its key length replaced by one call's (call_key_lengths). Returns what the
    merge waits for.

    Eager, a functional collective returns an AsyncCollectiveTensor waited at its first use: the all-gather runs
    beside the local block, each dK/dV transfer beside the next step, only the last one exposed. Traced
    (torch.compile of the block, as torchtitan's apply_compile does with fullgraph=True), _maybe_wrap_tensor
    waits right where the collective is issued and Inductor moves neither the collective nor its wait unless
    reorder_for_compute_comm_overlap is set (off by default): every CP transfer then stalls the attention
    (plan field cp_overlap false). Graph order matters: the backward is this graph reversed
    (graph.ops.backward_of), so the zero-byte forward operators below carry the backward's transfers."""
    s = builder.s
    flops, scores, kernel_bytes, saved = work
    local_keys, ring_keys = call_key_lengths(shape[1])

    def attention(name: str, share: float, steps: float, step_deps: tuple[int, ...]) -> int:
        keys = local_keys if name == "core_attention" else ring_keys
        return builder.g.add(Op(name, "attention", flops=flops * share, exponentials=scores * share,
                                bytes_moved=kernel_bytes * steps, saved_bytes=saved * share,
                                shape=call_shape(shape, keys), deps=step_deps, precision="bf16",
                                kernel=s.attention_kernel,
                                host_ops=s.linear_host_ops if name == "core_attention" else 1.0))

    def rotation(name: str, sends: int, rotation_deps: tuple[int, ...]) -> int:
        # Nothing moves forward; the backward sends ``sends`` fp32 dK/dV accumulators to the next rank.
        return builder.g.add(Op(name, "send_recv", stream="cp", group="cp", deps=rotation_deps, host_ops=0.0,
                                backward_bytes=sends * kv_block * s.cp_grad_bytes / ACT_BYTES,
                                backward_host_ops=float(sends)))

    gather = kv_block * s.cp
    if not s.cp_overlap:
        ag = builder.comm("cp_kv_allgather", "all_gather", "cp", gather, deps, backward_bytes=gather)
        first = attention("core_attention", 1.0 / s.cp, 1.0, (ag,))
        rest = attention("core_attention_ring", (s.cp - 1) / s.cp, s.cp - 1, (first,))
        return (rotation("cp_dkv_rotate", s.cp, (rest,)),)
    # Overlapped: the backward plays the merge, the ring steps (beside cp - 1 rotations), the local block
    # (beside the re-gather), then the last rotation, which the input gradients wait for.
    last = rotation("cp_dkv_return", 1, deps)
    ag = builder.comm("cp_kv_allgather", "all_gather", "cp", gather, deps, backward_bytes=gather)
    first = attention("core_attention", 1.0 / s.cp, 1.0, (*deps, last))
    rest = attention("core_attention_ring", (s.cp - 1) / s.cp, s.cp - 1, (first, ag))
    return (rest, rotation("cp_dkv_rotate", s.cp - 1, deps))


def call_key_lengths(q_len: int) -> tuple[float, float]:
    """Keys each query sees in one SDPA call of PyTorch's context_parallel, for a rank holding ``q_len``
    queries (tokens): (the local step, a ring step). The kernel's efficiency follows the length of one
    call, not the gathered sequence (cost.compute.attention_time), and every call here is a rank's block.

    torch/distributed/tensor/experimental/_attention.py (_templated_ring_attention, _is_causal_behavior,
    _ContextParallelOptions.enable_load_balance = True, the default torchtitan keeps): the local step is
    one causal call over the rank's own ``q_len`` keys; with the head-tail (round-robin) sharding every
    later step is a non-causal call of the same FLOPs, either all queries against the first half of the
    visiting block (i <= rank: q_len / 2 keys) or the second half of the queries against all of it
    (i > rank: q_len keys). Over the CP group half the ring calls are of each kind, so a query sees
    (q_len / 2 + q_len) / 2 = 0.75 q_len keys per ring call on average."""
    return float(q_len), 0.75 * q_len


def call_shape(shape: tuple, keys: float) -> tuple:
    """``shape`` (batch*heads, q_len, kv_len, head_dim[, window_keys, window_share]) with one call's
    ``keys`` as its key length; a sliding window sees no more keys than the call holds."""
    if len(shape) > 5:
        return (shape[0], shape[1], keys, shape[3], min(shape[4], keys) if shape[4] else shape[4], shape[5])
    return (shape[0], shape[1], keys, *shape[3:])


def ulysses_attention(builder, deps: tuple[int, ...], heads: int, kv_heads: int, qk_dim: int, v_dim: int,
                      scores: float, flops: float, window: tuple[float, float]) -> tuple[int, ...]:
    """Ulysses CP (DeepSpeed-Ulysses, Jacobs et al. 2023, arXiv 2309.14509; MindSpeed ulysses_cp_algo;
    Megatron cp_comm_type a2a): an all-to-all turns this rank's sequence shard of every head into the
    whole sequence of heads/cp heads, attention runs locally, and an all-to-all turns the output back;
    the backward runs the same all-to-alls on the gradients. Key/value heads fewer than cp ranks are
    sent to each rank that needs them (cp / kv_heads copies)."""
    s, b = builder.s, builder.s.micro_batch
    if heads % s.cp:
        raise WindtunnelError(
            f"Plan field 'cp' is {s.cp}, but Ulysses context parallelism splits this rank's {heads} attention "
            f"heads over the cp ranks, so cp must divide {heads}; use such a cp, or the ring or allgather "
            "algorithm (the stack's comm.context_parallel).", field="cp")
    q_len = s.seq_len // s.cp
    kv_copies = max(1.0, s.cp / kv_heads)
    qkv_shard = ACT_BYTES * b * q_len * (heads * qk_dim + kv_heads * kv_copies * (qk_dim + v_dim))
    out_shard = ACT_BYTES * b * q_len * heads * v_dim
    inbound = builder.comm("cp_a2a_qkv", "all_to_all", "cp", qkv_shard, deps)
    local_heads = max(1, heads // s.cp)
    qkv_bytes = ACT_BYTES * b * q_len * (heads * qk_dim + kv_heads * (qk_dim + v_dim))
    saved = qkv_bytes + 4.0 * b * heads * q_len
    # This rank's queries times all keys (``flops``, ``scores``): the same work as a ring's, in one kernel.
    core = builder.g.add(Op("core_attention", "attention", flops=flops, exponentials=scores,
                            bytes_moved=qkv_bytes + out_shard, saved_bytes=saved,
                            shape=(b * local_heads, s.seq_len, s.seq_len, qk_dim, *window), deps=(inbound,),
                            precision="bf16", host_ops=s.linear_host_ops, kernel=s.attention_kernel))
    return (builder.comm("cp_a2a_out", "all_to_all", "cp", out_shard, (core,)),)

"""Operators a framework adds around a layer's kernels (stack data, specs.stack): Megatron-Core's
sequential expert loop, PyTorch context parallelism's fp32 merges, Praxis's one-hot embedding lookup. Units: elements, bytes, passes
(one pass reads or writes every element once in 16 bits)."""

from __future__ import annotations

ACT_BYTES = 2


def sequential_experts(builder, rows: int, local_experts: int, deps: tuple[int, ...]) -> int:
    """Megatron-Core's SequentialMLP (core_v0.6.0 moe/experts.py): the permuted tokens are sliced per
    local expert, each slice runs its own MLP and is copied into a zero tensor of the output. Beyond the
    experts' GEMMs (costed per expert), the loop moves ``rows`` x hidden 16-bit elements: forward the
    stack's sequential_forward_passes; backward, per expert, PyTorch autograd's CopySlices (a copy of
    the whole output gradient for each in-place slice write, torch/csrc/autograd/functions/tensor.cpp),
    SliceBackward's zero tensor of the whole input (slice_backward_wrapper in derivatives.yaml) and the
    input buffer's sum of the experts' gradients (autograd/input_buffer.cpp): the stack's
    sequential_backward_passes_per_expert. Host: each expert's slice, copy and MLP calls."""
    s = builder.s
    elements = rows * builder.model.hidden
    forward_passes, backward_passes, host_ops = s.sequential_costs
    return builder.memory("expert_loop", elements, deps, passes=forward_passes,
                          backward_bytes=backward_passes * local_experts * ACT_BYTES * elements,
                          host_ops=host_ops * local_experts, backward_host_ops=host_ops * local_experts)


def allgather_index_ops(builder, rows: int, gathered: int, deps: tuple[int, ...]) -> int:
    """The allgather dispatcher's row selection by index (MindSpeed's allgather_token_permutation and
    allgather_token_unpermutation, mindspeed/core/transformer/moe/token_dispatcher.py): this rank's ``rows``
    (routed to its experts) are picked out of the ``gathered`` tokens and sorted by expert with two
    indexing gathers, scattered back with index_put into a zero tensor, scaled by their probabilities,
    cast to fp32 and scatter-added (index_put accumulate) into an fp32 zero tensor of all gathered
    tokens, cast back to 16 bits for the reduce-scatter. The stack's comm.allgather_index_passes gives
    the passes (16-bit, rows x hidden) over routed and gathered rows, forward and backward."""
    hidden = builder.model.hidden
    forward_rows, forward_gathered, backward_rows, backward_gathered = builder.s.gather_index_passes
    forward = forward_rows * rows + forward_gathered * gathered
    backward = backward_rows * rows + backward_gathered * gathered
    return builder.memory("allgather_index_ops", forward * hidden, deps, passes=1.0,
                          backward_bytes=ACT_BYTES * backward * hidden, host_ops=10.0, backward_host_ops=6.0)


def padded_values(builder, rows: int, qk_dim: int, v_dim: int, deps: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """MindSpeed-LLM's multi-head latent attention (modellink/core/transformer/multi_head_latent_attention.py):
    npu_fusion_attention wants one head dim, so with --shape-order BNSD the values are padded (F.pad) from
    v_dim to the query/key head dim and the output is sliced back to v_dim and reshaped (a copy) before the
    out projection. Returns the attention's inputs and the value head dim it runs at; ``rows``: tokens x heads.
    Off (stack kernels.mla_pad_v false) or with equal head dims, nothing changes."""
    if not builder.s.mla_pad_v or v_dim >= qk_dim:
        return deps, v_dim
    # pad: read v_dim, write qk_dim elements per row; slice copy of the output: read and write v_dim.
    passes = (v_dim + qk_dim + 2.0 * v_dim) / qk_dim
    return (builder.memory("mla_v_pad", rows * qk_dim, deps, passes=passes, host_ops=3.0),), qk_dim


def cp_merge(builder, elements: float, deps: tuple[int, ...]) -> tuple[int, ...]:
    """PyTorch's context_parallel (torch/distributed/tensor/experimental/_attention.py,
    _templated_ring_attention and its backward): each CP step's SDPA output and log-sum-exp are merged
    into fp32 accumulators by eager ops, and the backward accumulates dQ, dK, dV in fp32 on every step.
    ``elements``: this rank's attention-output elements; bytes per element per step from the stack
    (comm.cp_merge_bytes after the first forward step, comm.cp_merge_backward_bytes on every backward step)."""
    s = builder.s
    per_step, per_step_backward = s.cp_merge
    if s.cp <= 1 or per_step <= 0 and per_step_backward <= 0:
        return deps
    return (builder.memory("cp_merge", elements, deps, passes=per_step * (s.cp - 1) / ACT_BYTES,
                           backward_bytes=per_step_backward * s.cp * elements, flops_per_element=4.0 * (s.cp - 1),
                           host_ops=6.0 * (s.cp - 1), backward_host_ops=8.0 * s.cp),)


def cp_backward_bytes(s, forward_bytes: float) -> float | None:
    """Bytes of the backward's CP collective when they differ from its forward's: the key/value
    gradients travel in the stack's comm.cp_grad_bytes per element (fp32 in PyTorch's ring: the dK/dV
    accumulators rotate), and an implementation whose backward gathers the keys and values again
    (comm.cp_backward_regather) moves them once more."""
    if s.cp_grad_bytes == ACT_BYTES and not s.cp_regather:
        return None
    scale = s.cp_grad_bytes / ACT_BYTES
    return forward_bytes * (scale + (1.0 if s.cp_regather else 0.0))


def matmul_lookups(builder, model, shard) -> tuple[int, ...]:
    """The lookup as Praxis runs it with lookup_style 'matmul' (praxis layers/embedding_softmax.py: the
    ids' one-hot einsum'd with the table; PaxML's GPT configs set it for the token and the learned position
    tables): the 16-bit one-hot is written, then multiplied by the table (vocab-parallel under TP). The
    one-hot is saved for the table's weight gradient; the ids have no gradient, so the backward runs the
    weight-gradient GEMM only (no data gradient). These GEMMs are not model FLOPs, and
    they run in 16 bits whatever the plan's precision (FP8 covers the transformer layers' linears)."""
    tables = [("embedding", model.vocab // shard.tp)]
    if model.position_embedding == "learned":
        tables.append(("position_embedding", shard.seq_len))
    outputs = []
    for name, rows in tables:
        one_hot = builder.memory(name + ".one_hot", shard.tokens * rows, (), passes=1.0)
        outputs.append(builder.gemm(name, shard.tokens, model.hidden, rows, (one_hot,), model_flops=False,
                                    saved=ACT_BYTES * shard.tokens * rows, input_grad=False,
                                    precision="bf16" if shard.precision == "fp8" else None))
    return tuple(outputs)

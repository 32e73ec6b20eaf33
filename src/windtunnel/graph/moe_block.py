"""The MoE block of a transformer layer's forward graph: routing, token dispatch and combine by the plan's
dispatcher, the local experts, and the shared experts (split from :mod:`windtunnel.graph.transformer`, whose
graph builder calls it). Units: elements and bytes, as the builder's ops take them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from windtunnel.graph import stack_ops

if TYPE_CHECKING:
    from windtunnel.graph.transformer import _Builder

ACT_BYTES = 2  # bf16/fp16 activations, as the builder's


def moe_mlp(builder: _Builder, x: tuple[int, ...]) -> tuple[int, ...]:
    """The MoE block of a layer: router, dispatch, experts, combine, shared experts (``builder`` is the graph
    builder, :class:`windtunnel.graph.transformer._Builder`); returns the block output's op indices."""
    m, s = builder.model, builder.s
    moe = m.moe
    x = builder.norm("moe_norm", x)
    tokens = s.sp_tokens  # Megatron's all-to-all dispatcher routes the SP-sharded tokens
    # Host ops of the routing path in Megatron-Core 0.14/0.15 (dropless, all-to-all, fused router and
    # permutation, TP 1): router 4 (gating GEMM, forced balancing 2, fused top-k); preprocessing 11 (counts,
    # their all-gather, four copies to the host) + fused permutation 4; token and probability all-to-alls 2;
    # chunk sorts 2 + 3; combine 1; unpermute 1: 28 besides the experts (DeepEP's flex path ~25). Dropless
    # routing sizes the all-to-all and GEMMs with counts read back to the host: it waits for the router.
    router = builder.gemm("router", tokens, moe.experts, m.hidden, x, host_ops=4.0, backward_host_ops=3.0)
    # Where tokens are reordered (Megatron-Core token_dispatcher.py, core_r0.17/0.18): the all-to-all dispatcher
    # permutes the routed copies before sending (permute), regroups what arrives by local expert
    # (sort_chunks_by_idxs: sort_by_expert), and undoes both after the experts (unsort_by_expert, then unpermute,
    # which also sums a token's copies). A deduplicating dispatcher (the flex dispatcher: DeepEP's fused_dispatch
    # then permute, HybridEP's dispatch_with_permute) sends the tokens unpermuted and reorders them on arrival
    # only: one permute into expert order there (played as sort_by_expert) and its undoing before the combine
    # (unsort_by_expert), whose kernel sums the copies across ranks. HybridEP with the reordering fused into its
    # kernels (Sharding.permute_in_dispatch; Megatron's moe_permute_fusion_into_hybridep) has neither. The
    # preprocessing (routing map, token counts) stays either way.
    arrival_only = s.dedup_dispatch and s.ep > 1 and not s.gather_dispatch
    fused_permute = s.permute_in_dispatch and arrival_only
    permute = builder.memory("permute", tokens * moe.topk * m.hidden, (router,), passes=0.0 if arrival_only else 2.0,
                             saved=0.0, host_ops=15.0, backward_host_ops=1.0, host_sync=True)
    builder.graphed.append(("moe_router", range(router, router + 1)))
    builder.graphed.append(("moe_preprocess", range(permute, permute + 1)))
    routed_tokens = tokens * moe.topk
    # An all-to-all ends when the busiest rank has received (dispatch) or sent (combine) its imbalance x share.
    sent = s.dispatch_bytes * routed_tokens * m.hidden * s.moe_imbalance
    fanout = moe.topk if s.dedup_dispatch else 1
    if s.gather_dispatch and s.ep > 1:
        # Megatron's allgather dispatcher: every EP rank all-gathers the group's (unrouted) tokens and
        # their routing, keeps those for its own experts, and reduce-scatters the outputs back: the
        # volume does not grow with top-k (Megatron-Core token_dispatcher.MoEAllGatherTokenDispatcher).
        gathered = s.dispatch_bytes * tokens * m.hidden * s.ep
        dispatch = builder.comm("dispatch", "all_gather", "ep", gathered, (permute,), host_ops=2.0)
    else:
        dispatch = (builder.comm("dispatch", "all_to_all", "ep", sent, (permute,), fanout, host_ops=2.0)
                    if s.ep > 1 else permute)
    local_experts = moe.experts // s.ep
    # Balanced routing sends tokens*topk tokens to this rank's experts on average; the busiest rank sets the pace.
    per_expert = max(1, round(routed_tokens * s.moe_imbalance / local_experts))
    received = per_expert * local_experts
    expert_input = (dispatch,)
    if s.etp > 1:
        # Expert tensor parallelism (Megatron-Core expert_tensor_parallel_size, default tp): each expert's
        # FFN is split over the TP group, so the dispatched tokens (allgather dispatcher: all the TP x EP
        # group's tokens) are all-gathered over it, each rank computes 1/etp of every expert's width, and
        # the outputs are reduce-scattered back.
        gathered = ACT_BYTES * (tokens * s.ep if s.gather_dispatch else received) * m.hidden * s.etp
        expert_input = (builder.comm("expert_tp_gather", "all_gather", "tp", gathered, expert_input, tp_chunked=False),)
        per_expert, received = per_expert * s.etp, received * s.etp
    indexed = s.gather_dispatch and s.gather_index_passes is not None
    # Tokens arrive grouped by source rank (all-to-all: regrouped by local expert, sort_chunks_by_idxs) or
    # unpermuted (flex dispatcher: permuted into expert order); either is undone before the combine.
    regroup = s.ep > 1 and (local_experts > 1 or arrival_only) and not indexed and not fused_permute
    if regroup:
        expert_input = (builder.memory("sort_by_expert", received * m.hidden, expert_input, passes=2.0, host_ops=2.0),)
    down = builder.mlp_ops("experts", per_expert, moe.ffn_hidden // s.etp, expert_input, count=local_experts,
                        clamp=moe.activation_clamp is not None, bias=moe.expert_bias, fused=s.fused_expert_mlp)
    if s.sequential_costs is not None:
        down = stack_ops.sequential_experts(builder, received, local_experts, (down,))
    if indexed:
        down = stack_ops.allgather_index_ops(builder, received, tokens * s.ep * s.etp, (down,))
    elif regroup:
        down = builder.memory("unsort_by_expert", received * m.hidden, (down,), passes=2.0, host_ops=3.0)
    if s.etp > 1:
        scattered = tokens * s.ep * s.etp if s.gather_dispatch else received
        down = builder.comm("expert_tp_scatter", "reduce_scatter", "tp", ACT_BYTES * scattered * m.hidden, (down,), tp_chunked=False)
    if s.gather_dispatch and s.ep > 1:
        combine = builder.comm("combine", "reduce_scatter", "ep", ACT_BYTES * tokens * m.hidden * s.ep, (down,))
    else:
        combine = (builder.comm("combine", "all_to_all", "ep", sent / s.dispatch_bytes * ACT_BYTES, (down,), fanout)
                   if s.ep > 1 else down)
    # The routing probabilities are applied inside the expert activation (Megatron-Core's fused weighted
    # SwiGLU), whose saved input gives their gradient; the unpermutation only scatters and sums.
    unpermute = (combine if indexed or arrival_only else
                 builder.memory("unpermute", tokens * moe.topk * m.hidden, (combine,), passes=2.0))
    ends = [unpermute]
    if moe.shared_experts:
        width = moe.shared_ffn_hidden or moe.ffn_hidden
        # Shared experts do not wait for the dispatch, so they overlap with it (unless run after the combine).
        shared_in = builder.enter_tp("shared", x if s.shared_overlap else (unpermute,))
        shared = builder.mlp_ops("shared_experts", s.tokens, width * moe.shared_experts // s.tp, shared_in, sp_input=True)
        ends.extend(builder.exit_tp("shared", (shared,)))
    return (builder.memory("moe_residual", tokens * m.hidden, tuple(ends), passes=3.0),)

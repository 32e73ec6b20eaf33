"""Names of a transformer layer's modules that a plan can recompute or offload (plan fields
``recompute_modules`` and ``offload_modules``); data the plan validator and the memory model share."""

# Megatron-Core's selective recomputation modules (--recompute-modules): core attention, MLA's up
# projections, the norms, the MoE activation, the whole (dense) MLP and the whole MoE layer (router,
# dispatch, experts, combine; MindSpeed's --swap-attention with --recompute-num-layers recomputes it too).
# JAX remat policies that save named projections (MaxText decoders.py get_remat_policy at 6c01933; PaxML checkpoint
# policies) are two more: attn_output re-runs core attention and discards its output, so the output projection does
# not keep its input (saving the q/k/v and out projections, not the context: PaxML SAVE_QKV_OUT_PROJ, MaxText
# custom policies with out_proj); attn_proj is core attention together with its output projection and residual
# add, one checkpointed region whose saved input is Q, K and V: neither the attention output nor the residual
# stream after it is kept (MaxText save_qkv_proj: save_only_these_names('query_proj', 'value_proj', 'key_proj',
# 'qkv_proj')). elementwise re-runs every memory-bound operator (norms, activations, rotary embedding, residual
# and bias adds) and keeps none of their outputs: the policies that save only matmul outputs (MaxText minimal /
# minimal_flash: checkpoint_dots_with_no_batch_dims; PaxML SAVE_DOT_ONLY: checkpoint_dots), and the non-matmul
# remainder of the name-saving ones, whose layers re-run whatever the backward reads and was not saved.
RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp", "moe", "attn_proj", "attn_output",
                     "elementwise")

# Megatron-Core's fine-grained activation offloading (--fine-grained-activation-offloading
# --offload-modules; docs/source/api-guide/fine_grained_activation_offloading.md, PR #1913): each named
# module's saved-for-backward tensors go to host memory once its forward is done and come back before
# its backward, the copies overlapping compute. Module -> the graph operators whose saved bytes those are.
OFFLOAD_MODULES = {
    "attn_norm": ("attn_norm",),
    "qkv_linear": ("qkv_proj", "q_down_proj", "kv_down_proj"),
    "core_attn": ("core_attention", "core_attention_ring"),
    "attn_proj": ("out_proj",),
    "mlp_norm": ("mlp_norm", "moe_norm"),
    "expert_fc1": ("experts.up_proj",),
    "moe_act": ("experts.act", "experts.act_clamp"),
}

"""The assumptions a simulated training step states (TrainingResult.assumptions): what the model took
from the stack, the catalog and the plan where the user did not say."""

from __future__ import annotations

from typing import Any

_GRAPHS = {
    "none": "eagerly (no CUDA graphs)",
    "modules": "eagerly except CUDA-graphed attention, dense MLP and MoE router/preprocessing (one launch each)",
    "full": "as one CUDA graph per step (sync-free dispatch)",
}


def _graphs_text(mode: str) -> str:
    """How the plan's ``cuda_graphs`` issues kernels, in words (a '+'-joined scope list names its scopes)."""
    return _GRAPHS.get(mode) or f"eagerly except the CUDA-graphed scopes {mode.replace('+', ', ')} (one launch each)"


def _dualpipe_order(builder: Any) -> list[str]:
    """The line saying which DualPipe order the step plays (train/schedule.dualpipe), if it is DualPipe."""
    if builder.schedule != "dualpipe":
        return []
    count, pp = builder.micro_batches, builder.plan.pp
    if count % 2 == 0 and count >= 2 * pp:
        return [f"DualPipe order of deepseek-ai/DualPipe DualPipe.step() for {count} micro-batches ({count // 2} each "
                "way): forward and backward chunks overlapped in pairs, the warm-up and cool-down backwards split "
                "into input gradients and deferred weight gradients (zero bubble)"]
    return [f"DualPipe-shaped greedy order: DualPipe itself needs an even count of at least 2 pp = {2 * pp} "
            f"micro-batches, this step has {count}; no weight gradients are deferred"]


def step_assumptions(job: Any, builder: Any) -> list[str]:
    """The assumption lines of the step ``builder`` (train.step._StepBuilder) played for ``job``."""
    plan, model = builder.plan, job.model
    out = [
        f"precision {plan.precision}: GEMMs at the chip's dense {plan.precision} peak; attention and activations in 16-bit",
        f"stack {builder.stack.id}: {builder.stack.name}",
        "attention: " + (f"fused flash-style kernel ({builder.shard.attention_kernel})" if builder.flash_attention
                         else "unfused (scores materialised)"),
        "loss: " + ("fused cross-entropy kernel (bf16 logits, gradient written in the forward)" if builder.fused_loss
                    else "unfused fp32 cross-entropy (Megatron-LM default: ~52 bytes of HBM traffic per logit)"),
        f"pipeline schedule {builder.schedule}; "
        + (f"stages balanced by forward + backward time per micro-batch on the busiest rank: layout "
           f"{builder.chosen_layout} (pass it as layout=... to pin it)" if plan.layout == "balanced" else
           f"stages as the layout {plan.layout}" if plan.layout else
           (f"layers split as evenly as possible over {plan.pp} stages, rank r running stages r and pp-1-r "
            "(two copies of the model, DualPipe), embedding on the first, loss on the last"
            if builder.schedule == "dualpipe" else
            f"layers split as evenly as possible over {plan.pp * plan.vpp} chunks, embedding on the first, loss on "
            "the last")),
        *_dualpipe_order(builder),
        f"main gradients in {plan.grads} (also the DP reduction); ZeRO stage {plan.zero}"
        + (f", sharded over groups of {plan.dp_shard} dp ranks replicated {plan.dp // plan.dp_shard} times (HSDP: "
           "gradient shards all-reduced across the replicas after each reduce-scatter)" if plan.dp_shard else "")
        + f"; Adam with fp32 master weights and {plan.moments} moments",
        f"memory: 16-bit weights, {builder.states.grads:.0f}-byte main gradients, {builder.states.optimizer:.0f} "
        f"bytes/param optimizer state; {builder.stack.memory.reserve_bytes / 2**30:.3g} GiB framework reserve; "
        f"{builder.stack.memory.fragmentation:.0%} allocator fragmentation on activations (stack memory fields)",
        "efficiencies from catalog/efficiency.yaml merged with catalog/calibration.yaml",
        f"host issues kernels {_graphs_text(plan.cuda_graphs)}: {builder.eff.host_op_s * 1e6:.1f} us per framework op, "
        f"{builder.eff.host_library_call_s * 1e6:.0f} us per per-expert GEMM call"
        + ("; it waits for MoE token counts before the dispatch" if model.moe and plan.cuda_graphs != "full" else ""),
    ]
    if getattr(model, "attention_window", None) and getattr(model, "windowed_layer_fraction", 0.0):
        out.append(f"sliding-window attention (the model's sliding_window = {model.attention_window} tokens) on "
                   f"{model.windowed_layer_fraction:.0%} of the layers: each query attends to at most "
                   f"min(seq_len, {model.attention_window}) keys (attention FLOPs and time capped)")
    if builder.shard.rope_eager is not None:
        forward, backward = builder.shard.rope_eager[:2]
        why = ("the stack fuses plain RoPE only and the model scales its RoPE at run time (YaRN)"
               if builder.stack.kernels.rope == "fused_unscaled" else "the stack's rotary function is eager PyTorch")
        out.append(f"rotary embedding as eager ops on queries and keys ({why}): {forward:g} passes over them forward, "
                   f"{backward:g} backward (stack kernels.rope_eager_costs)")
    if plan.precision == "fp8":
        out.append("FP8 GEMM operands quantised inside the kernels that produce them (no cast kernels)"
                   if builder.shard.fp8_cast_fused else
                   "FP8 GEMMs quantise each 16-bit activation operand in a cast kernel of its own "
                   "(reads 2 bytes, writes 1 per element)")
        out[-1] += " (stack kernels.fp8_cast)"
        ratio = builder.stack.kernels.fp8_gemm_of_bf16
        if ratio is not None:
            out.append(f"FP8 GEMM level {builder.eff.gemm_max['fp8']:.3f} of peak before padding and short "
                       f"reductions: where the stack's calibration family fitted 16 bits only on this chip, that fit x "
                       f"{ratio:g} (the ratio measured on its own kernels, stack kernels.fp8_gemm_of_bf16), else the "
                       "default family's FP8 fit")
    if model.moe:
        out.append(f"MoE load imbalance factor {job.moe_imbalance:.2f} on the busiest expert rank (its expert GEMMs "
                   "and all-to-all)" if plan.ep > 1 else
                   "MoE with ep=1: every rank runs every expert on all its tokens, so no rank waits for a busier one "
                   "(the load-imbalance factor does not apply)")
        if plan.ep > 1:
            out.append(f"expert dispatch in {'fp8' if plan.fp8_dispatch else '16-bit'}, combine in 16-bit; "
                       + {"deepep": "deduplicating dispatcher (DeepEP-style: one copy per remote domain)",
                          "hybridep": "HybridEP dispatcher (one copy per remote domain), the permutation into expert "
                                      "order fused into its dispatch and combine kernels"}.get(
                              plan.dispatcher, "plain all-to-all (one copy per routed expert)"))
        if plan.expert_gemm == "fused_mlp":
            out.append("experts as the fused MXFP8 grouped MLP: activation and quantisation in the up projection's "
                       "epilogue (forward) and the down projection's data gradient (backward), one launch per "
                       "projection")
    if builder.mtp:
        out.append(f"{builder.mtp} multi-token-prediction module(s) after the last layer, where the layout places "
                   "them: a projection, one transformer layer and the shared output layer and loss each (a copy "
                   "of the embedding where the first stage's is elsewhere; its gradient sync is not costed)")
    if plan.ep_overlap:
        out.append("EP all-to-all overlap: each steady-state forward runs with an earlier micro-batch's backward, "
                   "sharing the device (Megatron --overlap-moe-expert-parallel-comm)"
                   + ("; one hardware queue (device_connections=1): the pair is issued in Megatron's combined-1F1B "
                      "order and each all-to-all starts after the kernels issued before it" if plan.device_connections == 1
                      else ""))
    if plan.offload_layers:
        chip = builder.chip
        out.append(f"activation offloading: the first {plan.offload_layers} layers' saved activations go to host "
                   f"memory at {chip.host_link_bandwidth * builder.eff.host_link / 1e9:.0f} GB/s each way "
                   f"({chip.host_memory_bytes / 1e9:.0f} GB of host memory per device), each copy beside the next "
                   "layer's forward or backward; one layer stays staged on the device")
    if plan.checkpoint_in_cpu:
        chip = builder.chip
        out.append(f"CPU checkpointing: every layer's checkpointed input waits in host memory between its forward and "
                   f"its recomputation, copied at {chip.host_link_bandwidth * builder.eff.host_link / 1e9:.0f} GB/s each "
                   f"way ({chip.host_memory_bytes / 1e9:.0f} GB of host memory per device); the copies are "
                   f"{builder.stack.memory.cpu_checkpointing} (on the compute stream, the host waiting for each)")
    sharding = builder.stack.sharding
    if plan.zero >= 3 and sharding.collective_stream == "shared":
        out.append("ZeRO-3 played per weight matrix on one collective stream in issue order (the stack's sharding "
                   "collective_stream 'shared'); the collectives run at "
                   + ("the compute's stream priority: one that becomes ready while a compute kernel runs starts "
                      "when that kernel ends" if sharding.collective_priority == "normal"
                      else "high priority: each starts as soon as it is ready")
                   + ("; each reduce bucket is first divided by the data-parallel size in a pass of its own on the "
                      "reduce stream (sharding grad_predivide), which holds the compute units"
                      if sharding.grad_predivide else ""))
    if plan.act_fp8_store:
        out.append("SwiGLU inputs kept in FP8 for the backward (1 byte per element; the casts run inside the fused "
                   "SwiGLU kernels, no time charged)")
    if plan.fp8_dispatch:
        out.append("MoE dispatch in FP8 (1 byte per element; the combine stays 16-bit)")
    if plan.tp_overlap and not plan.sequence_parallel:
        out.append("tp_overlap ignored: chunked TP overlap needs sequence parallelism")
    out.extend(f"group {k}: {v}" for k, v in builder.placement.describe(job.cluster).items())
    out.extend(job.extra_assumptions)
    return out

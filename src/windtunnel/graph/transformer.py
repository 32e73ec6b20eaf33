"""Transformer builders: the forward operator DAG of one layer (dense, MoE, MLA) on one rank.

The graphs are per rank and per micro-batch: tensor parallelism (TP) splits heads and FFN width,
sequence parallelism (SP) splits the norm/residual region, context parallelism (CP) splits the
sequence with ring attention, expert parallelism (EP) spreads experts with all-to-all dispatch and
combine. Activation bytes are 16-bit (2 bytes per element) as in mixed-precision training.
Units: FLOPs, bytes, tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from windtunnel.graph import context_parallel, moe_block, stack_ops
from windtunnel.graph.attention_work import attention_work
from windtunnel.graph.cuda_graphs import captured
from windtunnel.graph.ops import Op, OpGraph
from windtunnel.specs.model import ModelSpec

ACT_BYTES = 2  # bf16/fp16 activations
# Host work to issue an operator, in eager framework ops (Op.host_ops): a Transformer Engine module call costs
# ~2.7 plain PyTorch ops (Linear forward 99.7 vs 37.1 us CPU on GB200, 90.5 vs 33.2 on GH200; TE issue #2053).
TE_MODULE_HOST_OPS = 2.7


def _activation_passes(glu: bool, fused: bool) -> tuple[float, float, float]:
    """HBM passes over the up projection's output (forward, backward) and kernel launches of the MLP
    activation. Fused (one kernel each way): a GLU reads both halves and writes the half-width product
    (1.5), and its backward reads the product's gradient and both halves and writes both halves'
    gradients (0.5 + 1 + 1 = 2.5); a plain GeLU reads and writes the full width (2), and its backward
    reads the gradient and the input and writes the input's gradient (3). Eager PyTorch SwiGLU is two
    kernels, SiLU on the gate half then the product (0.5 + 0.5, then 0.5 + 0.5 + 0.5 = 2.5); its backward
    runs the product's (reads the gradient and both factors, writes two gradients: 2.5) and SiLU's
    (reads the gradient and the gate, writes the gate's gradient: 1.5), 4 in all. Eager GeLU is one kernel
    each way, as fused."""
    if glu:
        return (1.5, 2.5, 1.0) if fused else (2.5, 4.0, 2.0)
    return 2.0, 3.0, 1.0


@dataclass(frozen=True)
class Sharding:
    """How one layer is split on a rank, and the kernels it uses."""

    tp: int = 1
    sp: bool = False
    cp: int = 1
    ep: int = 1
    etp: int = 1  # expert tensor parallelism: each expert's FFN split over the TP group (1 or tp)
    micro_batch: int = 1
    seq_len: int = 2048
    flash_attention: bool = True
    fused_loss: bool = True
    moe_imbalance: float = 1.0
    dispatch_bytes: float = ACT_BYTES
    # HybridEP's dispatch writes the tokens it receives straight into expert order and its combine reads
    # them from there (the permutation fused into the communication kernels): no separate permute passes.
    permute_in_dispatch: bool = False
    # The experts run the fused MXFP8 grouped MLP (plan expert_gemm=fused_mlp): the activation and the
    # quantisation of its output ride in the up projection's epilogue, their backward in the down
    # projection's data gradient; one kernel launch per projection, no per-expert library calls.
    fused_expert_mlp: bool = False
    fp8_attention: bool = False  # plan fp8_attention: attention's matmuls in FP8
    precision: str = "bf16"
    dedup_dispatch: bool = True
    gather_dispatch: bool = False
    cuda_graphs: str = "none"
    # Stack kernels (specs.stack.Kernels): the attention kernel's efficiency profile, whether
    # elementwise work is fused, the host cost of a Linear call, and the context-parallel algorithm.
    attention_kernel: str = "flash"
    fused_elementwise: bool = True
    linear_host_ops: float = TE_MODULE_HOST_OPS
    context_parallel: str = "ring"
    cp_overlap: bool = True  # CP transfers beside the attention, or each waited where issued (plan cp_overlap)
    # The model copies each KV head to every query head it serves before calling attention (stack
    # kernels.repeat_kv): attention and context parallelism then handle full-head K and V.
    repeat_kv: bool = False
    # Framework ops around the kernels (graph.stack_ops): the sequential expert loop's costs (None: grouped
    # GEMM); CP merge bytes (forward, backward) per output element per step, gradient bytes, re-gather.
    sequential_costs: tuple[float, float, float] | None = None
    cp_merge: tuple[float, float] = (0.0, 0.0)
    cp_grad_bytes: float = ACT_BYTES
    cp_regather: bool = False
    gather_index_passes: tuple[float, float, float, float] | None = None  # stack comm.allgather_index_passes
    shared_overlap: bool = True  # stack comm.shared_expert_overlap: shared experts run beside the dispatch
    mla_pad_v: bool = False  # stack kernels.mla_pad_v: MLA's values padded to the query/key head dim
    embedding_matmul: bool = False  # stack kernels.embedding_lookup 'matmul': one-hot x table GEMMs
    # The rotary embedding runs as eager ops with these costs per tensor (stack kernels.rope_eager_costs:
    # forward and backward passes, forward and backward host ops); None: one fused kernel.
    rope_eager: tuple[float, float, float, float] | None = None
    fp8_cast_fused: bool = False  # stack kernels.fp8_cast 'fused': FP8 GEMM operands arrive quantised
    fp8_quant_launches: int = 0  # kernels one expert's FP8 quantisation launches in a per-expert grouped GEMM

    @property
    def tokens(self) -> int:
        """Tokens this rank's attention processes per micro-batch (sequence split by CP)."""
        return self.micro_batch * self.seq_len // self.cp

    @property
    def sp_tokens(self) -> int:
        """Tokens held by this rank in the SP region (norms, residuals, router)."""
        return self.tokens // self.tp if self.sp and self.tp > 1 else self.tokens


class _Builder:
    def __init__(self, model: ModelSpec, shard: Sharding) -> None:
        self.model = model
        self.s = shard
        self.g = OpGraph()
        # Index ranges of the operators each CUDA-graph scope covers (plan_checks.CUDA_GRAPH_SCOPES).
        self.graphed: list[tuple[str, range]] = []

    # -- helpers -------------------------------------------------------------------------------
    def gemm(self, name: str, m: int, n: int, k: int, deps: tuple[int, ...], *, saved: float | None = None,
             count: int = 1, model_flops: bool = True, sp_input: bool = False,
             host_ops: float | None = None, backward_host_ops: float | None = None,
             precision: str | None = "plan", input_grad: bool = True, grouped_launch: bool = False,
             quantized_in: tuple[str, ...] = ()) -> int:
        # precision: the GEMM's own ('plan': the plan's); input_grad False: its input has no gradient;
        # grouped_launch: the experts run as one kernel launch (no per-expert library calls); quantized_in:
        # the phases in which its activation operand arrives quantised (Op.quantized_in).
        # Traffic: read A (m x k) and B (k x n), write C (m x n), 16-bit operands.
        moved = ACT_BYTES * (m * k + k * n + m * n)
        saved_bytes = ACT_BYTES * m * k * count if saved is None else saved
        if saved is None and self.s.precision == "fp8":
            # FP8 GEMMs keep the already-quantised 1-byte copy of their input for the weight gradient.
            saved_bytes /= 2
        if sp_input and self.s.sp and self.s.tp > 1:
            saved_bytes /= self.s.tp
        # Linear layers are Transformer Engine modules; FP8 adds the op that quantises the input. A
        # grouped GEMM runs one library GEMM per expert (TE's GroupedLinear loops over cuBLASLt
        # calls on 4 streams), each a host-side library call.
        if host_ops is None:
            host_ops = self.s.linear_host_ops + (1.0 if self.s.precision == "fp8" else 0.0)
        if self.s.fp8_cast_fused:
            quantized_in = ("fwd", "bwd")
        precision = self.s.precision if precision == "plan" else precision
        per_expert = count > 1 and not grouped_launch
        # Transformer Engine's GroupedLinear quantises its FP8 operand expert by expert (split_quantize), each
        # expert's quantisation its own kernels (Sharding.fp8_quant_launches).
        quant_launches = count * self.s.fp8_quant_launches if per_expert and precision == "fp8" else 0
        return self.g.add(Op(name, "gemm", flops=2.0 * m * n * k, bytes_moved=moved, saved_bytes=saved_bytes,
                             shape=(m, n, k), deps=deps, count=count, model_flops=model_flops,
                             precision=precision, host_ops=host_ops, quant_launches=quant_launches,
                             library_calls=count if per_expert else 0,
                             backward_host_ops=backward_host_ops, backward_bytes=None if input_grad else 0.0,
                             quantized_in=quantized_in))

    def memory(self, name: str, elements: float, deps: tuple[int, ...], *, passes: float = 2.0,
               saved: float = 0.0, flops_per_element: float = 1.0, host_ops: float = 1.0,
               backward_host_ops: float | None = None, host_sync: bool = False,
               backward_bytes: float | None = None, unvectorized: float = 0.0) -> int:
        return self.g.add(Op(name, "memory", flops=flops_per_element * elements,
                             bytes_moved=passes * ACT_BYTES * elements, saved_bytes=saved, deps=deps,
                             model_flops=False, host_ops=host_ops, backward_host_ops=backward_host_ops,
                             host_sync=host_sync, backward_bytes=backward_bytes, unvectorized=unvectorized))

    def comm(self, name: str, kind: str, group: str, message_bytes: float, deps: tuple[int, ...], fanout: int = 1,
             host_ops: float = 1.0, backward_bytes: float | None = None, tp_chunked: bool = True) -> int:
        return self.g.add(Op(name, kind, stream=group, bytes_moved=message_bytes, group=group, deps=deps, fanout=fanout,
                             host_ops=host_ops, backward_bytes=backward_bytes, tp_chunked=tp_chunked))

    # -- TP boundaries -------------------------------------------------------------------------
    def enter_tp(self, name: str, deps: tuple[int, ...]) -> tuple[int, ...]:
        """Entering a column-parallel region: SP all-gathers the sequence; plain TP needs nothing forward."""
        s = self.s
        if s.tp > 1 and s.sp:
            return (self.comm(name + ".ag", "all_gather", "tp", ACT_BYTES * s.tokens * self.model.hidden, deps),)
        return deps

    def exit_tp(self, name: str, deps: tuple[int, ...]) -> tuple[int, ...]:
        """Leaving a row-parallel region: SP reduce-scatters, plain TP all-reduces the output."""
        s = self.s
        if s.tp == 1:
            return deps
        kind = "reduce_scatter" if s.sp else "all_reduce"
        return (self.comm(name + (".rs" if s.sp else ".ar"), kind, "tp", ACT_BYTES * s.tokens * self.model.hidden, deps),)

    def norm(self, name: str, deps: tuple[int, ...]) -> tuple[int, ...]:
        elements = self.s.sp_tokens * self.model.hidden
        if not self.s.fused_elementwise and self.model.norm == "rmsnorm":
            # Eager RMSNorm is a composite (square, mean, add eps and rsqrt, scale, weight): the input is
            # read twice and an fp32 square and the normalised tensor are written and read again, ~5 passes
            # over 16-bit elements and 4 launches where a fused kernel makes one read and one write.
            # (F.layer_norm is one kernel even in eager mode.)
            return (self.memory(name, elements, deps, passes=5.0, saved=ACT_BYTES * elements, flops_per_element=5.0,
                                host_ops=4.0),)
        return (self.memory(name, elements, deps, saved=ACT_BYTES * elements, flops_per_element=5.0),)

    # -- attention -----------------------------------------------------------------------------
    def attention(self, x: tuple[int, ...]) -> tuple[int, ...]:
        m, s = self.model, self.s
        t = s.tp
        h = m.hidden
        x = self.norm("attn_norm", x)
        x = self.enter_tp("attn", x)
        tokens = s.tokens
        heads = m.heads // t
        if m.mla is not None:
            a = m.mla
            qk_dim = a.qk_nope_head_dim + a.qk_rope_head_dim
            v_dim = a.v_head_dim
            if a.q_lora_rank:
                q_down = self.gemm("q_down_proj", tokens, a.q_lora_rank, h, x, sp_input=True)
                q_norm = self.memory("q_norm", tokens * a.q_lora_rank, (q_down,), saved=ACT_BYTES * tokens * a.q_lora_rank)
                q = self.gemm("q_up_proj", tokens, heads * qk_dim, a.q_lora_rank, (q_norm,))
            else:
                q = self.gemm("q_proj", tokens, heads * qk_dim, h, x, sp_input=True)
            kv_down = self.gemm("kv_down_proj", tokens, a.kv_lora_rank + a.qk_rope_head_dim, h, x, sp_input=True)
            kv_norm = self.memory("kv_norm", tokens * a.kv_lora_rank, (kv_down,), saved=ACT_BYTES * tokens * a.kv_lora_rank)
            kv = self.gemm("kv_up_proj", tokens, heads * (a.qk_nope_head_dim + v_dim), a.kv_lora_rank, (kv_norm,))
            qkv = (q, kv)
            kv_heads = heads
        else:
            qk_dim = v_dim = m.head_dim
            kv_heads = max(1, m.kv_heads // t)
            qkv = (self.gemm("qkv_proj", tokens, (heads + 2 * kv_heads) * m.head_dim, h, x, sp_input=True),)
            if m.qk_norm:
                # Per-head RMSNorm of queries and keys (two norm modules); each keeps its input.
                elements = tokens * (heads + kv_heads) * m.head_dim
                qkv = (self.memory("qk_norms", elements, qkv, saved=ACT_BYTES * elements, flops_per_element=5.0,
                                   host_ops=2.0),)
        if m.position_embedding == "rope" or m.mla is not None:
            elements = tokens * (heads + kv_heads) * qk_dim
            if s.rope_eager is None:
                # Fused rotary embedding, applied to queries and keys: two calls.
                qkv = (self.memory("rope", elements, qkv, passes=2.0, host_ops=2.0),)
            else:
                # The framework's eager rotary function on queries and keys (stack kernels.rope_eager_costs, per
                # tensor): its passes over them each way and its ops, twice.
                forward, backward, forward_ops, backward_ops = s.rope_eager
                qkv = (self.memory("rope", elements, qkv, passes=forward, host_ops=2.0 * forward_ops,
                                   backward_bytes=backward * ACT_BYTES * elements, backward_host_ops=2.0 * backward_ops),)
        if s.repeat_kv and kv_heads < heads:
            # repeat_kv materialises K and V at the query heads' count (expand + reshape is a copy):
            # read the kv_heads tensors, write heads; its backward sums the copies' gradients back.
            elements = tokens * heads * (qk_dim + v_dim)
            qkv = (self.memory("repeat_kv", elements, qkv, passes=1.0 + kv_heads / heads, host_ops=2.0),)
            kv_heads = heads
        qkv, attention_v = stack_ops.padded_values(self, tokens * heads, qk_dim, v_dim, qkv)
        core = self.core_attention(qkv, heads, kv_heads, qk_dim, attention_v)
        out = self.gemm("out_proj", tokens, h, heads * v_dim, core)
        out = self.exit_tp("attn", (out,))
        residual_saved = ACT_BYTES / 2 * s.sp_tokens * h if m.dropout else 0.0
        return (self.memory("attn_residual", s.sp_tokens * h, out, passes=3.0, saved=residual_saved),)

    def core_attention(self, deps: tuple[int, ...], heads: int, kv_heads: int, qk_dim: int, v_dim: int) -> tuple[int, ...]:
        """Causal self-attention on this rank's queries against the full (ring-gathered) keys."""
        m, s = self.model, self.s
        b = s.micro_batch
        q_len = s.seq_len // s.cp
        kv_len = s.seq_len
        # Causal masking halves the score matrix; a sliding window caps each query's keys (graph/attention_work).
        call = attention_work(b, heads, kv_heads, q_len, kv_len, qk_dim, v_dim, window=m.attention_window,
                              windowed_fraction=m.windowed_layer_fraction)
        scores, qkv_bytes, out_bytes, shape = call.scores, call.qkv_bytes, call.out_bytes, call.shape
        window_keys, window_share = shape[4], shape[5]
        ring = deps
        kv_block = ACT_BYTES * b * q_len * kv_heads * (qk_dim + v_dim)  # bytes of this rank's K and V
        # Flash: Q, K, V and the fp32 log-sum-exp are saved; the output O once, as the out projection's input.
        saved = qkv_bytes + 4.0 * b * heads * q_len
        if s.cp > 1 and s.context_parallel == "ulysses" and s.flash_attention:
            return context_parallel.ulysses_attention(self, deps, heads, kv_heads, qk_dim, v_dim, scores,
                                                      call.flops, (window_keys, window_share))
        if s.cp > 1 and s.context_parallel == "allgather" and s.cp_regather and s.flash_attention:
            # PyTorch's context_parallel: its own forward, backward and gradient rotation.
            work = (call.flops, scores, qkv_bytes + out_bytes, saved)
            out = context_parallel.pytorch_allgather(self, deps, kv_block, work, shape)
            return stack_ops.cp_merge(self, b * q_len * heads * v_dim, out)
        if s.cp > 1:
            if s.context_parallel == "allgather":
                # All-gather CP (Llama 3 report Sec. 3.3.2): the whole sequence's keys and values are
                # all-gathered while the local block's attention runs; the backward reduce-scatters their
                # gradients. (PyTorch's context_parallel, which gathers them again: above.)
                ring = (self.comm("cp_kv_allgather", "all_gather", "cp", kv_block * s.cp, deps,
                                  backward_bytes=stack_ops.cp_backward_bytes(s, kv_block * s.cp)),)
            else:
                # Ring attention: keys/values of every other CP rank pass by in cp-1 steps; the engine
                # overlaps each step's transfer with the attention on the previous block.
                ring = (self.comm("cp_kv_ring", "send_recv", "cp", kv_block * (s.cp - 1), deps,
                                  backward_bytes=stack_ops.cp_backward_bytes(s, kv_block * (s.cp - 1))),)
        if s.flash_attention:
            first_shape = ring_shape = shape
            if s.cp > 1 and s.context_parallel != "allgather":
                # Ring attention runs one kernel per step on this rank's block of keys, so its efficiency follows
                # one call's key length, not the whole sequence's: Transformer Engine's AttnFuncWithCPAndKVP2P
                # (transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py, the ring
                # Megatron-Core and MindSpeed's megatron_cp_algo use) splits the sequence into 2 x cp chunks as
                # torch's load balancing does: a causal local step, then half-block or half-query steps.
                local_keys, step_keys = context_parallel.call_key_lengths(q_len)
                first_shape = context_parallel.call_shape(shape, local_keys)
                ring_shape = context_parallel.call_shape(shape, step_keys)
            # Without overlap (plan cp_overlap false) the local block waits for the transfer too.
            first = self.g.add(Op("core_attention", "attention", flops=call.flops / max(1, s.cp),
                                  exponentials=scores / max(1, s.cp),
                                  bytes_moved=qkv_bytes + out_bytes, saved_bytes=saved / max(1, s.cp),
                                  shape=first_shape, deps=deps if s.cp_overlap else ring,
                                  precision="bf16", host_ops=s.linear_host_ops, kernel=s.attention_kernel))
            if s.cp == 1:
                return (first,)
            rest = self.g.add(Op("core_attention_ring", "attention",
                                 flops=call.flops * (s.cp - 1) / s.cp,
                                 exponentials=scores * (s.cp - 1) / s.cp,
                                 bytes_moved=(qkv_bytes + out_bytes) * (s.cp - 1), saved_bytes=saved * (s.cp - 1) / s.cp,
                                 shape=ring_shape, deps=(first, *ring),
                                 precision="bf16", kernel=s.attention_kernel))
            return stack_ops.cp_merge(self, b * q_len * heads * v_dim, (rest,))
        # Unfused attention (pre-FlashAttention Megatron): batched GEMMs plus softmax and dropout on the
        # full score matrix, whose activations are what selective recomputation avoids storing.
        matrix = b * heads * q_len * kv_len  # the unfused kernels materialise the whole (masked) matrix
        qk = self.g.add(Op("attn_scores", "gemm", flops=2.0 * q_len * kv_len * qk_dim,
                           bytes_moved=qkv_bytes + ACT_BYTES * matrix, saved_bytes=ACT_BYTES * b * q_len * heads * qk_dim * 2,
                           shape=(q_len, kv_len, qk_dim), count=b * heads, deps=ring, precision="bf16"))
        softmax = self.memory("attn_softmax", matrix, (qk,), passes=2.0, saved=ACT_BYTES * matrix)
        dropout = self.memory("attn_dropout", matrix, (softmax,), passes=2.5, saved=1.5 * ACT_BYTES * matrix)
        pv = self.g.add(Op("attn_values", "gemm", flops=2.0 * q_len * kv_len * v_dim, bytes_moved=ACT_BYTES * matrix + out_bytes,
                           saved_bytes=ACT_BYTES * b * q_len * heads * v_dim, shape=(q_len, v_dim, kv_len),
                           count=b * heads, deps=(dropout,), precision="bf16"))
        return (pv,)

    # -- feed-forward --------------------------------------------------------------------------
    def mlp_ops(self, prefix: str, tokens: int, width: int, deps: tuple[int, ...], count: int = 1,
                sp_input: bool = False, clamp: bool = False, bias: bool = False, fused: bool = False) -> int:
        """Up (and gate) projection, activation, down projection: returns the index of the op whose
        output is the MLP's. ``clamp``: the GLU input is clipped first (GPT-OSS); ``bias``: the
        projections carry per-expert biases (GPT-OSS), ``count`` being the local experts; ``fused``: the
        fused MXFP8 grouped MLP (Sharding.fused_expert_mlp)."""
        m = self.model
        up_width = 2 * width if m.activation == "swiglu" else width
        # Fused, the down projection's data gradient applies the activation's derivative and quantises the
        # result in its epilogue, so the up projection's backward GEMMs read an operand already quantised.
        up = self.gemm(prefix + ".up_proj", tokens, up_width, m.hidden, deps, count=count, sp_input=sp_input,
                       grouped_launch=fused, host_ops=1.0 if fused else None, quantized_in=("bwd",) if fused else ())
        up_elements = tokens * up_width * count
        act_input = up
        # The fused kernels clamp the GLU input, scale by the routing probability and add the biases in their
        # epilogues (NVIDIA technical blog, 2026-06-15, "Boosting MoE Training Throughput with Advanced Fusion
        # Kernels"; TransformerEngine 4220403e, the 26.06 container's pin, ops/fused/forward_grouped_mlp.py:
        # ScaledClampedQGeGLU runs as cuDNN's geglu, fc1 and fc2 biases packed into the grouped GEMMs), so none
        # of those runs on its own.
        clamp, bias = (False, False) if fused else (clamp, bias)
        if clamp:
            # Megatron-Core 0.14/0.15 (fused_bias_geglu.weighted_bias_quick_geglu_impl) clips the two
            # GLU halves with two clamps and concatenates them before its fused kernel: each half read
            # and written, then the whole (4 passes). The backward masks each half's gradient (read
            # gradient and input, write) and concatenates them again (5 passes). The clamps keep the
            # unclipped projection output for their backward, beside the fused kernel's saved input.
            # The clamps read strided halves (chunk views) and their backward masks through them:
            # about half the traffic runs in unvectorized eager kernels (the concatenations do not).
            act_input = self.memory(prefix + ".act_clamp", up_elements, (up,), passes=4.0,
                                    saved=ACT_BYTES * up_elements, host_ops=4.0,
                                    backward_bytes=5.0 * ACT_BYTES * up_elements, backward_host_ops=3.0,
                                    unvectorized=0.5)
        act_saved = ACT_BYTES * up_elements
        # With the clamp, the same function builds its linear-offset constant with torch.tensor(..., device=cuda)
        # on every call: a blocking host-to-device copy, so the host waits there.
        passes, backward_passes, launches = _activation_passes(m.activation == "swiglu", self.s.fused_elementwise)
        if fused:
            # In the up projection's epilogue (forward) and the down projection's data gradient (backward):
            # no HBM pass and no launch of its own; its input is still saved for the backward.
            passes = backward_passes = launches = 0.0
        act = self.memory(prefix + ".act", up_elements, (act_input,), passes=passes, saved=act_saved,
                          host_ops=(2.0 if clamp else launches), host_sync=clamp, backward_host_ops=launches,
                          backward_bytes=backward_passes * ACT_BYTES * up_elements)
        down = self.gemm(prefix + ".down_proj", tokens, m.hidden, width, (act,), count=count, grouped_launch=fused,
                         host_ops=1.0 if fused else None, quantized_in=("fwd",) if fused else ())
        if not bias:
            return down
        # The up projection's bias rides in the grouped GEMM's epilogue, but Megatron-Core's
        # TEGroupedMLP adds the down projection's (skip_bias_add) in a Python loop over the local
        # experts, weighted by the routing probability: per expert t + b * p in fp32, then a
        # concatenation and a cast back to 16 bits. Forward bytes per output element: 4 (b * p)
        # + 10 (the add) + 8 (concatenate) + 6 (cast) = 28. Backward: 6 (cast) + 6 (cast of t's
        # gradient) + 12 + 12 (the two products and reductions for the bias and probability
        # gradients) + 4 (re-concatenating t's gradient) = 40. (TE folds the up projection's bias
        # gradient into its weight-gradient GEMM.) The product b * p broadcasts both operands and the
        # add mixes bf16 and fp32, so those (14 of the 28 bytes forward, and the broadcast products
        # of the backward, about half of its 40) run in unvectorized eager kernels.
        elements = tokens * m.hidden * count
        return self.memory(prefix + ".bias", elements, (down,), passes=14.0, backward_bytes=40.0 * elements,
                           host_ops=2.0 * count + 5.0, backward_host_ops=5.0 * count + 3.0, unvectorized=0.5)

    def dense_mlp(self, x: tuple[int, ...]) -> tuple[int, ...]:
        m, s = self.model, self.s
        x = self.norm("mlp_norm", x)
        x = self.enter_tp("mlp", x)
        down = self.mlp_ops("mlp", s.tokens, m.ffn_hidden // s.tp, x, sp_input=True)
        out = self.exit_tp("mlp", (down,))
        residual_saved = ACT_BYTES / 2 * s.sp_tokens * m.hidden if m.dropout else 0.0
        return (self.memory("mlp_residual", s.sp_tokens * m.hidden, out, passes=3.0, saved=residual_saved),)

    def moe_mlp(self, x: tuple[int, ...]) -> tuple[int, ...]:
        return moe_block.moe_mlp(self, x)  # graph/moe_block.py


def layer_forward(model: ModelSpec, shard: Sharding, *, moe: bool) -> OpGraph:
    """Forward DAG of one transformer layer on one rank for one micro-batch."""
    builder = _Builder(model, shard)
    x = builder.attention(())
    builder.graphed.append(("attn", range(0, len(builder.g))))
    if moe:
        builder.moe_mlp(x)
    else:
        start = len(builder.g)
        builder.dense_mlp(x)
        builder.graphed.append(("mlp", range(start, len(builder.g))))
    graph = builder.g
    if shard.fp8_attention:  # the attention kernels' matmuls run in FP8 (cost.compute.attention_time)
        graph = OpGraph([replace(op, precision="fp8") if op.kind == "attention" else op for op in graph.ops])
    return captured(graph, builder.graphed, shard.cuda_graphs)


def embedding_forward(model: ModelSpec, shard: Sharding) -> OpGraph:
    """Input embedding lookup (vocab-parallel under TP) on the first pipeline stage."""
    builder = _Builder(model, shard)
    if shard.embedding_matmul:
        lookups = stack_ops.matmul_lookups(builder, model, shard)
        builder.exit_tp("embedding", lookups)
        return captured(builder.g, [], shard.cuda_graphs)
    # A gather of the token rows (read and write); learned absolute positions add their table's rows.
    passes = 3.0 if model.position_embedding == "learned" else 2.0
    lookup = builder.memory("embedding", shard.tokens * model.hidden, (), passes=passes)
    builder.exit_tp("embedding", (lookup,))
    return captured(builder.g, [], shard.cuda_graphs)


def mtp_projection_forward(model: ModelSpec, shard: Sharding) -> OpGraph:
    """The entry of a multi-token-prediction module (DeepSeek-V3 Sec. 2.2, Megatron's
    MultiTokenPredictionLayer): RMSNorm of the last hidden state and of the next token's embedding,
    their concatenation and its projection from 2*hidden back to hidden; the module's transformer
    layer, output layer and loss follow as their own modules."""
    builder = _Builder(model, shard)
    hidden_norm = builder.norm("mtp_hidden_norm", ())
    embed_norm = builder.norm("mtp_embed_norm", ())
    joined = builder.memory("mtp_concat", 2 * shard.sp_tokens * model.hidden, hidden_norm + embed_norm, passes=2.0)
    x = builder.enter_tp("mtp_proj", (joined,))
    projected = builder.gemm("mtp_eh_proj", shard.tokens, model.hidden // shard.tp, 2 * model.hidden, x, sp_input=True)
    builder.exit_tp("mtp_proj", (projected,))
    return captured(builder.g, [], shard.cuda_graphs)


def head_forward(model: ModelSpec, shard: Sharding) -> OpGraph:
    """Final norm, vocab-parallel LM head and cross-entropy loss on the last pipeline stage."""
    builder = _Builder(model, shard)
    x = builder.norm("final_norm", ())
    x = builder.enter_tp("head", x)
    logits = builder.gemm("lm_head", shard.tokens, model.vocab // shard.tp, model.hidden, x, sp_input=True,
                          host_ops=1.0)
    # Softmax cross-entropy over the vocabulary shard is memory-bound; its traffic per logit depends
    # on the implementation (bytes per logit, forward / backward):
    # - fused (one kernel: online max and sum of exponentials, then the loss and the bf16 gradient,
    #   written in the forward; TE / Megatron-Bridge default): two bf16 reads and a bf16 write
    #   forward (6), a read and write to scale the gradient backward (4); keeps the bf16 gradient.
    # - unfused (Megatron-LM's default: PyTorch ops on an fp32 copy): cast 6, max 4, subtract 8,
    #   exp 8, sum 4, divide 8 forward (38); scale 8 and the cast back to bf16 6 backward (14);
    #   keeps the fp32 probabilities.
    logits_count = shard.tokens * model.vocab / shard.tp
    forward, backward, kept = (6.0, 4.0, 2.0) if shard.fused_loss else (38.0, 14.0, 4.0)
    builder.g.add(Op("cross_entropy", "memory", flops=5.0 * logits_count, bytes_moved=forward * logits_count,
                     backward_bytes=backward * logits_count, saved_bytes=kept * logits_count, deps=(logits,),
                     model_flops=False, host_ops=1.0 if shard.fused_loss else 6.0))
    return captured(builder.g, [], shard.cuda_graphs)

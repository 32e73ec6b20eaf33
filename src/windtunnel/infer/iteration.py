"""Iteration time of one serving instance from the shared cost core.

One batch iteration runs every layer once over the iteration's new tokens: the prefill chunks'
tokens plus one token per decoding sequence. Its time is the sum of

* the token-proportional part (memoised per token count): every weight GEMM of every layer
  (``windtunnel.cost.compute.gemm_time``: weights are read once per iteration, so a small batch is
  memory-bound and a large one compute-bound), memory-bound kernels (norms, residuals, activation,
  MoE permutation), the MoE experts the batch's tokens activate (expected number of distinct experts
  hit by the tokens' top-k choices, each reading its weights once), TP all-reduces and EP
  all-to-alls (``windtunnel.cost.collectives.collective_time`` on the instance's topology tiers),
  pipeline hand-offs, and the embedding;
* the LM head for the sequences that produce a token (memoised per count);
* decode attention, linear in the decoding sequences' summed context: each context token's KV is
  read once per layer (MLA: the compressed latent; GQA: keys and values of the local KV heads) and
  its score/value FLOPs run at the fused-attention rate; the slower of the two bounds it;
* prefill attention per chunk: causal score/value FLOPs of the chunk against its prefix and itself,
  at the fused-attention efficiency for that key length;
* a host overhead per iteration (scheduling, sampling), from the catalog or fitted.

Data-parallel attention groups share decode sequences and context evenly; a prefill chunk runs on one
group, so the busiest group holds at least the largest chunk (and at least 1/dp of the tokens). With
two-batch overlap (``tbo``) a layer's communication hides behind its compute, as in DeepSeek's and SGLang's
deployments: time = max(comm, compute + (1 - r) comm), where r is the share of compute units the dispatch
kernels leave free (DeepEP normal kernels in prefill hold some; its low-latency decode kernels none, but they
send every top-k copy over RDMA). Times in seconds.
"""

from __future__ import annotations

import math
from dataclasses import replace

from windtunnel.cost.collectives import collective_time, p2p_time, place_group
from windtunnel.cost.efficiency import Efficiency, efficiency_for
from windtunnel.infer.deployment import InstancePlan, fitted_value, serving_defaults, system_value
from windtunnel.infer.kernels import (
    autotuned_gemm,
    decode_attention_kernel,
    expert_kernel,
    mmha_pair_rate,
    tile_variants,
    weight_only_gemm,
)
from windtunnel.infer.memory import WEIGHT_ONLY, bytes_of
from windtunnel.specs.model import ModelSpec

ACT = 2.0  # bytes per activation element (bf16)
EXACT_TOKENS = 1024  # token counts up to this are memoised exactly; above, on a 64-per-octave grid


class IterationModel:
    """Iteration-time function of one instance: ``time(tokens, n_out, ctx_sum, prefill_attention_s)``."""

    def __init__(self, model: ModelSpec, plan: InstancePlan, *, efficiency: Efficiency | None = None,
                 fitted: dict | None = None, system: str | None = None) -> None:
        self.model = model
        self.plan = plan
        self.chip = plan.cluster.chip
        eff = efficiency or efficiency_for(self.chip)
        # Serving parameters fitted on the inference calibration rows (catalog/deployments/calibration.yaml,
        # or ``fitted`` during calibration), per hardware generation: the HBM bandwidth share of serving
        # iterations, the fp8 GEMM efficiency, the host time per iteration; per serving system (when named):
        # the bandwidth share its decode-attention kernel reaches on KV reads.
        chip_id, generation = self.chip.id, self.chip.generation
        bandwidth = fitted_value(chip_id, generation, "memory_bandwidth", eff.memory_bandwidth, fitted)
        gemm = dict(eff.gemm_max)
        if "fp8" in gemm:
            gemm["fp8"] = fitted_value(chip_id, generation, "gemm_fp8", gemm["fp8"], fitted)
        self.eff = replace(eff, memory_bandwidth=bandwidth, gemm_max=gemm)
        prior = float(serving_defaults().get("step_overhead_s", 0.0))
        self.overhead = (plan.step_overhead_s if plan.step_overhead_s is not None
                         else fitted_value(chip_id, generation, "step_overhead_s", prior, fitted))
        self.attention_bandwidth = bandwidth
        self.system = system
        self.fitted = fitted
        if system:
            self.attention_bandwidth = system_value(system, "attention_bandwidth", bandwidth, fitted)
        self.precision = plan.precision
        self.gemm_precision = plan.precision if plan.precision in self.chip.peak_flops else "bf16"
        # W8A8 int8 and weight-only int4/int8 (w4a16/w8a16): the weights' stored bytes differ from the compute
        # precision's, so their GEMMs use the weight-size-aware path (infer/kernels.py).
        self.weight_bytes = bytes_of(plan.precision) if plan.precision == "int8" or plan.precision in WEIGHT_ONLY else None
        if plan.precision in WEIGHT_ONLY:
            self.gemm_precision = WEIGHT_ONLY[plan.precision][0]
        self._tiles = tile_variants(self.eff)
        self.expert_kernel = expert_kernel(system, generation, plan.precision)
        self.attn_peak = self.chip.peak("bf16") if "bf16" in self.chip.peak_flops else self.chip.peak("fp16")
        self.bandwidth = self.chip.hbm_bandwidth * self.eff.memory_bandwidth
        cluster = plan.cluster
        self.tp_group = place_group("tp", plan.tp, 1, cluster)
        stage = plan.tp * plan.dp
        self.stage_group = place_group("stage", stage, 1, cluster)
        etp = stage // plan.ep
        self.ep_group = place_group("ep", plan.ep, etp, cluster)
        self.etp = etp
        # DeepEP-style expert dispatch keeps many token-sized RDMA writes in flight, so the link saturates
        # with the rank's whole message rather than the per-peer share: the saturation curve's half-point
        # is scaled by the group size (DeepEP README: 40-58 GB/s RDMA per H800 at EP 8 to 256).
        self.a2a_eff = replace(self.eff, half_message_bytes=self.eff.half_message_bytes / max(1, plan.ep))
        self.dispatch_rate = self._dispatch_compute_rate()
        # DeepEP's low-latency kernels (decode instances with two-batch overlap, see _dispatch_compute_rate) send
        # every top-k copy of a token straight to its expert's rank over RDMA ("low-latency kernels with pure
        # RDMA"; their benchmark: 128 tokens x top-8 x 7168 at 39-46 GB/s per H800 NIC for EP 64-256), where the
        # normal kernels send a token once per remote node and forward it over NVLink.
        self.dispatch_dedup = not (plan.tbo and plan.role == "decode")
        self.layers = model.layers
        self.dense_layers = model.dense_layers
        self.moe_layers = model.moe_layers
        self._base: dict[int, float] = {}
        self._head: dict[int, float] = {}
        self._group: dict[int, tuple] = {}
        self._experts: dict[int, float] = {}
        self._other: dict[int, float] = {}
        self._setup_attention()
        self._setup_speculation()

    def _dispatch_compute_rate(self) -> float:
        """Share of the compute units left to a MoE layer's compute while its overlapped expert dispatch runs.

        Deployments with two-batch overlap and expert parallelism run DeepEP-style dispatch (DeepSeek, SGLang):
        normal (throughput) kernels for prefill, low-latency kernels for decode (DeepEP README, V1 docs/legacy.md:
        normal kernels "suitable for both training and inference prefilling", low-latency kernels "for
        latency-sensitive inference decoding"). Normal kernels are SM kernels: they hold ``overlap_comm_units``
        of the chip's units while they run (the cost core's figure, efficiency.yaml: 20 of the H800's 132 SMs,
        DeepSeek-V3 report Sec. 3.2.2), as in training's overlapped chunks. Low-latency kernels overlap through
        a receive hook "without costing any GPU SMs from the computation part" (same docs), so decode instances
        keep every unit. 1.0 without EP or overlap."""
        p, e = self.plan, self.eff
        if not (p.tbo and p.ep > 1 and self.model.moe is not None) or p.role == "decode" or not e.overlap_comm_units:
            return 1.0
        return max(1, e.compute_units - e.overlap_comm_units) / e.compute_units

    def _overlapped(self, compute: float, comm: float) -> float:
        """Seconds of a MoE layer whose compute runs beside its communication (two-batch overlap): while the
        communication runs, compute proceeds at ``dispatch_rate`` of its speed, then at full speed."""
        return max(comm, compute + (1.0 - self.dispatch_rate) * comm)

    # ---- attention coefficients ------------------------------------------------------------------
    def _setup_attention(self) -> None:
        m, p = self.model, self.plan
        heads = m.heads // p.tp
        kv_b = 1.0 if p.kv_precision == "fp8" else 2.0
        if m.mla is not None:
            a = m.mla
            latent = a.kv_lora_rank + a.qk_rope_head_dim
            # Absorbed MLA decode: scores against the latent+rope key, values from the latent.
            decode_flops = 2.0 * heads * (latent + a.kv_lora_rank)
            decode_bytes = latent * kv_b
            self.prefill_pair_flops = 2.0 * heads * (a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim)
        else:
            local_kv = max(1, m.kv_heads // p.tp)
            decode_flops = 4.0 * heads * m.head_dim
            decode_bytes = 2.0 * local_kv * m.head_dim * kv_b
            self.prefill_pair_flops = 4.0 * heads * m.head_dim
        rate = self.attn_peak * self.eff.attention_fwd
        self._decode_flops_per_ctx = decode_flops / rate
        self._decode_bytes_per_ctx = decode_bytes / (self.chip.hbm_bandwidth * self.attention_bandwidth)
        self.decode_kernel = decode_attention_kernel(self.system, m.head_dim, heads // max(1, m.kv_heads // p.tp)) \
            if m.mla is None else decode_attention_kernel(None, 0, 0)
        pair_rate = mmha_pair_rate(self.chip, self.fitted) if self.decode_kernel.kind == "mmha" else None
        if pair_rate:
            # Masked MHA (TensorRT-LLM decoderMaskedMultiheadAttention): one thread block per query head computes
            # its scores and weighted values on CUDA cores, so each (query head, cached token) pair costs issue
            # slots that do not shrink with faster HBM; the kernel takes the slower of that and its KV reads at
            # the generation's streaming share (the fitted system share is a fused kernel's, not this one's).
            self._decode_bytes_per_ctx = decode_bytes / (self.chip.hbm_bandwidth * self.eff.memory_bandwidth)
            self._decode_flops_per_ctx = max(self._decode_flops_per_ctx, heads / pair_rate)
        per_ctx_layer = max(self._decode_flops_per_ctx, self._decode_bytes_per_ctx)
        # ctx_sum is the whole instance's; each DP attention group holds 1/dp of it.
        self.decode_per_ctx = self.layers * per_ctx_layer / p.dp
        self.attn_kernel = self.layers * self.eff.kernel_overhead_s
        window = m.attention_window if m.windowed_layer_fraction else None
        self.window = window
        self.window_share = m.windowed_layer_fraction if window else 0.0

    def _setup_speculation(self) -> None:
        """Multi-token prediction / speculative decoding (deployment keys ``mtp`` and ``accept``): each decode step
        verifies ``k`` draft tokens per sequence, so the target model runs 1 + k tokens per decoding sequence, the
        drafts come from ``k`` sequential passes of one extra layer (DeepSeek-V3's MTP module) plus the LM head, and a
        step yields E = (1 - a^(k+1)) / (1 - a) tokens per sequence on average for per-token acceptance ``a`` (drafts
        accepted in order). The simulator advances one token per sequence per iteration, so decode work is charged
        per output token: the step's time over E."""
        spec = self.plan.spec
        self.spec_k = int(getattr(spec, "mtp", 0) or 0)
        prior = float(serving_defaults().get("mtp_acceptance", 0.85))
        accept = getattr(spec, "accept", None)
        self.spec_accept = prior if accept is None else float(accept)
        a, k = self.spec_accept, self.spec_k
        self.spec_yield = (1.0 - a ** (k + 1)) / (1.0 - a) if k else 1.0
        if k:
            # KV read once per step for all 1 + k queries; their score/value FLOPs scale with 1 + k.
            p = self.plan
            flops_share = self._decode_flops_per_ctx * (1 + k)
            per_ctx_layer = max(flops_share, self._decode_bytes_per_ctx)
            self.decode_per_ctx_spec = self.layers * per_ctx_layer / p.dp

    def _spec_decode(self, decoding: int, ctx_sum: float) -> float:
        """Seconds of one speculative decode step's extra work beyond the plain step, per output token."""
        k = self.spec_k
        extra_tokens = decoding * k
        draft = k * (self.base(decoding) / max(1, self.layers) + self.head(decoding))
        return draft + self.base_increment(decoding, extra_tokens) + self.head(decoding * (1 + k)) - self.head(decoding)

    def base_increment(self, tokens: int, extra: int) -> float:
        """Seconds the token-proportional part grows by when ``extra`` tokens join ``tokens``."""
        return self.base(tokens + extra) - self.base(tokens)

    def prefill_attention(self, chunk: int, prefix: int) -> float:
        """Seconds of causal attention for a chunk of ``chunk`` new tokens after ``prefix`` cached ones,
        all layers, on the attention group that holds the sequence."""
        if chunk <= 0:
            return 0.0
        keys = prefix + chunk
        pairs = chunk * (prefix + (chunk + 1) / 2.0)
        half = self.eff.attention_half_length
        rate = self.attn_peak * self.eff.attention_fwd * keys / (keys + half)
        time = pairs * self.prefill_pair_flops / rate
        if self.window:
            w = min(self.window, keys)
            windowed_pairs = chunk * min(w, prefix + (chunk + 1) / 2.0)
            windowed = windowed_pairs * self.prefill_pair_flops / (self.attn_peak * self.eff.attention_fwd * w / (w + half))
            time = (1.0 - self.window_share) * time + self.window_share * windowed
        return self.layers * time

    # ---- token-proportional part ----------------------------------------------------------------
    def _gemm(self, m: int, n: int, k: int, count: int = 1) -> float:
        if self.weight_bytes is not None:
            t = weight_only_gemm(m, n, k, self.gemm_precision, self.weight_bytes, self.chip, self._tiles, count=count)
            if self.gemm_precision == "int8":  # W8A8: the 16-bit activation is quantised first (read 2, write 1 byte)
                t += count * 3.0 * m * k / (self.chip.hbm_bandwidth * self.eff.memory_bandwidth) + self.eff.kernel_overhead_s
            return t
        return autotuned_gemm(m, n, k, self.gemm_precision, self.chip, self._tiles, count=count)

    def _expert_gemm(self, m: int, n: int, k: int, count: int) -> float:
        """Grouped expert GEMMs with the serving system's expert kernel class (see infer/kernels.py)."""
        kernel = self.expert_kernel
        if kernel.precision is None and kernel.rate_share == 1.0:
            return self._gemm(m, n, k, count)
        compute = kernel.precision or self.gemm_precision
        if compute not in self.chip.peak_flops:
            compute = self.gemm_precision
        stored = kernel.weight_bytes if kernel.weight_bytes is not None else (1.0 if compute == "fp8" else 2.0)
        return weight_only_gemm(m, n, k, compute, stored, self.chip, self._tiles, count=count,
                                rate_share=kernel.rate_share)

    def _memory(self, elements: float, passes: float = 2.0) -> float:
        return passes * ACT * elements / self.bandwidth + self.eff.kernel_overhead_s

    def _collective(self, kind: str, message: float, group, fanout: int = 1) -> float:
        eff = self.a2a_eff if kind == "all_to_all" else self.eff
        return collective_time(kind, message, group, self.plan.cluster, eff, fanout=fanout)

    def _attention_block(self, tr: int) -> float:
        """Projections of one attention block for ``tr`` tokens on one rank (compute stream)."""
        m, p = self.model, self.plan
        h = m.hidden
        heads = m.heads // p.tp
        t = 0.0
        if m.mla is not None:
            a = m.mla
            if a.q_lora_rank:
                t += self._gemm(tr, a.q_lora_rank, h) + self._memory(tr * a.q_lora_rank)
                t += self._gemm(tr, heads * (a.qk_nope_head_dim + a.qk_rope_head_dim), a.q_lora_rank)
            else:
                t += self._gemm(tr, heads * (a.qk_nope_head_dim + a.qk_rope_head_dim), h)
            t += self._gemm(tr, a.kv_lora_rank + a.qk_rope_head_dim, h) + self._memory(tr * a.kv_lora_rank)
            # Key/value up-projection (prefill) or its absorption into query and output (decode): the same
            # weight is read once and the same FLOPs per token run either way.
            t += self._gemm(tr, heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank)
            t += self._gemm(tr, h, heads * a.v_head_dim)
            t += self._memory(tr * heads * (a.qk_nope_head_dim + a.qk_rope_head_dim))  # rope + KV write
        else:
            kv = max(1, m.kv_heads // p.tp)
            t += self._gemm(tr, (heads + 2 * kv) * m.head_dim, h)
            t += self._memory(tr * (heads + 2 * kv) * m.head_dim)  # rope + KV write
            t += self._gemm(tr, h, heads * m.head_dim)
        t += self._memory(tr * h, passes=2.0) + self._memory(tr * h, passes=3.0)  # norm, residual
        return t

    def _mlp_block(self, tr: int, width: int) -> float:
        m = self.model
        up = 2 * width if m.activation == "swiglu" else width
        return (self._gemm(tr, up, m.hidden) + self._memory(tr * up, passes=1.5) + self._gemm(tr, m.hidden, width)
                + self._memory(tr * m.hidden, passes=2.0) + self._memory(tr * m.hidden, passes=3.0))

    def _group_parts(self, tr: int) -> tuple[float, float, float, float]:
        """Per layer, for ``tr`` tokens on the busiest attention group: (dense-layer compute, dense-layer comm,
        MoE-layer compute outside the routed experts, MoE-layer comm) in seconds."""
        m, p = self.model, self.plan
        h = m.hidden
        attn = self._attention_block(tr)
        tp_ar = self._collective("all_reduce", ACT * tr * h, self.tp_group) if p.tp > 1 else 0.0
        dense_compute = attn + self._mlp_block(tr, m.ffn_hidden // p.tp)
        dense_comm = 2.0 * tp_ar
        moe_compute = moe_comm = 0.0
        if m.moe is not None:
            moe = m.moe
            moe_compute = attn + self._gemm(tr, moe.experts, h) + self._memory(tr * moe.topk * h, passes=4.0)
            if moe.shared_experts:
                width = (moe.shared_ffn_hidden or moe.ffn_hidden) * moe.shared_experts // p.tp
                moe_compute += self._mlp_block(tr, width)
            moe_comm = tp_ar  # attention output all-reduce
            if p.ep > 1:
                # Each rank of the busiest TP group dispatches its 1/tp share of the group's tokens. The all-to-all
                # lasts as long as its busiest rank: the hottest expert rank receives moe_imbalance times the
                # balanced share of routed tokens in the dispatch and sends as many back in the combine
                # (LMSYS 2025-05-05 large-scale-EP blog, "Detail Breakdown": with real routing "communication
                # kernels exhibit longer execution times and higher variance ... likely due to greater expert
                # imbalance"). 1.0 under balanced routing, so balanced deployments are unchanged.
                per_rank = tr / p.tp * p.moe_imbalance
                dispatch_bytes = 1.0 if self.precision in ("fp8", "int8") else ACT
                fanout = moe.topk if self.dispatch_dedup else 1
                moe_comm += self._collective("all_to_all", dispatch_bytes * per_rank * moe.topk * h, self.ep_group,
                                             fanout=fanout)
                moe_comm += self._collective("all_to_all", ACT * per_rank * moe.topk * h, self.ep_group, fanout=fanout)
                if self.etp > 1:
                    moe_comm += self._collective("all_reduce", ACT * per_rank * h * self.etp,
                                                 place_group("etp", self.etp, 1, p.cluster))
            elif p.dp > 1:
                moe_comm += (self._collective("all_gather", ACT * tr * p.dp * h, self.stage_group)
                             + self._collective("reduce_scatter", ACT * tr * p.dp * h, self.stage_group))
            else:
                moe_comm += tp_ar
        return dense_compute, dense_comm, moe_compute, moe_comm

    def _expert_part(self, tokens: int) -> float:
        """Seconds of one MoE layer's routed experts on the busiest EP rank for ``tokens`` instance tokens:
        the expected number of distinct local experts the tokens' top-k choices hit, each reading its
        weights once, with the routed tokens (times the imbalance factor) spread over them."""
        m, p = self.model, self.plan
        if m.moe is None or tokens <= 0:
            return 0.0
        moe = m.moe
        local = -(-moe.experts // p.ep)
        routed = tokens * moe.topk / p.ep * p.moe_imbalance
        p_active = 1.0 - (1.0 - moe.topk / moe.experts) ** tokens
        active = max(1, min(local, round(local * p_active)))
        per_expert = max(1, math.ceil(routed / active))
        width = moe.ffn_hidden // self.etp
        up = 2 * width if m.activation == "swiglu" else width
        return (self._expert_gemm(per_expert, up, m.hidden, active) + self._memory(per_expert * active * up, 1.5)
                + self._expert_gemm(per_expert, m.hidden, width, active))

    def _other_part(self, tr: int) -> float:
        """Embedding lookup and pipeline hand-offs for ``tr`` tokens on the busiest group (seconds)."""
        p = self.plan
        t = self._memory(tr * self.model.hidden, passes=2.0)
        if p.pp > 1:
            tier = p.cluster.tier_index_for_span(2 * p.tp * p.dp)
            t += (p.pp - 1) * p2p_time(ACT * tr * self.model.hidden, tier, p.cluster, self.eff)
        return t

    def _memo(self, cache: dict, key: int, exact):
        """Memoised ``exact(key)``: exact up to 1,024, linear between grid points (64 per octave) above."""
        value = cache.get(key)
        if value is not None:
            return value
        if key <= EXACT_TOKENS:
            value = exact(key)
        else:
            step = 1 << max(0, key.bit_length() - 7)
            low = (key // step) * step
            if low == key:
                value = exact(key)
            else:
                a, b = self._memo(cache, low, exact), self._memo(cache, low + step, exact)
                w = (key - low) / step
                value = tuple(x + (y - x) * w for x, y in zip(a, b, strict=True)) if isinstance(a, tuple) \
                    else a + (b - a) * w
        cache[key] = value
        return value

    def base(self, tokens: int, busiest: int = 0) -> float:
        """Seconds of everything but the attention cores and the LM head for ``tokens`` new tokens in the
        instance, the busiest data-parallel attention group holding ``busiest`` of them (at least its
        balanced share ceil(tokens / dp))."""
        if tokens <= 0:
            return 0.0
        p = self.plan
        tr = -(-tokens // p.dp)
        if busiest > tr:
            tr = busiest
        key = tokens if tr == -(-tokens // p.dp) else None
        if key is not None:
            cached = self._base.get(key)
            if cached is not None:
                return cached
        dc, dm, gc, gm = self._memo(self._group, tr, self._group_parts)
        t = self.dense_layers * (max(dc, dm) if p.tbo and tokens >= 2 else dc + dm)
        if self.moe_layers:
            mc = gc + self._memo(self._experts, tokens, self._expert_part)
            t += self.moe_layers * (self._overlapped(mc, gm) if p.tbo and tokens >= 2 else mc + gm)
        if p.tbo and tokens >= 2:
            t += 2.0 * self.layers * self.eff.kernel_overhead_s
        t += self._memo(self._other, tr, self._other_part)
        if key is not None:
            self._base[key] = t
        return t

    def base_exact(self, tokens: int) -> float:
        """:meth:`base` without memoisation or interpolation (for checks)."""
        p = self.plan
        tr = -(-tokens // p.dp)
        dc, dm, gc, gm = self._group_parts(tr)
        tbo = p.tbo and tokens >= 2
        t = self.dense_layers * (max(dc, dm) if tbo else dc + dm)
        if self.moe_layers:
            mc = gc + self._expert_part(tokens)
            t += self.moe_layers * (self._overlapped(mc, gm) if tbo else mc + gm)
        if tbo:
            t += 2.0 * self.layers * self.eff.kernel_overhead_s
        return t + self._other_part(tr)

    def head(self, n_out: int) -> float:
        """Seconds of the final norm, LM head and sampling for ``n_out`` sequences producing a token."""
        cached = self._head.get(n_out)
        if cached is not None:
            return cached
        if n_out <= 0:
            value = 0.0
        else:
            p, m = self.plan, self.model
            rows = max(1, math.ceil(n_out / p.dp))
            vocab = m.vocab // p.tp
            value = (self._memory(rows * m.hidden) + self._gemm(rows, vocab, m.hidden)
                     + self._memory(rows * vocab, passes=4.0))
            if p.tp > 1:
                value += self._collective("all_gather", 4.0 * rows * m.vocab, self.tp_group)
        self._head[n_out] = value
        return value

    def time(self, tokens: int, n_out: int, ctx_sum: float, prefill_attention_s: float = 0.0,
             decoding: int = 0, busiest: int = 0) -> float:
        """Seconds of one iteration: ``tokens`` new tokens (``busiest`` of them on the busiest attention
        group), ``n_out`` of them producing an output token, ``decoding`` decode sequences whose KV holds
        ``ctx_sum`` tokens in total, plus the prefill attention of the busiest group."""
        t = self.base(tokens, busiest) + self.head(n_out) + self.overhead + prefill_attention_s
        if decoding and self.spec_k:
            # Decode work of a speculative step, charged per output token (see _setup_speculation).
            plain = self.base(tokens, busiest) - self.base(tokens - decoding) if tokens > decoding else self.base(tokens)
            step = plain + self._spec_decode(decoding, ctx_sum) + self.decode_per_ctx_spec * ctx_sum + self.attn_kernel
            t += step / self.spec_yield - plain
        elif decoding:
            t += self.decode_per_ctx * ctx_sum + self.attn_kernel
        if prefill_attention_s:
            t += self.attn_kernel
        return t

    def decode_coefficients(self, batch: int, ctx_sum: float) -> tuple[float, float]:
        """(alpha, beta) of a decode-only iteration sequence: iteration j takes alpha + beta * j seconds
        (each iteration adds ``batch`` tokens of context)."""
        if self.spec_k:
            step = self.base(batch) + self.head(batch) + self._spec_decode(batch, ctx_sum) + self.attn_kernel
            alpha = self.overhead + (step + self.decode_per_ctx_spec * ctx_sum) / self.spec_yield
            return alpha, self.decode_per_ctx_spec * batch / self.spec_yield
        alpha = self.base(batch) + self.head(batch) + self.overhead + self.attn_kernel + self.decode_per_ctx * ctx_sum
        return alpha, self.decode_per_ctx * batch

"""Parallel plan: how one training job is split over devices, and its validation against model and cluster."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator

from windtunnel.specs.errors import WindtunnelError, did_you_mean
from windtunnel.specs.layout import BALANCED, stage_modules
from windtunnel.specs.model import ModelSpec
from windtunnel.specs.modules import OFFLOAD_MODULES, RECOMPUTE_MODULES
from windtunnel.specs.plan_checks import PLAN_FIELD_ALIASES as _ALIASES
from windtunnel.specs.plan_checks import CudaGraphs, check_dp_shard, check_offload, check_precision, divisors
from windtunnel.specs.plan_checks import offload_fraction as offload_fraction

Recompute = Literal["none", "selective", "full"]
Schedule = Literal["1f1b", "interleaved", "dualpipe"]


class Plan(BaseModel):
    """A parallel plan. ``dp`` is derived from the device count when left at 0.

    EP shares devices with DP (Megatron style): the expert layers regroup the DP x CP ranks into EP groups.
    """

    model_config = ConfigDict(extra="forbid")
    tp: PositiveInt = 1
    pp: PositiveInt = 1
    dp: int = Field(default=0, ge=0)
    cp: PositiveInt = 1
    ep: PositiveInt = 1
    etp: PositiveInt = 1
    vpp: PositiveInt = 1
    mbs: PositiveInt = 1
    recompute: Recompute = "selective"
    recompute_layers: int = Field(default=-1, ge=-1)
    # With recompute=selective, the modules re-run, '+'-separated (Megatron's --recompute-modules):
    # core_attn, mla_up_proj, layernorm, moe_act, mlp, moe, attn_proj, attn_output, elementwise (specs/modules.py).
    # Empty: core_attn (and mla_up_proj with MLA).
    recompute_modules: str = ""
    sp: bool = True
    zero: int = Field(default=1, ge=0, le=3)
    # Hybrid sharded data parallelism: the data-parallel ranks of one sharding group (0: all dp ranks).
    # ZeRO/FSDP shards the states over dp_shard x cp ranks and replicates across the dp/dp_shard groups,
    # whose gradient shards are all-reduced after each reduce-scatter (PyTorch FSDP HYBRID_SHARD, FSDP2
    # fully_shard on a 2-D mesh, torchtitan data_parallel_shard_degree, MaxText ici_fsdp x dcn_fsdp,
    # Megatron's --num-distributed-optimizer-instances = dp/dp_shard, DeepSpeed MiCS / ZeRO++ hpZ).
    dp_shard: int = Field(default=0, ge=0)
    tp_overlap: bool = False
    # Megatron's EP all-to-all overlap (--overlap-moe-expert-parallel-comm): in the steady state each
    # forward runs together with the backward of an earlier micro-batch, so that one's dispatch and
    # combine hide under the other's compute (layer by layer: one more layer's activations in flight).
    ep_overlap: bool = False
    schedule: Schedule | None = None
    precision: Literal["bf16", "fp16", "fp8"] = "bf16"
    # FP8 scaling: per tensor, or MXFP8's 1x32 blocks (TE MXFP8BlockScaling, Megatron-Bridge fp8_mx).
    fp8_recipe: Literal["tensor", "mx"] = "tensor"
    # MoE token dispatch (cli/keys.py): alltoall, deepep (deduplicating, permuted on the receiving rank),
    # hybridep (HybridEP, permutation fused into its kernels) or allgather (graph/moe_block.py).
    dispatcher: Literal["alltoall", "deepep", "hybridep", "allgather"] = "deepep"
    # Local experts: one grouped GEMM, Megatron-Core's SequentialMLP loop, or the fused MXFP8 grouped MLP
    # (fused_mlp: cuDNN's grouped GEMM GLU kernels); unset: the stack's kernels.expert_gemm.
    expert_gemm: Literal["grouped", "sequential", "fused_mlp"] = "grouped"
    # Which weights' gradients the weight-gradient GEMM accumulates straight into the main gradients
    # (Megatron's gradient_accumulation_fusion; MindSpeed's --gemm-gradient-accumulation-fusion for the
    # grouped experts): all, experts only, or none (each micro-batch's 16-bit gradient is then added to
    # the main gradient by the DDP hook); unset: the stack's kernels.grad_accum_fusion.
    grad_accum_fusion: Literal["all", "experts", "none"] = "all"
    # Input embedding as a gather, or a one-hot of the ids times the table (MaxText use_iota_embed=true,
    # Praxis lookup_style 'matmul'); unset: the stack's kernels.embedding_lookup.
    embedding_lookup: Literal["gather", "matmul"] = "gather"
    # How context parallelism exchanges keys and values (the stack's comm.context_parallel when unset):
    # ring (P2P ring attention; Megatron cp_comm_type p2p, MindSpeed megatron_cp_algo), allgather (KV
    # all-gather; torchtitan, Llama 3) or ulysses (head/sequence all-to-alls; DeepSpeed-Ulysses, Megatron
    # cp_comm_type a2a, MindSpeed ulysses_cp_algo).
    cp_algo: Literal["ring", "allgather", "ulysses"] = "ring"
    # Whether the context-parallel transfers overlap the attention (each waited where its result is first
    # needed, as eager PyTorch's AsyncCollectiveTensor and TE's ring streams do) or are waited where they are
    # issued, stalling it (a torch.compile'd block: a traced functional collective waits at once). Unset:
    # the stack's comm.cp_overlap.
    cp_overlap: bool = True
    # Megatron's --overlap-grad-reduce / --overlap-param-gather: each gradient bucket is reduced while the
    # backward still runs, each layer's parameters gathered under the first forward. Off, the reduction
    # waits for the whole backward and the (ZeRO) parameter all-gather precedes the forward. Unset: the stack's.
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    cuda_graphs: CudaGraphs = "none"
    # Data types of the optimizer's state: the main gradients (Megatron's grad buffers, which are
    # also what data parallelism reduces; bf16 with --grad-reduce-in-bf16, Megatron-Bridge's
    # grad_reduce_in_fp32=False) and Adam's two moments (bf16 with --use-precision-aware-optimizer
    # --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, as DeepSeek-V3 trains). Master weights stay fp32.
    grads: Literal["fp32", "bf16"] = "fp32"
    moments: Literal["fp32", "bf16"] = "fp32"
    # Activation offloading (Megatron's --cpu-offloading-num-layers): the saved activations of the
    # first N transformer layers go to host memory after their forward and come back for their
    # backward, the copies overlapping the neighbouring layers' compute. As in Megatron it needs
    # pp=1, no recomputation and no CUDA graphs; with it the recompute default is none.
    offload_layers: int = Field(default=0, ge=0)
    # Fine-grained activation offloading (Megatron's --fine-grained-activation-offloading
    # --offload-modules): the named modules of every layer keep their saved activations in host
    # memory, '+'-separated: attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act.
    offload_modules: str = ""
    # MindSpeed memory features (docs/features/reuse-fp32-param.md, swap-optimizer.md): the fp32 master
    # weights stored as the bf16 weights plus a 16-bit residual (--reuse-fp32-param); the optimizer
    # states kept in host memory outside the optimizer step (--swap-optimizer). Unset: the stack's.
    reuse_fp32_param: bool = False
    swap_optimizer: bool = False
    # Share (0..1) of the optimizer states in host memory, stepped by the CPU (DeepSpeed offload_optimizer
    # device cpu, ZeRO-Offload; Megatron-Core --optimizer-offload-fraction): train/offload_optimizer.py.
    offload_optimizer: float = Field(default=0.0, ge=0.0, le=1.0)
    # CPU checkpointing (DeepSpeed activation_checkpointing.cpu_checkpointing, Megatron-DeepSpeed
    # --checkpoint-in-cpu): with full recomputation, every layer's checkpointed input lives in host memory
    # between its forward and its recomputation; how it travels is the stack's (memory.cpu_checkpointing).
    checkpoint_in_cpu: bool = False
    # The input of a SwiGLU activation kept in FP8 for its backward, cast back to 16 bits there
    # (Megatron-Core --activation-func-fp8-input-store, TransformerConfig.activation_func_fp8_input_store;
    # DeepSeek-V3 report Sec. 3.3.2 caches the MoE SwiGLU inputs in FP8 and recomputes their output).
    act_fp8_store: bool = False
    fp8_attention: bool = False  # attention's matmuls in FP8 (Megatron --fp8-dot-product-attention, cuDNN)
    # MoE tokens dispatched in FP8, the combine in BF16 (DeepSeek-V3 Sec. 3.3.3). Off, 16 bits whatever the GEMMs
    # run in: Megatron-Core's dispatchers quantise only inside the expert GEMMs (validation NOTES, 2026-12-07).
    fp8_dispatch: bool = False
    # Hardware work queues per device (CUDA_DEVICE_MAX_CONNECTIONS, CUDA's default 8). With 1, every stream's
    # kernels wait in one queue in the order the host issued them, so an overlapped pair's all-to-all cannot start
    # before the compute issued ahead of it (train/layers.py, the EP overlap and DualPipe pairs).
    device_connections: int = Field(default=8, ge=1, le=32)
    # Multi-token prediction modules trained (Megatron's --mtp-num-layers; DeepSeek-V3 trains one):
    # each runs one more transformer layer, a projection and the shared output layer and loss on
    # the last pipeline stage. None: the model's own count (mtp_layers).
    mtp: int | None = Field(default=None, ge=0)
    # Megatron's --pipeline-model-parallel-layout: which modules each (virtual) stage runs, e.g.
    # 'Et*4|(t*4|)*14tmL'; empty: layers split evenly, embedding first, MTP and loss last; 'balanced': the
    # split that evens the busiest rank's time per micro-batch (specs.layout.balanced_split; the step
    # reports the layout it chose).
    layout: str = ""
    order: str = "tp-cp-dp-pp"

    @field_validator("order")
    @classmethod
    def _check_order(cls, value: str) -> str:
        parts = value.lower().split("-")
        if sorted(parts) != ["cp", "dp", "pp", "tp"]:
            raise ValueError("order must be a permutation of tp, cp, dp, pp joined by '-', e.g. tp-cp-dp-pp "
                             "(innermost first: Megatron's default) or tp-cp-pp-dp (pipeline stages inside a node)")
        return "-".join(parts)

    @field_validator("layout")
    @classmethod
    def _compact_layout(cls, value: str) -> str:
        # Commas and spaces are cosmetic in Megatron's layout syntax; dropping them keeps to_string parseable.
        return "".join(ch for ch in value if not ch.isspace() and ch != ",")

    def to_string(self) -> str:
        """The ``tp=..,pp=..`` form that ``--plan`` accepts; ``sp`` and ``tp_overlap`` as they act (false at
        tp=1, where a stack default that turns them on does nothing; the TP overlap also needs sp)."""
        parts = [
            f"tp={self.tp}", f"pp={self.pp}", f"dp={self.dp}", f"cp={self.cp}", f"ep={self.ep}",
            f"vpp={self.vpp}", f"mbs={self.mbs}", f"recompute={self.recompute}",
            f"sp={'true' if self.sequence_parallel else 'false'}", f"zero={self.zero}",
            *([f"dp_shard={self.dp_shard}"] if self.dp_shard else []),
            f"tp_overlap={'true' if self.tp_overlap and self.sequence_parallel else 'false'}",
            f"schedule={self.pipeline_schedule}", f"precision={self.precision}",
        ]
        if self.ep > 1:
            parts.append(f"dispatcher={self.dispatcher}")
        for name, default in (("expert_gemm", "grouped"), ("grad_accum_fusion", "all"), ("embedding_lookup", "gather")):
            if getattr(self, name) != default:
                parts.append(f"{name}={getattr(self, name)}")
        if self.cp > 1 and self.cp_algo != "ring":
            parts.append(f"cp_algo={self.cp_algo}")
        if self.etp > 1:
            parts.append(f"etp={self.etp}")
        if self.ep_overlap:
            parts.append("ep_overlap=true")
        if self.device_connections != 8:
            parts.append(f"device_connections={self.device_connections}")
        parts += [f"cuda_graphs={self.cuda_graphs}"] if self.cuda_graphs != "none" else []
        parts += [f"fp8_recipe={self.fp8_recipe}"] if self.fp8_recipe != "tensor" else []
        if self.grads != "fp32":
            parts.append(f"grads={self.grads}")
        if self.moments != "fp32":
            parts.append(f"moments={self.moments}")
        if self.offload_layers:
            parts.append(f"offload_layers={self.offload_layers}")
        if self.offload_modules:
            parts.append(f"offload_modules={self.offload_modules}")
        parts += [f"offload_optimizer={self.offload_optimizer:g}"] if self.offload_optimizer else []
        parts += [f"{name}=true" for name in _SET_FLAGS if getattr(self, name)]
        if self.cp > 1 and not self.cp_overlap:
            parts.append("cp_overlap=false")
        parts += [f"{name}=false" for name in _DP_OVERLAP if not getattr(self, name)]
        if self.order != "tp-cp-dp-pp":
            parts.append(f"order={self.order}")
        if self.mtp is not None:
            parts.append(f"mtp={self.mtp}")
        if self.layout:
            parts.append(f"layout={self.layout}")
        if self.recompute_layers >= 0:
            parts.append(f"recompute_layers={self.recompute_layers}")
        if self.recompute_modules:
            parts.append(f"recompute_modules={self.recompute_modules}")
        return ",".join(parts)

    def short(self) -> str:
        """A compact form for tables: only what differs from the defaults (still valid for --plan)."""
        default = Plan()
        parts = [f"tp={self.tp}", f"pp={self.pp}"]
        for name in ("cp", "ep", "vpp", "mbs"):
            if getattr(self, name) != 1:
                parts.append(f"{name}={getattr(self, name)}")
        parts.append(f"recompute={self.recompute}" + (f":{self.recompute_layers}" if self.recompute_layers >= 0 else ""))
        if self.recompute_modules:
            parts.append(f"recompute_modules={self.recompute_modules}")
        if self.sequence_parallel:
            parts.append("sp")
        elif self.tp > 1:
            parts.append("sp=false")  # sp defaults to on
        if self.tp_overlap and self.sequence_parallel:
            parts.append("tp_overlap")
        parts.append(f"zero={self.zero}")
        if self.dp_shard:
            parts.append(f"dp_shard={self.dp_shard}")
        if self.pipeline_schedule == "dualpipe":
            parts.append("dualpipe")
        if self.ep_overlap:
            parts.append("ep_overlap")
        if self.offload_layers:
            parts.append(f"offload_layers={self.offload_layers}")
        if self.offload_modules:
            parts.append(f"offload_modules={self.offload_modules}")
        parts += [f"offload_optimizer={self.offload_optimizer:g}"] if self.offload_optimizer else []
        parts += [name for name in _SET_FLAGS if getattr(self, name)]
        if self.cp > 1 and self.cp_algo != "ring":
            parts.append(f"cp_algo={self.cp_algo}")
        if self.cp > 1 and not self.cp_overlap:
            parts.append("cp_overlap=false")
        parts += [f"{name}=false" for name in _DP_OVERLAP if not getattr(self, name)]
        for name in ("precision", "fp8_recipe", "cuda_graphs", "grads", "moments", "order", "mtp", "layout"):
            if getattr(self, name) != getattr(default, name):
                parts.append(f"{name}={getattr(self, name)}")
        return ",".join(parts)

    @property
    def pipeline_schedule(self) -> str:
        """The schedule actually used: explicit, else interleaved when vpp > 1, else 1F1B."""
        if self.schedule:
            return self.schedule
        return "interleaved" if self.vpp > 1 else "1f1b"

    @property
    def dp_replicas(self) -> int:
        """HSDP: how many copies of each sharding group's states there are (dp/dp_shard; 1 without dp_shard
        or before ``dp`` is filled in)."""
        return self.dp // self.dp_shard if self.dp_shard and self.dp else 1

    @property
    def sequence_parallel(self) -> bool:
        """Sequence parallelism only means something with TP > 1."""
        return self.sp and self.tp > 1


_BOOLS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False, "on": True, "off": False}
_SET_FLAGS = ("reuse_fp32_param", "swap_optimizer", "act_fp8_store", "fp8_attention", "fp8_dispatch",
              "checkpoint_in_cpu")  # off by default: printed when on
_DP_OVERLAP = ("overlap_grad_reduce", "overlap_param_gather")  # on by default: printed when off
_LOWERCASE = ("recompute", "schedule", "precision", "dispatcher", "cuda_graphs", "order", "recompute_modules",
              "grads", "moments", "offload_modules", "cp_algo", "expert_gemm", "grad_accum_fusion",
              "embedding_lookup")  # name-valued fields, read case-insensitively
_FLAGS = ("sp", "tp_overlap", "ep_overlap", *_SET_FLAGS, "cp_overlap", *_DP_OVERLAP)  # true/false fields


def parse_plan(text: str | dict | Plan) -> Plan:
    """Parse ``tp=8,pp=16,...`` (or a mapping) into a Plan; unknown keys and bad values are clear errors."""
    if isinstance(text, Plan):
        return text
    if isinstance(text, dict):
        items = {str(k): v for k, v in text.items()}
    else:
        items = {}
        for raw in str(text).replace(";", ",").split(","):
            raw = raw.strip()
            if not raw:
                continue
            if "=" not in raw:
                # The compact form tables print (Plan.short): a bare flag means it is on.
                flag = _ALIASES.get(raw.lower(), raw.lower())
                if flag in _FLAGS:
                    items[flag] = "true"
                    continue
                if flag == "dualpipe":
                    items["schedule"] = "dualpipe"
                    continue
                raise WindtunnelError(f"Plan item '{raw}' is not of the form key=value (field 'plan'), e.g. tp=8,pp=4; "
                                      f"bare flags: {', '.join((*_FLAGS, 'dualpipe'))}.")
            key, value = (s.strip() for s in raw.split("=", 1))
            if _ALIASES.get(key.lower(), key.lower()) == "recompute" and ":" in value:
                # recompute=full:4 (Plan.short): full recomputation of 4 layers per chunk.
                value, layers = (part.strip() for part in value.split(":", 1))
                items["recompute_layers"] = layers
            if key in items:
                raise WindtunnelError(f"Plan field '{key}' is given twice ('{items[key]}' and '{value}'); give it "
                                      "once.", field=key)
            items[key] = value
    fields = set(Plan.model_fields)
    data: dict = {}
    for key, value in items.items():
        key = _ALIASES.get(key.lower(), key.lower())
        if key not in fields:
            raise WindtunnelError(
                f"Unknown plan field '{key}' (field 'plan'){did_you_mean(key, fields | set(_ALIASES))}; valid fields: "
                f"{', '.join(sorted(fields))}.", field="plan"
            )
        if key in _FLAGS and isinstance(value, str):
            if value.lower() not in _BOOLS:
                raise WindtunnelError(f"Plan field '{key}' must be true or false, got '{value}'.", field=key)
            value = _BOOLS[value.lower()]
        if key == "offload_optimizer":
            value = offload_fraction(value)
        if key == "zero" and isinstance(value, str) and value.lower() in ("true", "false"):
            value = 1 if value.lower() == "true" else 0
        if key in _LOWERCASE and isinstance(value, str):
            value = value.lower()
        data[key] = value
    from windtunnel.specs.validation import build

    return build(Plan, data, "Plan")


def validate_plan(plan: Plan, model: ModelSpec | None, devices: int, seq_len: int, global_batch: int,
                  *, layers: int | None = None) -> Plan:
    """Check a plan against model, device count and batch; return it with ``dp`` filled in.

    ``model`` None (an operator-DAG model) skips the shape checks (heads, FFN, experts); ``layers``
    then bounds pp*vpp. Every failure names the field, its value and the values that would be valid.
    """

    def fail(field: str, message: str) -> None:
        raise WindtunnelError(message, field=field)

    from windtunnel.specs.bounds import MAX_DEVICES, MAX_SEQ_LEN, check_whole

    check_whole("seq_len", seq_len, 1, MAX_SEQ_LEN, what=" tokens")
    check_whole("global_batch", global_batch, 1, 1 << 62, what=" sequences")
    check_whole("devices", devices, 1, MAX_DEVICES)
    check_precision(plan)
    if plan.etp not in (1, plan.tp):
        fail("etp", f"Plan field 'etp' is {plan.etp}: expert tensor parallelism splits each expert over the "
             f"tensor-parallel group (Megatron-Core's default expert_tensor_parallel_size = tp), so etp must be "
             f"1 or tp = {plan.tp}.")
    model_parallel = plan.tp * plan.pp * plan.cp
    if devices % model_parallel:
        fail("devices", f"Devices ({devices}) must be divisible by tp*pp*cp = {plan.tp}*{plan.pp}*{plan.cp} = "
             f"{model_parallel}; device counts that work are multiples of {model_parallel}.")
    dp = devices // model_parallel
    if plan.dp and plan.dp != dp:
        fail("dp", f"Plan field 'dp' is {plan.dp} but devices / (tp*pp*cp) = {devices}/{model_parallel} = {dp}; "
             f"leave dp out or set dp={dp}.")
    check_dp_shard(plan, dp)
    layers = model.layers if model is not None else (layers or 1)
    if model is not None:
        _check_shape(plan, model, dp)
    stage = plan.tp * plan.cp * dp
    if plan.etp > 1 and stage % (plan.ep * plan.etp):
        fail("etp", f"Plan ep*etp = {plan.ep}*{plan.etp} does not divide tp*cp*dp = {stage}: the expert layers "
             "regroup a pipeline stage's ranks into etp x ep x expert-dp; lower ep or use etp=1.")
    if stage % plan.ep:
        experts = model.moe.experts if model is not None and model.moe else stage
        fail("ep", f"Plan field 'ep' is {plan.ep}, which does not divide tp*cp*dp = {stage} (expert layers regroup "
             f"a pipeline stage's ranks, Megatron's parallel folding); valid ep values: "
             f"{', '.join(str(d) for d in divisors(stage) if experts % d == 0)}.")
    if plan.ep > dp * plan.cp and plan.tp > 1 and not plan.sp:
        fail("sp", f"Plan field 'ep' is {plan.ep}, larger than dp*cp = {dp * plan.cp}, so expert groups span "
             "tensor-parallel ranks; each of them must route its own share of the tokens, which needs sequence "
             "parallelism (sp=true), as Megatron requires for MoE with TP.")
    chunks = plan.pp * plan.vpp
    if plan.mtp is not None and plan.mtp > layers:
        fail("mtp", f"Plan field 'mtp' is {plan.mtp}: each multi-token-prediction module adds a transformer layer, so "
             f"more than the model's {layers} layers is not a model; use 0 to {layers} (DeepSeek-V3 trains 1).")
    if plan.layout or plan.mtp:
        _check_layout(plan, model)
    if chunks > layers and plan.layout in ("", BALANCED):
        fail("pp", f"Plan pp*vpp = {plan.pp}*{plan.vpp} = {chunks} exceeds the model's {layers} layers; "
             f"use pp*vpp <= {layers}.")
    if plan.vpp > 1 and plan.pp == 1:
        fail("vpp", f"Plan field 'vpp' is {plan.vpp} but pp is 1; interleaving needs pp > 1 (set vpp=1).")
    return _check_batch(check_offload(plan, layers), devices, seq_len, global_batch, dp)


def _check_layout(plan: Plan, model: ModelSpec | None) -> None:
    """A pipeline layout and MTP modules need a transformer model; the layout must place every module."""
    if model is None:
        field = "layout" if plan.layout else "mtp"
        raise WindtunnelError(f"Plan field '{field}' needs a transformer model; an operator-DAG model has no "
                              "embedding/MTP/loss modules to place (leave it out).", field=field)
    if plan.layout and plan.layout != BALANCED:
        # DualPipe runs pp stages, stage i on rank i and, mirrored, on rank pp-1-i.
        stages = plan.pp if plan.pipeline_schedule == "dualpipe" else plan.pp * plan.vpp
        stage_modules(model, plan.layout, stages, model.mtp_layers if plan.mtp is None else plan.mtp)


def _check_shape(plan: Plan, model: ModelSpec, dp: int) -> None:
    """Checks that need the transformer's shape: heads, FFN width, experts."""

    def fail(field: str, message: str) -> None:
        raise WindtunnelError(message, field=field)

    if model.heads % plan.tp:
        fail("tp", f"Plan field 'tp' is {plan.tp}, which does not divide the model's {model.heads} attention heads; "
             f"valid tp values: {', '.join(map(str, divisors(model.heads)))}.")
    if model.mla is None and model.kv_heads % plan.tp and plan.tp % model.kv_heads:
        fail("tp", f"Plan field 'tp' is {plan.tp}, which neither divides nor is a multiple of the model's "
             f"{model.kv_heads} KV heads.")
    ffn_widths = [model.ffn_hidden] if model.dense_layers else []
    for width in ffn_widths:
        if width % plan.tp:
            fail("tp", f"Plan field 'tp' is {plan.tp}, which does not divide the FFN width {width}.")
    if plan.etp > 1 and (model.moe is None or model.moe.ffn_hidden % plan.etp):
        width = model.moe.ffn_hidden if model.moe else None
        fail("etp", f"Plan field 'etp' is {plan.etp}, but " + ("the model has no experts; use etp=1." if width is None
             else f"it does not divide the experts' FFN width {width}; use etp=1 or a tp that divides {width}."))
    if plan.act_fp8_store and model.activation != "swiglu":
        fail("act_fp8_store", f"Plan field 'act_fp8_store' keeps a SwiGLU input in FP8 (Megatron-Core's fused SwiGLU), "
             f"but model '{model.id}' uses {model.activation}; leave act_fp8_store off.")
    if plan.ep > 1:
        if model.moe is None:
            fail("ep", f"Plan field 'ep' is {plan.ep} but model '{model.id}' has no experts; use ep=1.")
        if model.moe.experts % plan.ep:
            fail("ep", f"Plan field 'ep' is {plan.ep}, which does not divide the model's {model.moe.experts} experts; "
                 f"valid ep values: "
                 f"{', '.join(str(d) for d in divisors(model.moe.experts) if (plan.tp * plan.cp * dp) % d == 0)}.")


def _check_batch(plan: Plan, devices: int, seq_len: int, global_batch: int, dp: int) -> Plan:
    """Checks on sequence length, batch and schedule; returns the plan with dp filled in."""

    def fail(field: str, message: str) -> None:
        raise WindtunnelError(message, field=field)

    if seq_len % (plan.cp * (2 if plan.cp > 1 else 1)):
        fail("cp", f"Sequence length {seq_len} must be divisible by 2*cp = {2 * plan.cp} for load-balanced ring attention.")
    if plan.sequence_parallel and seq_len % (plan.tp * plan.cp):
        fail("sp", f"Sequence parallelism needs seq_len ({seq_len}) divisible by tp*cp = {plan.tp * plan.cp}.")
    if global_batch % (plan.mbs * dp):
        fail("global_batch", f"Global batch {global_batch} must be divisible by mbs*dp = {plan.mbs}*{dp} = "
             f"{plan.mbs * dp}; nearest valid global batches: {(global_batch // (plan.mbs * dp)) * plan.mbs * dp or plan.mbs * dp}"
             f" and {(global_batch // (plan.mbs * dp) + 1) * plan.mbs * dp}.")
    micro_batches = global_batch // (plan.mbs * dp)
    from windtunnel.specs.bounds import MAX_MICRO_BATCHES

    if micro_batches > MAX_MICRO_BATCHES:
        fail("global_batch", f"Field 'global_batch' is {global_batch}: {micro_batches:,} micro-batches per step (global batch / "
             f"(mbs*dp) = {global_batch}/({plan.mbs}*{dp})); windtunnel plays at most {MAX_MICRO_BATCHES:,}: raise mbs "
             f"or lower the global batch to at most {MAX_MICRO_BATCHES * plan.mbs * dp:,}.")
    schedule = plan.pipeline_schedule
    if schedule == "1f1b" and plan.vpp > 1:
        fail("schedule", f"Plan field 'schedule' is 1f1b but vpp is {plan.vpp}: virtual pipeline chunks need the "
             "interleaved schedule; use schedule=interleaved (the default when vpp > 1) or vpp=1.")
    if schedule == "interleaved" and plan.pp > 1 and micro_batches % plan.pp:
        fail("global_batch", f"The interleaved schedule needs the number of micro-batches ({micro_batches}) to be a "
             f"multiple of pp ({plan.pp}); change global batch, mbs or vpp=1.")
    if schedule == "dualpipe":
        if plan.pp % 2:
            fail("pp", f"DualPipe needs an even pp, got {plan.pp}.")
        if micro_batches < plan.pp:
            fail("global_batch", f"DualPipe needs at least pp ({plan.pp}) micro-batches per step, got {micro_batches}.")
        if plan.vpp != 1:
            fail("vpp", "DualPipe already places two chunks per device; use vpp=1 with schedule=dualpipe.")
    if plan.ep_overlap:
        if plan.ep == 1:
            fail("ep_overlap", "Plan field 'ep_overlap' overlaps the expert all-to-alls, but ep is 1; set ep > 1 or "
                 "ep_overlap=false.")
        if schedule == "dualpipe" or (plan.pp > 1 and not (schedule == "interleaved" and plan.vpp > 1)):
            fail("ep_overlap", f"Plan field 'ep_overlap' needs pp=1 or the interleaved schedule with vpp > 1 (as "
                 f"Megatron's overlap does); got pp={plan.pp}, vpp={plan.vpp}, schedule={schedule}. DualPipe "
                 "already overlaps the all-to-alls.")
        if micro_batches < 2:
            fail("ep_overlap", "Plan field 'ep_overlap' pairs a forward with an earlier micro-batch's backward, so it "
                 f"needs at least 2 micro-batches per step, got {micro_batches}.")
    if plan.recompute_modules:
        if plan.recompute != "selective":
            fail("recompute_modules", f"Plan field 'recompute_modules' ({plan.recompute_modules}) applies to "
                 f"recompute=selective only, got recompute={plan.recompute}.")
        bad = [m for m in plan.recompute_modules.split("+") if m not in RECOMPUTE_MODULES]
        if bad:
            fail("recompute_modules", f"Plan field 'recompute_modules' has unknown module(s) {', '.join(bad)}; valid: "
                 f"{', '.join(RECOMPUTE_MODULES)}, joined by '+' (e.g. layernorm+moe_act).")
    if plan.offload_modules:
        bad = [m for m in plan.offload_modules.split("+") if m not in OFFLOAD_MODULES]
        if bad:
            fail("offload_modules", f"Plan field 'offload_modules' has unknown module(s) {', '.join(bad)}; valid: "
                 f"{', '.join(OFFLOAD_MODULES)}, joined by '+' (e.g. expert_fc1+moe_act).")
    if plan.recompute_layers > 0 and plan.recompute != "full":
        fail("recompute_layers", "recompute_layers applies to recompute=full only.")
    return plan.model_copy(update={"dp": dp})

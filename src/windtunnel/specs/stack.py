"""Training stacks (frameworks) as data: what Megatron, NeMo, PyTorch FSDP, DeepSpeed, MindSpeed or JAX
really do, loaded from ``catalog/stacks/*.yaml`` or a user's own YAML file.

A stack never changes the model or the plan; it says how the framework runs them: which kernels it
fuses, which attention kernel it uses, how it issues work from the host, how sharded parameters are
gathered and gradients reduced, what it overlaps, how context parallelism and MoE dispatch run, and
what memory it holds besides tensors. Behaviour that differs by framework lives here, not in code
keyed on names. A stack may ``inherit`` another and override some fields (deep merge).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, ValidationError, model_validator

from windtunnel.specs.errors import WindtunnelError, choices_text, did_you_mean
from windtunnel.specs.yamlio import catalog_dir, deep_merge, read_mapping_file, read_yaml

DEFAULT_STACK = "megatron"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Kernels(_Frozen):
    """Which kernels the stack runs for a transformer layer."""

    # Name of an attention kernel in catalog/efficiency.yaml (attention_kernels), or 'unfused'
    # (scores materialised, softmax and dropout as separate kernels).
    attention: str = "flash"
    # Softmax cross-entropy as one kernel (bf16 logits) or as eager fp32 PyTorch ops.
    fused_loss: bool = True
    # Bias+activation, bias+dropout+residual and norms as fused kernels (TE / Apex / MindSpeed fused ops)
    # rather than one eager PyTorch kernel per elementwise op.
    fused_elementwise: bool = True
    # Host (CPU) cost of one Linear call in eager framework ops: a Transformer Engine module costs
    # ~2.7 plain PyTorch ops (TransformerEngine issue #2053); plain torch.nn.Linear is 1.
    linear_host_ops: float = Field(default=2.7, ge=0)
    # How the host issues kernels: 'eager' (one framework call per op, unless the plan captures CUDA
    # graphs) or 'compiled' (one executable per step, as XLA runs it: no per-op host cost).
    host_issue: Literal["eager", "compiled"] = "eager"
    # The model repeats each KV head to its query heads before the attention call (GQA without a
    # GQA-aware kernel), so attention, its saved inputs and context parallelism's K/V traffic are at
    # the query heads' count.
    repeat_kv: bool = False
    # How a MoE layer runs its local experts when the plan does not say: 'grouped' (one grouped GEMM
    # kernel, Megatron's --moe-grouped-gemm) or 'sequential' (Megatron-Core's SequentialMLP: a Python
    # loop of one MLP per expert over slices of the permuted tokens); 'fused_mlp' (the fused MXFP8 grouped
    # MLP, plan field expert_gemm) is a plan's choice, since it runs only in MXFP8.
    expert_gemm: Literal["grouped", "sequential"] = "grouped"
    # Weights whose gradients the weight-gradient GEMM accumulates into the fp32 main gradients when the plan
    # does not say (plan grad_accum_fusion): all (Transformer Engine, Megatron's fused wgrad), experts, none.
    grad_accum_fusion: Literal["all", "experts", "none"] = "all"
    # Multi-head latent attention pads its values to the query/key head dim for an attention kernel that
    # takes one head dim (and slices the output back): the value half of attention runs at that dim.
    mla_pad_v: bool = False
    # How the input embedding looks its rows up: 'gather' (an index into the table, as Megatron, PyTorch
    # and MaxText do) or 'matmul' (Praxis/PaxML EMBEDDING_LOOKUP_STYLE 'matmul': a one-hot of the tokens
    # times the table, a GEMM of tokens x vocab x hidden forward and its weight gradient backward).
    embedding_lookup: Literal["gather", "matmul"] = "gather"
    # How queries and keys get their rotary embedding: 'fused' (one kernel per tensor each way: Transformer
    # Engine's or Apex's fused RoPE, or a compiler's fusion), 'fused_unscaled' (fused for plain RoPE only; a model
    # with a run-time scaled RoPE (ModelSpec.rope_scaling, YaRN) runs the eager path), or 'eager' (PyTorch ops).
    rope: Literal["fused", "fused_unscaled", "eager"] = "fused"
    # The eager path's cost per tensor (query, key): passes over its 16-bit elements forward and backward, and
    # host ops forward and backward (the framework's rotary function and its autograd, counted in the stack's
    # sources).
    rope_eager_costs: tuple[NonNegativeFloat, NonNegativeFloat, NonNegativeFloat, NonNegativeFloat] = (12.0, 17.0, 16.0, 10.0)
    # How an FP8 GEMM's 16-bit activation operand (forward input, backward output gradient) is quantised:
    # 'separate' (a cast kernel before the GEMM reads 2 bytes and writes 1 per element, as Transformer Engine's
    # and torchao's current-scaling casts do) or 'fused' (a compiler folds the scale-and-convert into the kernel
    # that produces the operand: XLA with delayed scaling, whose scale is known before the producer runs).
    fp8_cast: Literal["separate", "fused"] = "separate"
    # How per-tensor FP8 (a plan's fp8_recipe=tensor) scales its tensors: 'delayed' (from an amax history;
    # Transformer Engine quantises a grouped GEMM's experts in one fused cast-transpose kernel) or 'current'
    # (from each tensor's own amax: per expert an amax kernel, a scale kernel and the cast, TE's
    # Float8CurrentScalingQuantizer::quantize, called expert by expert by split_quantize).
    fp8_scaling: Literal["delayed", "current"] = "delayed"
    # Where the stack's calibration family has a 16-bit GEMM fit on a chip but none in FP8, the FP8 GEMMs run at
    # this fraction of that fit (FP8 fraction of the FP8 peak per 16-bit fraction of the 16-bit peak, measured on
    # the stack's own GEMM kernels). None: they run at the default family's FP8 fit (Transformer Engine's FP8, as
    # Megatron runs it), which is what a stack whose FP8 GEMMs are Transformer Engine's does.
    fp8_gemm_of_bf16: float | None = Field(default=None, gt=0, le=1.5)
    # The sequential loop's costs beyond the experts' GEMMs, in passes over the permuted tokens
    # (16-bit, rows x hidden) and eager ops: forward (zeros for the output, each expert's output
    # copied into its slice); backward per expert (autograd's CopySlices copies the whole output
    # gradient for each in-place slice write, each slice's backward writes a zero tensor of the whole
    # input and the input buffer adds it to the others); host ops per expert (slice, copy, and the
    # MLP's two linears and activation as separate calls).
    sequential_forward_passes: float = Field(default=3.0, ge=0)
    sequential_backward_passes_per_expert: float = Field(default=6.0, ge=0)
    sequential_host_ops_per_expert: float = Field(default=5.0, ge=0)

    def fp8_quant_launches(self, precision: str, fp8_recipe: str) -> int:
        """Kernels one expert's FP8 quantisation launches in a per-expert grouped GEMM (Transformer Engine
        v2.10-v2.14 csrc/extensions/cast.cpp split_quantize): MXFP8, one cast per expert; per-tensor current
        scaling, amax, scale and cast per expert (quantizer.cpp Float8CurrentScalingQuantizer::quantize); delayed
        scaling, none per expert (one fused multi-tensor cast-transpose for all, multi_tensor_quantize_impl)."""
        if precision != "fp8":
            return 0
        if fp8_recipe == "mx":
            return 1
        return 3 if self.fp8_scaling == "current" else 0

    @property
    def sequential_costs(self) -> tuple[float, float, float]:
        """The sequential expert loop's costs as graph.transformer.Sharding.sequential_costs takes them."""
        return (self.sequential_forward_passes, self.sequential_backward_passes_per_expert,
                self.sequential_host_ops_per_expert)


class Sharding(_Frozen):
    """How sharded data parallelism (ZeRO-3 / FSDP FULL_SHARD) gathers parameters and reduces gradients."""

    # Layers whose gathered (unsharded) 16-bit parameters are resident at once: the current one and
    # those prefetched ahead of it.
    gathered_layers: int = Field(default=2, ge=1)
    # Gathered parameters are freed after each layer's forward and gathered again for its backward.
    reshard_after_forward: bool = True
    # Blocks are still resharded after forward when the plan also pipelines (False: torchtitan keeps
    # gathered blocks between forward and backward under PP, so a rank holds all its blocks gathered).
    reshard_with_pp: bool = True
    # Gradients are still reduce-scattered every micro-batch when the plan also pipelines (False:
    # torch.distributed.pipelining turns gradient sync off until the last micro-batch, so every block
    # of the rank accumulates its unsharded gradient in the reduction dtype).
    reduce_with_pp: bool = True
    # Layers whose unsharded gradients (16-bit, plus a copy in the reduction dtype when it differs)
    # are alive at once while they are reduce-scattered.
    reducing_layers: int = Field(default=1, ge=0)
    # The sharded fp32 parameters are the optimizer's master weights and no sharded 16-bit copy is
    # kept (FSDP MixedPrecision casts at the all-gather); False: a 16-bit partition beside the fp32
    # master partition (DeepSpeed ZeRO-3, Megatron-FSDP).
    fp32_sharded_params: bool = False
    # DeepSpeed ZeRO-3 fetches parameters one submodule (one Linear, one norm) at a time and stops
    # prefetching once this many gathered parameters are resident (stage3_max_live_parameters), so its
    # gathered working set is capped by a parameter count, never below the largest single weight (the
    # module being run is always gathered whole). None: whole layers (gathered_layers), as FSDP's units.
    max_live_params: float | None = Field(default=None, gt=0)
    # Gradients are reduce-scattered from a bucket of this many elements (DeepSpeed reduce_bucket_size),
    # never below the largest single weight's gradient; None: a whole layer's (reducing_layers).
    reduce_bucket_params: float | None = Field(default=None, gt=0)
    # What one parameter all-gather moves: 'layer' (one collective for a block's parameters, FSDP's
    # unit) or 'module' (one per weight matrix, as DeepSpeed's coordinator fetches each submodule's
    # parameters in its own all_gather_coalesced call); with 'module' the gradients are reduce-scattered
    # in reduce_bucket_params buckets filled in backward order. Each collective pays its ring's latency.
    fetch_unit: Literal["layer", "module"] = "layer"
    # With 'module' fetching: after the running submodule's parameters arrive, the coordinator prefetches
    # the next parameters of its recorded trace until this many are in flight, always at least one
    # (stage3_prefetch_bucket_size), so a weight matrix larger than the bucket is fetched one ahead.
    prefetch_bucket_params: float = Field(default=5.0e7, gt=0)
    # A submodule's gathered parameters are kept after it runs when the trace uses them again within
    # this many parameters (stage3_max_reuse_distance), e.g. between a recomputed forward and its
    # backward; otherwise they are released and gathered again.
    max_reuse_params: float = Field(default=1.0e9, ge=0)
    # 'separate': gathers and reduce-scatters run on their own communicators and overlap the compute as
    # far as their sizes allow (the layer takes the longer of its compute and transfers). 'shared': both
    # go through one process group, hence one NCCL stream that runs them in the order the host issued
    # them (a gather queued behind a reduce-scatter that waits for its gradient), played per submodule
    # by train/zero3_stream.py (needs fetch_unit 'module').
    collective_stream: Literal["separate", "shared"] = "separate"
    # With 'shared': the CUDA stream priority of the collective kernels against the compute's. 'normal' (PyTorch
    # ProcessGroupNCCL's default): the GPU dispatches a running compute kernel's remaining blocks before a
    # collective that arrives meanwhile, so the collective starts when that kernel ends; 'high': it takes the
    # first compute units that free up (counted as starting at once).
    collective_priority: Literal["normal", "high"] = "normal"
    # With 'shared': each reduce bucket is divided by the data-parallel size in a pass of its own on the reduce
    # stream before its reduce-scatter (DeepSpeed's pre-divide): a memory-bound kernel that holds the compute
    # units while it runs and waits for the previous reduce-scatter; False: the averaging is folded into the
    # reduction or into the kernel producing the gradient.
    grad_predivide: bool = False
    # With 'shared': per weight matrix of a dense layer (forward order), the module calls before it that
    # gather nothing but still run the coordinator's hooks, hence a prefetch (norms, dropouts, containers:
    # the model code's module tree); missing entries are 0.
    hooks_before_weights: tuple[int, ...] = ()
    # The stack can shard over a subgroup of the data-parallel ranks and replicate across subgroups (HSDP, plan
    # dp_shard); the plan search tries it only where this is true.
    hybrid: bool = True
    # Parameters of fewer elements than this are persistent (DeepSpeed stage3_param_persistence_threshold):
    # never gathered per submodule, but after every optimizer step each one is all-gathered by its own
    # collective, the device synchronising at the end (stage3.py _post_step -> _allgather_params_coalesced).
    # None: no such re-gather (FSDP gathers norms and biases with their block).
    persistence_threshold_params: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _shared_needs_modules(self) -> Sharding:
        if self.collective_stream == "shared" and self.fetch_unit != "module":
            raise ValueError(
                "sharding.collective_stream 'shared' is played one submodule (weight matrix) at a time and needs "
                f"sharding.fetch_unit 'module', got fetch_unit '{self.fetch_unit}'; set fetch_unit: module or "
                "collective_stream: separate")
        return self


class Comm(_Frozen):
    """Communication defaults of the stack."""

    # Dtype of the main gradients and their data-parallel reduction when the plan does not say.
    grad_reduce: Literal["fp32", "bf16"] = "fp32"
    # Sequence parallelism with TP, and chunked TP-communication overlap, when the plan does not say.
    sequence_parallel: bool = True
    tp_overlap: bool = False
    # Context parallelism: ring P2P of K/V blocks, one all-gather of K/V, or Ulysses all-to-all of heads.
    context_parallel: Literal["ring", "allgather", "ulysses"] = "ring"
    # MoE token dispatch: all-to-all, all-gather (every EP rank gets every token), a deduplicating
    # dispatcher (DeepEP / HybridEP style), or HybridEP with the permutation fused into its kernels (hybridep).
    moe_dispatcher: Literal["alltoall", "allgather", "deepep", "hybridep"] = "deepep"
    # The allgather dispatcher's row selection by index, when it runs as separate eager ops: passes
    # (16-bit, rows x hidden) over the rows routed to this rank and over all gathered tokens, forward
    # and backward: [forward routed, forward gathered, backward routed, backward gathered]. None: the
    # fused permutation (two passes over the routed rows each way).
    allgather_index_passes: tuple[float, float, float, float] | None = None
    # A MoE layer's shared experts run beside the routed experts' dispatch and combine (Megatron-Core's
    # overlapped shared expert, DeepEP flex paths) or only after the routed output is combined, on the
    # same stream, with the dispatcher's collectives synchronous (false): nothing hides those collectives.
    shared_expert_overlap: bool = True
    # Compute units (SMs / AI cores) collective kernels hold while they run beside compute; the
    # overlapped compute runs on the rest. None: the chip's efficiency profile decides.
    comm_units: int | None = None
    # Context parallelism's merge of the per-step attention outputs, in bytes of HBM traffic per
    # attention-output element per CP step after the first, forward and backward (PyTorch's
    # context_parallel merges outputs and log-sum-exps in fp32 and accumulates dQ, dK, dV in fp32;
    # 0: the merge is fused into the attention kernel, as Megatron/TE and MindSpeed do).
    cp_merge_bytes: float = Field(default=0.0, ge=0)
    cp_merge_backward_bytes: float = Field(default=0.0, ge=0)
    # Bytes per element of the key/value gradients that context parallelism sends back (2: 16-bit,
    # reduce-scattered; 4: fp32, as PyTorch's ring rotates its fp32 dK/dV accumulators).
    cp_grad_bytes: float = Field(default=2.0, gt=0)
    # The backward all-gathers the keys and values again (PyTorch's SDPA backward gets only the local shards).
    cp_backward_regather: bool = False
    # Whether the context-parallel transfers run beside the attention (the plan's cp_overlap default): false
    # where the attention is traced and compiled, so each functional collective is waited where it is issued.
    cp_overlap: bool = True
    # Data parallelism's overlap (the plan's overlap_grad_reduce / overlap_param_gather defaults): Megatron's
    # --overlap-grad-reduce and --overlap-param-gather, which the stack's scripts pass or leave out.
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True


class Memory(_Frozen):
    """Device memory the stack holds besides the model's tensors (bytes, fractions)."""

    # Bytes held outside the allocator's tensors: CUDA/CANN context, library workspaces, NCCL/HCCL buffers.
    reserve_bytes: float = Field(default=2.0 * 2**30, ge=0)
    # Caching-allocator fragmentation on dynamic memory (activations and step transients), a fraction.
    fragmentation: float = Field(default=0.05, ge=0, le=1)
    # Bytes per logit the loss's backward allocates beyond what its forward saved (0: a fused
    # cross-entropy writes its gradient in place; eager F.cross_entropy on fp32 logits: 8).
    loss_workspace_bytes_per_logit: float = Field(default=0.0, ge=0)
    # What 'selective' recomputation keeps: 'modules' (Megatron's --recompute-modules: checkpointed
    # modules drop their internals, everything else is stored) or 'op' (torchtitan's op-level
    # selective AC: each block keeps only its input, every second matmul's output and the attention
    # kernel's outputs; everything else is recomputed in the backward).
    selective_policy: Literal["modules", "op"] = "modules"
    # Chip generations on which the stack's attention runs a kernel its op-level policy does not save
    # (its output is then recomputed like any other op).
    op_policy_unsaved_attention: tuple[str, ...] = ()
    # The recomputed forward runs only the operators whose outputs the backward reads (JAX remat: the
    # staged recomputation is dead-code-eliminated, so a checkpointed MLP does not re-run its down
    # projection, whose output only feeds the residual add); False: the whole checkpointed module or
    # layer re-runs (torch.utils.checkpoint, Megatron's recompute).
    recompute_reads_only: bool = False
    # Bytes per logit of the loss's backward beyond what its forward saved when the logits are
    # vocab-sharded over TP (PyTorch's loss_parallel computes log-softmax and NLL backward together
    # from fp32 temporaries); None: the same as loss_workspace_bytes_per_logit.
    tp_loss_workspace_bytes_per_logit: float | None = Field(default=None, ge=0)
    # MindSpeed --reuse-fp32-param: the fp32 master weights share memory with the bf16 weights (stored
    # as bf16 + a 16-bit residual), saving 2 bytes per (DP-sharded) parameter. The plan's default.
    reuse_fp32_param: bool = False
    # MindSpeed --swap-optimizer: optimizer states live in host memory outside the step, which brings
    # them back in swap_optimizer_times parts (--swap-optimizer-times, default 16). swap_optimizer: the plan's default.
    swap_optimizer: bool = False
    swap_optimizer_times: int = Field(default=16, ge=1)
    # Optimizer CPU offload (plan offload_optimizer): whether the offloaded share's fp32 main gradients leave
    # the device too (DeepSpeed ZeRO-Offload copies each reduced gradient partition into a host buffer;
    # Megatron-Core's HybridDeviceOptimizer keeps the DDP grad buffer and copies it to pinned host grads), and
    # how the copies and the CPU step overlap: 'none' (gradients down, CPU step, parameters up, one after
    # the other after the backward), 'backward' (the gradient copies run during the backward; the CPU step
    # and the parameter copies follow it) or 'pipelined' (all three in chunks at the pace of the slowest:
    # Megatron's --overlap-cpu-optimizer-d2h-h2d).
    optimizer_offload_grads: bool = False
    optimizer_offload_overlap: Literal["none", "backward", "pipelined"] = "none"
    # With 'backward': each reduced gradient partition's copy to the host is synchronous, so the host (which
    # issues the backward's kernels) waits for that bucket's reduce-scatter and the copy before going on:
    # the reduce-scatters no longer hide under the backward (played by train/zero3_stream.py).
    optimizer_offload_blocking_copy: bool = False
    # CPU checkpointing (plan checkpoint_in_cpu): how the stack moves the checkpointed inputs of fully
    # recomputed layers to host memory and back. 'none': it cannot; 'blocking': a synchronous copy on the
    # compute stream each way (DeepSpeed's CheckpointFunction: ``.to('cpu')`` before the layer's forward,
    # back to the device before its recomputation), so the host waits for the device at every layer.
    cpu_checkpointing: Literal["none", "blocking"] = "none"


class Stack(_Frozen):
    """One training stack. ``sources`` names the public code or document behind each behaviour."""

    id: str
    name: str
    era: str = ""
    kernels: Kernels = Kernels()
    sharding: Sharding = Sharding()
    comm: Comm = Comm()
    memory: Memory = Memory()
    # Stacks of one family run the same kernel libraries the same way (Megatron/TE, eager PyTorch,
    # MindSpeed on torch_npu, XLA) and share calibrated efficiencies (catalog/calibration.yaml,
    # fitted.families); a family without fits of its own runs at the chip's default (Megatron-fitted) ones.
    calibration_family: str = "megatron"
    # Hidden and attention dropout of a GPT-style (non-gated) model when the run does not state it
    # (Megatron-LM's --hidden-dropout / --attention-dropout default 0.1).
    dropout: float = Field(default=0.1, ge=0, lt=1)
    # Default ZeRO stage of a plan on this stack (1: Megatron's distributed optimizer; 3: FSDP FULL_SHARD).
    zero: int = Field(default=1, ge=0, le=3)
    sources: dict[str, str] = Field(default_factory=dict)


@lru_cache(maxsize=1)
def _catalog() -> dict[str, dict]:
    docs: dict[str, dict] = {}
    for path in sorted(catalog_dir("stacks").glob("*.yaml")):
        doc = read_yaml(path) or {}
        if not isinstance(doc, dict) or "id" not in doc:
            raise WindtunnelError(f"Catalog stack file '{path}' must be a mapping with an 'id'.")
        docs[str(doc["id"])] = doc
    return docs


def eager_rope(rope: str, model) -> bool:
    """Whether ``model``'s rotary embedding runs as eager ops under a stack whose kernels.rope is ``rope``:
    always for 'eager'; for 'fused_unscaled' when the model scales its RoPE at run time (YaRN) outside multi-head
    latent attention (Megatron-Core arguments.py and Megatron-Bridge utils/fusions.py turn apply_rope_fusion off
    unless position_embedding_type is 'rope')."""
    if rope == "eager":
        return True
    return rope == "fused_unscaled" and model.rope_scaling != "none" and model.mla is None


def stack_names() -> list[str]:
    """Ids of the built-in stacks."""
    return sorted(_catalog())


def _resolve(doc: dict, docs: dict[str, dict], where: str, seen: tuple[str, ...] = ()) -> dict:
    parent = doc.get("inherits")
    body = {k: v for k, v in doc.items() if k != "inherits"}
    if parent is None:
        return body
    if parent in seen:
        raise WindtunnelError(f"Stack '{doc.get('id')}' ({where}) inherits itself through {' -> '.join(seen)}.",
                              field="inherits")
    if parent not in docs:
        raise WindtunnelError(f"Stack '{doc.get('id')}' ({where}) inherits unknown stack '{parent}'; built-in stacks: "
                              f"{choices_text(docs)}.", field="inherits")
    base = _resolve(docs[parent], docs, where, (*seen, str(parent)))
    sources = {**base.get("sources", {}), **body.get("sources", {})}
    merged = deep_merge(base, body)
    merged["sources"] = sources
    return merged


def _validate(data: dict, where: str) -> Stack:
    try:
        return Stack.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise WindtunnelError(f"Stack {where}: field '{loc}' {first['msg'].lower()} (got {first.get('input')!r}). "
                              "See src/windtunnel/catalog/stacks/megatron.yaml for the schema.", field=loc) from exc


@lru_cache(maxsize=64)
def _load_named(name: str) -> Stack:
    docs = _catalog()
    return _validate(_resolve(docs[name], docs, f"'{name}'"), f"'{name}'")


def load_stack(name_or_path: str | Stack | None) -> Stack:
    """A built-in stack by id (``megatron``, ``pytorch-fsdp``, ``mindspeed``, ...) or a stack YAML file."""
    if isinstance(name_or_path, Stack):
        return name_or_path
    name = (DEFAULT_STACK if name_or_path is None else str(name_or_path)).strip()
    docs = _catalog()
    if name in docs:
        return _load_named(name)
    found = read_mapping_file(name, what="Stack", field="framework", expected="with id, name and stack fields")
    if found is not None:
        doc, path = found
        doc = {"id": path.stem, "name": path.stem, **doc}
        return _validate(_resolve(doc, docs, f"file '{path}'"), f"file '{path}'")
    raise WindtunnelError(
        f"Unknown framework '{name}' (field 'framework'): use a built-in stack ({choices_text(docs)})"
        + did_you_mean(name, docs) + " or a stack YAML file (path ending in .yaml).", field="framework")


def stack_path(name: str) -> Path:
    """The catalog file of a built-in stack."""
    return catalog_dir("stacks", f"{name}.yaml")


# Plan fields whose default is the stack's when the plan does not set them.
_PLAN_DEFAULTS = {
    "zero": lambda stack: stack.zero,
    "grads": lambda stack: stack.comm.grad_reduce,
    "sp": lambda stack: stack.comm.sequence_parallel,
    "tp_overlap": lambda stack: stack.comm.tp_overlap,
    "dispatcher": lambda stack: stack.comm.moe_dispatcher,
    "cp_algo": lambda stack: stack.comm.context_parallel,
    "cp_overlap": lambda stack: stack.comm.cp_overlap,
    "overlap_grad_reduce": lambda stack: stack.comm.overlap_grad_reduce,
    "overlap_param_gather": lambda stack: stack.comm.overlap_param_gather,
    "expert_gemm": lambda stack: stack.kernels.expert_gemm,
    "grad_accum_fusion": lambda stack: stack.kernels.grad_accum_fusion,
    "embedding_lookup": lambda stack: stack.kernels.embedding_lookup,
    "reuse_fp32_param": lambda stack: stack.memory.reuse_fp32_param,
    "swap_optimizer": lambda stack: stack.memory.swap_optimizer,
}


def with_stack_defaults(plan, stack: Stack):
    """The plan with the stack's defaults for the fields it leaves unset (ZeRO stage, gradient dtype,
    sequence parallelism, TP overlap, MoE dispatcher, context-parallel algorithm); fields the plan sets are kept."""
    unset = {name: default(stack) for name, default in _PLAN_DEFAULTS.items() if name not in plan.model_fields_set}
    if not unset:
        return plan
    updated = plan.model_copy(update=unset)
    # model_copy keeps the original fields_set, so the stack's values stay "unset" (a later stack may replace them).
    return updated

"""Per-device memory model: weights, gradients, optimizer states, activations, buffers, reserve.

Mixed-precision Adam as in Megatron-LM: 16-bit weights (2 bytes/param), fp32 main gradients
(4 bytes/param), fp32 master weights and two Adam moments (12 bytes/param). The plan may keep the
main gradients and the moments in bf16 (2 bytes each instead of 4). ZeRO stage 1 shards the
optimizer states over the data-parallel group, stage 2 also the gradients, stage 3 also the
weights (Rajbhandari et al. 2020). Activations are counted per module as the stack runs them
(:func:`layer_saved_bytes`: torchtitan's op-level selective checkpointing, a tensor two GEMMs save
kept once, fine-grained offloading to the host), per pipeline rank in its schedule's order
(:func:`interleaved_peak`; DualPipe's two stages per rank, :func:`dualpipe_in_flight`); a SwiGLU input
may be kept in FP8 (plan act_fp8_store); the stack's memory features (MindSpeed's reuse-fp32-param and
swap-optimizer) change what the model states occupy (:func:`device_states`). Units: bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from windtunnel.specs.modules import OFFLOAD_MODULES
from windtunnel.train.zero3 import layer_weights

WEIGHT_BYTES = 2.0
GRAD_BYTES = 4.0
MASTER_BYTES = 4.0
OPTIMIZER_BYTES = MASTER_BYTES + 2 * 4.0
GRAD_BUCKET_ELEMENTS = 2 * 40e6      # Megatron DDP: two in-flight 40M-element buckets
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0}
FRAMEWORK_RESERVE_BYTES = 2.0 * 2**30  # CUDA/CANN context, cuBLAS workspace, NCCL/HCCL buffers
FRAGMENTATION = 1.05                 # caching-allocator fragmentation on dynamic (activation) memory


@dataclass
class ParamShare:
    """Parameters held by one device, split by the data-parallel group that shards them."""

    dense: float = 0.0      # sharded by ZeRO over the dense DP group
    expert: float = 0.0     # sharded by ZeRO over the expert DP group
    dense_dp: int = 1
    expert_dp: int = 1

    @property
    def total(self) -> float:
        return self.dense + self.expert


@dataclass
class MemoryBreakdown:
    """Bytes per category on one device at its peak."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    buffers: float
    reserve: float
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.buffers + self.reserve

    def as_dict(self) -> dict[str, float]:
        return {
            "weights": self.weights, "gradients": self.gradients, "optimizer": self.optimizer,
            "activations": self.activations, "buffers": self.buffers, "reserve": self.reserve,
        }


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of the model states: 16-bit weights, main gradients, optimizer state."""

    weights: float = WEIGHT_BYTES
    grads: float = GRAD_BYTES
    optimizer: float = OPTIMIZER_BYTES
    # Share of the sharded (ZeRO >= 2) main gradients held in host memory instead (optimizer CPU offload).
    grads_on_host: float = 0.0

    @classmethod
    def of(cls, grads: str = "fp32", moments: str = "fp32") -> StateBytes:
        """From the dtypes of the main gradients and of Adam's two moments (fp32 master weights)."""
        return cls(grads=DTYPE_BYTES[grads], optimizer=MASTER_BYTES + 2 * DTYPE_BYTES[moments])

    def optimizer_traffic(self, fp32_traffic: float) -> float:
        """HBM bytes per owned parameter of one Adam step, from the catalog's all-fp32 figure: 16-bit
        gradients are read with fewer bytes, 16-bit moments are read and written with fewer."""
        return fp32_traffic - (GRAD_BYTES - self.grads) - 2 * (OPTIMIZER_BYTES - self.optimizer)

    def sharded(self, dense, dense_dp, expert, expert_dp, zero) -> tuple:
        """(weights, gradients, optimizer) bytes of ``dense`` and ``expert`` parameters sharded by
        ZeRO over their data-parallel groups (stage 1: optimizer, 2: + gradients, 3: + weights).
        Scalars or numpy arrays (the plan search screens many plans at once)."""
        def part(per_param: float, stage: int):
            return per_param * (dense / np.where(zero >= stage, dense_dp, 1)
                                + expert / np.where(zero >= stage, expert_dp, 1))
        grads = part(self.grads, 2) * np.where(zero >= 2, 1.0 - self.grads_on_host, 1.0)
        return part(self.weights, 3), grads, part(self.optimizer, 1)

    def bucket_bytes(self) -> float:
        """Megatron DDP's in-flight gradient buckets (ZeRO 0-2)."""
        return GRAD_BUCKET_ELEMENTS * self.grads


def device_states(states: StateBytes, plan, memory) -> StateBytes:
    """The model states a device holds at its peak under the plan's memory features (``memory``:
    the stack's Memory section). MindSpeed --reuse-fp32-param (docs/features/reuse-fp32-param.md)
    stores the fp32 master copy as the bf16 weights plus a 16-bit residual: the master's 4 bytes per
    parameter become 2, a saving of sizeof(bf16) x parameters / DP with the distributed optimizer.
    MindSpeed --swap-optimizer (docs/features/swap-optimizer.md) keeps the optimizer states (master
    weights and moments) in host memory during forward and backward and brings them back in
    ``swap_optimizer_times`` parts for the step: 1/times of them is on the device at once. Optimizer CPU
    offload (plan offload_optimizer) moves its share to the host (train.offload_optimizer.device_share)."""
    optimizer = states.optimizer
    if plan.reuse_fp32_param:
        optimizer -= MASTER_BYTES - WEIGHT_BYTES
    if plan.swap_optimizer:
        optimizer /= memory.swap_optimizer_times
    from windtunnel.train.offload_optimizer import device_share  # it builds on this module's StateBytes

    kept = StateBytes(weights=states.weights, grads=states.grads, optimizer=optimizer)
    return device_share(kept, getattr(plan, "offload_optimizer", 0.0), memory)


def state_bytes(share: ParamShare, zero: int, states: StateBytes = StateBytes()) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes for a device's parameters under a ZeRO stage."""
    return tuple(float(b) for b in states.sharded(share.dense, share.dense_dp, share.expert, share.expert_dp, zero))


def device_memory(share: ParamShare, zero: int, activation_bytes: float, buffer_bytes: float,
                  *, zero3_working_bytes: float = 0.0, states: StateBytes = StateBytes(),
                  reserve_bytes: float = FRAMEWORK_RESERVE_BYTES, fragmentation: float = FRAGMENTATION - 1.0,
                  persistent_weights: bool = True) -> MemoryBreakdown:
    """Peak bytes on one device: model states, activations (with the allocator's ``fragmentation``,
    a fraction), buffers, the stack's ``reserve_bytes``. ``persistent_weights`` False: under ZeRO-3
    the sharded fp32 parameters are the optimizer's master copy and no sharded 16-bit copy is kept
    (FSDP), so 16-bit weights exist only as gathered buffers (``zero3_working_bytes``)."""
    weights, grads, optimizer = state_bytes(share, zero, states)
    if not persistent_weights:
        weights = 0.0
    buffers = buffer_bytes + (states.bucket_bytes() if zero < 3 else 0.0) + zero3_working_bytes
    return MemoryBreakdown(
        weights=weights, gradients=grads, optimizer=optimizer,
        activations=activation_bytes * (1.0 + fragmentation), buffers=buffers, reserve=reserve_bytes,
    )


# ---- one training step's peak -----------------------------------------------------------------

LAYER_MODULES = ("dense", "moe")


@dataclass
class StepMemory:
    """The worst pipeline rank's peak memory of a step, and the host memory offloading needs (bytes)."""

    rank: int
    memory: MemoryBreakdown
    host_bytes: float


# ---- what a layer keeps for its backward -------------------------------------------------------

def _mm_outputs(op, model) -> list[float]:
    """Output bytes of each framework matmul (``aten.mm``) a GEMM operator stands for, in forward order.
    The graph fuses Q, K and V into one GEMM and a GLU's gate and up projections into another; an
    eager PyTorch block (torchtitan models/llama/model.py) runs them as separate nn.Linear calls:
    ``self.wq(x), self.wk(x), self.wv(x)`` and ``self.w2(F.silu(self.w1(x)) * self.w3(x))``.
    Grouped expert GEMMs (``torch._grouped_mm``) are not ``aten.mm``: none is returned for them."""
    from windtunnel.graph.transformer import ACT_BYTES

    if op.count > 1 or op.name.startswith("experts.") or not op.shape:
        return []
    m, n = op.shape[0], op.shape[1]
    out = ACT_BYTES * m * n
    if op.name == "qkv_proj":
        kv = model.kv_heads or model.heads
        return [out * share / (model.heads + 2 * kv) for share in (model.heads, kv, kv)]
    if op.name.endswith("up_proj") and not op.name.startswith(("q_", "kv_")) and model.activation == "swiglu":
        return [out / 2, out / 2]
    return [out]


def op_checkpoint_saved_bytes(graph, model, cp: int = 1, tp: int = 1, *, save_attention: bool = True) -> float:
    """Bytes one layer keeps under torchtitan's op-level selective activation checkpointing
    (activation_checkpoint.mode 'selective', selective_ac_option 'op'; torchtitan
    parallelize_llama.py _apply_ac_to_transformer_block at 9dec370 and e7c0cae): the block is
    checkpoint-wrapped, so its input is kept; the policy marks MUST_SAVE the outputs of the ops in
    ``_save_list`` (aten.mm except every second one, counted per block in forward order; the SDPA
    flash/efficient kernels, whose outputs are the attention output and its fp32 log-sum-exp; TP's
    reduce-scatters) and PREFER_RECOMPUTE everything else, which the backward re-runs. The list's
    max/abs entries (float8 amax) are not charged: torchtitan's published Table 1 float8 row (76.8 GiB)
    equals the bf16 compiled row (77.0 GiB). ``save_attention`` False: the SDPA kernel that runs is not
    in the list (cuDNN attention), so its output is recomputed."""
    from windtunnel.graph.transformer import ACT_BYTES

    if not graph.ops:
        return 0.0
    first = graph.ops[0]
    saved = first.saved_bytes if first.kind == "memory" else 0.0  # the checkpointed block's input
    count = 0
    for op in graph.ops:
        if op.kind == "gemm":
            for out in _mm_outputs(op, model):
                count += 1
                if count % 2 == 1:
                    saved += out
        elif op.kind == "attention" and op.shape and save_attention:
            rows, q_len, _, head_dim = op.shape[:4]
            steps = (cp - 1) if op.name.endswith("_ring") else 1  # each ring step's outputs are saved
            saved += steps * (ACT_BYTES * rows * q_len * head_dim + 4.0 * rows * q_len)
        elif op.kind == "reduce_scatter" and op.group == "tp":
            saved += op.bytes_moved / tp  # the reduce-scatter's output: the full buffer over the TP group
    return saved


def offloaded_module_bytes(builder, kind: str, mode: str) -> float:
    """Bytes of one layer's saved activations (per micro-batch) that the plan's ``offload_modules``
    send to host memory; what recomputation already drops is not saved, so not offloaded."""
    from windtunnel.train.layers import recompute_selection

    modules = builder.plan.offload_modules
    if not modules or kind not in LAYER_MODULES or mode == "full":
        return 0.0
    graph = builder.forward_graphs[kind]
    names = {name for module in modules.split("+") for name in OFFLOAD_MODULES[module]}
    dropped = recompute_selection(graph, mode)[1] if mode.startswith("selective") else set()
    return sum(op.saved_bytes * _stored_fraction(builder, op) for i, op in enumerate(graph.ops)
               if op.name in names and i not in dropped)


def _stored_fraction(builder, op) -> float:
    """Fraction of an operator's saved bytes kept: the plan's act_fp8_store keeps a SwiGLU's 16-bit
    input in FP8, 1 byte per element (Megatron-Core fused_bias_swiglu.py, fp8_input_store: the input is
    cast to float8_e4m3fn in the forward and back before the backward), so half of it."""
    from windtunnel.graph.transformer import ACT_BYTES

    if (builder.plan.act_fp8_store and op.kind == "memory" and op.name.endswith(".act")
            and builder.job.model.activation == "swiglu"):
        return 1.0 / ACT_BYTES
    return 1.0


def fp8_stored_saving(builder, graph, mode: str) -> float:
    """Bytes a layer's saved activations lose to act_fp8_store (:func:`_stored_fraction`) under a
    recompute mode; a fully recomputed layer keeps only its input, so nothing."""
    from windtunnel.train.layers import recompute_selection

    if not builder.plan.act_fp8_store or mode == "full" or not graph.ops:
        return 0.0
    dropped = recompute_selection(graph, mode)[1] if mode.startswith("selective") else set()
    return sum(op.saved_bytes * (1.0 - _stored_fraction(builder, op)) for i, op in enumerate(graph.ops)
               if i not in dropped)


def layer_saved_bytes(builder, kind: str, mode: str, *, offloaded: bool = True) -> float:
    """Activation bytes a module keeps for its backward under a recompute mode (per micro-batch), as
    the builder's stack runs that mode: a stack whose ``memory.selective_policy`` is 'op' keeps what
    torchtitan's op-level policy saves (:func:`op_checkpoint_saved_bytes`) when a transformer layer
    recomputes selectively; otherwise the operator graph's accounting
    (:func:`windtunnel.train.layers.saved_activation_bytes`). ``offloaded``: without what the plan's
    offload_modules keep in host memory (the bytes that stay on the device)."""
    from windtunnel.train.layers import saved_activation_bytes

    graph = builder.forward_graphs[kind]
    if (kind in LAYER_MODULES and mode.startswith("selective")
            and builder.stack.memory.selective_policy == "op"):
        memory = builder.stack.memory
        return op_checkpoint_saved_bytes(graph, builder.job.model, builder.plan.cp, builder.plan.tp,
                                         save_attention=builder.chip.generation not in memory.op_policy_unsaved_attention)
    saved = saved_activation_bytes(graph, mode) - shared_input_bytes(graph, mode) - fp8_stored_saving(builder, graph, mode)
    return saved - offloaded_module_bytes(builder, kind, mode) if offloaded else saved


def shared_input_bytes(graph, mode: str) -> float:
    """Bytes the operator graph counts twice: 16-bit GEMMs that read the same tensor (the same
    producer) each list it as their saved input, but autograd keeps one tensor however many nodes
    save it (MLA's q and kv down-projections both read the normed hidden state; an MoE layer's router
    and shared experts both read the normed MoE input; DeepSeek-V3 report Fig. 2, Megatron-Core
    multi_latent_attention.py and moe_layer.py). FP8 GEMMs quantize their input each for itself
    (Transformer Engine saves each Linear's own FP8 copy), so those copies are distinct."""
    from windtunnel.train.layers import recompute_selection

    if mode == "full" or not graph.ops:
        return 0.0
    dropped = recompute_selection(graph, mode)[1] if mode.startswith("selective") else set()
    readers: dict[tuple[int, ...], list[float]] = {}
    for index, op in enumerate(graph.ops):
        if op.kind == "gemm" and op.precision != "fp8" and op.saved_bytes > 0 and index not in dropped and op.deps:
            readers.setdefault(op.deps, []).append(op.saved_bytes)
    return sum(sum(saved) - max(saved) for saved in readers.values() if len(saved) > 1)


def _layer_transient(builder, kind: str, mode: str) -> float:
    """Bytes a layer holds beyond its saved activations while its backward runs: a fully recomputed
    layer re-materialises its whole forward (Korthikanti et al. 2022 Sec. 4: 'only the input of each
    layer is stored, and the activations of one layer are recomputed during its backward'); a
    selectively recomputed one, the part it dropped."""
    if mode == "none":
        return 0.0
    cache = builder.__dict__.setdefault("_transient_bytes", {})  # memo per builder: same value, computed once
    if (kind, mode) not in cache:
        cache[(kind, mode)] = max(0.0, layer_saved_bytes(builder, kind, "none", offloaded=False)
                                  - layer_saved_bytes(builder, kind, mode, offloaded=False))
    return cache[(kind, mode)]


def _loss_transient(builder) -> float:
    """Bytes of the loss's backward beyond what the forward saved: the stack's workspace per logit
    (an eager fp32 cross entropy allocates the fp32 gradients of the log-probabilities and of the
    logits beside the saved log-probabilities; with vocab-sharded logits, the stack's TP figure)."""
    shard, model, memory = builder.shard, builder.job.model, builder.stack.memory
    logits = shard.tokens * model.vocab / builder.plan.tp
    per_logit = memory.loss_workspace_bytes_per_logit
    if builder.plan.tp > 1 and memory.tp_loss_workspace_bytes_per_logit is not None:
        per_logit = memory.tp_loss_workspace_bytes_per_logit
    return per_logit * logits


def _head_freed(builder, chunk) -> float:
    """Bytes of one micro-batch's saved activations gone by the time a layer of ``chunk`` runs its
    backward: the output head's (final norm input, logits or log-probabilities of the loss). Autograd
    runs the loss's and the head's backward first and frees what they saved before the last layer's
    backward begins, so a layer's transient (a fully recomputed layer's re-materialised forward) never
    coincides with that micro-batch's head activations. Zero for a chunk without the head."""
    if "head" not in chunk.layers:
        return 0.0
    return builder._saved[("head", "none")]  # what _cost_chunk kept for the head


def interleaved_peak(chunk_bytes: list[float], pp: int, rank: int, micro_batches: int, *,
                     pair_layer: float | None = None) -> float:
    """Peak activation bytes one rank holds under Megatron's interleaved 1F1B schedule, its model
    chunks holding ``chunk_bytes`` per micro-batch. Megatron-Core schedules.py
    (forward_backward_pipelining_with_interleaving): forwards run in the order of get_schedule_table,
    groups of ``microbatch_group_size_per_vp_stage`` (default: the pipeline size) micro-batches on
    chunk 0, then chunk 1, ...; backwards in the same order with the chunks reversed; the rank runs
    (pp - rank - 1) * 2 + (vpp - 1) * group warm-up forwards, then alternates one forward and one
    backward. ``pair_layer``: the EP-overlap schedule (one layer's bytes): one more warm-up forward, then each
    forward beside a backward layer by layer, so a pair holds one layer beyond what it starts with."""
    vpp = len(chunk_bytes)
    extra = 0 if pair_layer is None else 1
    table = [chunk for start in range(0, micro_batches, pp) for chunk in range(vpp)
             for _ in range(start, min(start + pp, micro_batches))]
    total = len(table)
    warmup = min(total, (pp - rank - 1) * 2 + (vpp - 1) * pp + extra)
    held = peak = 0.0
    forwards = 0
    for _ in range(warmup):
        held += chunk_bytes[table[forwards]]
        forwards += 1
        peak = max(peak, held)
    for backwards in range(total):
        if forwards < total:
            step = chunk_bytes[table[forwards]]
            peak = max(peak, held + (step if pair_layer is None else min(step, pair_layer)))
            held += step
            forwards += 1
        held -= chunk_bytes[vpp - 1 - table[backwards]]
    return peak


def dualpipe_in_flight(pp: int, rank: int, chunk: int, micro_batches: int) -> int:
    """Micro-batches whose activations a DualPipe rank holds at its peak in one of its two chunks:
    chunk 0 runs stage ``rank`` of the downward pipeline (the even micro-batches), chunk 1 stage
    pp-1-rank of the upward one (the odd ones). deepseek-ai/DualPipe dualpipe.py DualPipe.step() (at
    3da1bbe): a rank at distance h = min(rank, pp-1-rank) from an end runs 2(pp/2-h-1) forwards of
    its shallow stage (step 1), then h+1 forwards of each (step 2), then swaps one backward for one
    forward per direction (steps 3-4): at the peak the shallow stage (stage h) holds pp-h micro-batches
    and the deep one (stage pp-1-h) h+1, pp+1 in all (the README's 'PP+1' activations per device, in
    units of one stage's micro-batch); train/schedule.py's dualpipe caps each direction at the same
    1F1B counts. Each direction holds at most the micro-batches it carries."""
    carried = (micro_batches + 1) // 2 if chunk == 0 else micro_batches // 2
    return min(carried, pp - rank if chunk == 0 else rank + 1)


def step_memory(builder, chunks: dict) -> StepMemory:
    """Peak bytes per device of a training step, every pipeline rank, the worst one reported.

    ``builder`` is the step builder (plan, placement, stack, graphs, layer parameters); ``chunks``
    its costed model chunks keyed by (rank, chunk). Per rank: model states sharded by ZeRO; the saved
    activations of the micro-batches in flight; the largest transient of the step (a recomputed
    layer's re-materialised forward, or the loss's backward workspace on the last stage); under
    ZeRO-3/FSDP the gathered 16-bit parameters and the unsharded gradients being reduce-scattered;
    Megatron's gradient buckets below ZeRO-3; MoE dispatch buffers; the stack's reserve and
    allocator fragmentation (bytes).

    ZeRO-3 can need more than ZeRO-2, and then that is real: it saves 2 (1 - 1/dp) bytes of 16-bit
    weights per parameter of the rank (nothing at dp=1, 1 byte at dp=2; experts over their expert-DP
    group) and ZeRO-2's two gradient buckets, but holds a working set beside the shards: the running
    and prefetched layers' gathered 16-bit parameters (``gathered_layers`` x 2 bytes per parameter of
    one layer) and one layer's unsharded gradient, 16-bit and in the reduction dtype (6 bytes with
    fp32). With the default stack a rank gains from ZeRO-3 only when 2 (1 - 1/dp) P_rank exceeds about
    10 bytes per layer parameter less the buckets: at dp <= 2, or an expert-DP group of 1-2, a rank of
    few layers (deep pipelines, wide MoE layers) needs more (tests/test_properties_train.py).
    """
    from windtunnel.graph.transformer import ACT_BYTES
    from windtunnel.train.schedule import in_flight_micro_batches

    plan, model, job, stack = builder.plan, builder.job.model, builder.job, builder.stack
    states: StateBytes = device_states(builder.states, plan, stack.memory)
    sharding = stack.sharding
    worst: StepMemory | None = None
    host_bytes = 0.0
    for rank in range(plan.pp):
        mine = [c for (r, _), c in chunks.items() if r == rank]
        share = ParamShare(dense=sum(c.dense_params for c in mine), expert=sum(c.expert_params for c in mine),
                           dense_dp=builder.placement.dp.size, expert_dp=builder.placement.expert_dp.size)
        per_chunk = sum(c.activation_bytes for c in mine) / len(mine)
        in_flight = in_flight_micro_batches(builder.schedule, plan.pp, plan.vpp, rank, builder.micro_batches)
        # EP overlap: an overlapped pair holds one layer beyond the plain schedule's peak (schedule.py).
        pair_layer = max((layer_saved_bytes(builder, kind, mode) for c in mine
                          for kind, mode in zip(c.layers, c.modes, strict=True) if kind in LAYER_MODULES),
                         default=0.0) if plan.ep_overlap and builder.micro_batches > 1 else None
        activations = per_chunk * in_flight + (pair_layer or 0.0)
        if builder.schedule == "dualpipe":
            # Its two stages hold different micro-batch counts (the shallow one most); their sum is pp+1.
            activations = sum(c.activation_bytes * dualpipe_in_flight(plan.pp, rank, c.chunk, builder.micro_batches)
                              for c in mine)
        elif builder.schedule == "interleaved" and plan.vpp > 1 and len(mine) == plan.vpp:
            # Chunks differ (the first holds the embedding, the last the loss; uneven layer counts):
            # count what each holds at the rank's peak in the schedule's own order.
            held = [c.activation_bytes for c in sorted(mine, key=lambda c: c.chunk)]
            activations = interleaved_peak(held, plan.pp, rank, builder.micro_batches, pair_layer=pair_layer)
        host_bytes = max(host_bytes, sum(c.offloaded_bytes for c in mine) / len(mine) * in_flight)
        if plan.offload_modules:
            # Module offloading: the offloaded part of every micro-batch in flight is in host memory;
            # one layer's offloaded tensors are on the device while they travel (out after its
            # forward, back ahead of its backward).
            per_layer = [offloaded_module_bytes(builder, kind, mode) for c in mine
                         for kind, mode in zip(c.layers, c.modes, strict=True)]
            activations += max(per_layer, default=0.0)
            host_bytes = max(host_bytes, sum(per_layer) / len(mine) * in_flight)
        # The largest transient of the step: they happen at different times (the loss's backward
        # first, then each layer's), so only the largest adds to the saved activations.
        transient = 0.0
        for chunk in mine:
            freed = _head_freed(builder, chunk)
            for kind, mode in zip(chunk.layers, chunk.modes, strict=True):
                if kind in LAYER_MODULES:
                    transient = max(transient, _layer_transient(builder, kind, mode) - freed)
                elif kind == "head":
                    transient = max(transient, _loss_transient(builder))
        buffers = 0.0
        if model.moe and plan.ep > 1:
            tokens_local = builder.shard.sp_tokens * model.moe.topk * model.hidden * ACT_BYTES
            buffers += 2 * tokens_local * job.moe_imbalance
        zero3 = 0.0
        persistent_weights = True
        if plan.zero >= 3:
            dense, expert = builder.layer_params("moe" if model.moe else "dense")
            layer = dense + expert
            resharded = sharding.reshard_after_forward and (plan.pp == 1 or sharding.reshard_with_pp)
            # Gathered 16-bit parameters: the running layer and those prefetched, or, when blocks stay
            # unsharded between forward and backward, every block of this rank.
            gathered = sharding.gathered_layers * layer if resharded else max(share.total, sharding.gathered_layers * layer)
            largest = _largest_weight(model, plan)
            if sharding.max_live_params is not None and resharded:
                # Per-submodule fetching under a live-parameter cap (DeepSpeed stage3_max_live_parameters).
                gathered = min(gathered, max(largest, sharding.max_live_params))
            unsharded_grads = layer
            if sharding.reduce_bucket_params is not None:
                unsharded_grads = min(layer, max(largest, sharding.reduce_bucket_params))
            # The unsharded gradient of the layer being reduce-scattered: 16-bit, plus its copy in
            # the reduction dtype when that differs (FSDP MixedPrecision reduce_dtype=fp32).
            reducing = unsharded_grads * (WEIGHT_BYTES + (states.grads if states.grads != WEIGHT_BYTES else 0.0))
            zero3 = gathered * WEIGHT_BYTES + sharding.reducing_layers * reducing
            if plan.pp > 1 and not sharding.reduce_with_pp and builder.micro_batches > 1:
                # Unsharded gradients of every block of the rank, accumulated over the micro-batches.
                zero3 += share.total * states.grads
            persistent_weights = not sharding.fp32_sharded_params
        memory = device_memory(share, plan.zero, activations + transient, buffers, zero3_working_bytes=zero3,
                               states=states, reserve_bytes=stack.memory.reserve_bytes,
                               fragmentation=stack.memory.fragmentation, persistent_weights=persistent_weights)
        memory.parts.update({"saved_activations": activations, "transient": transient, "zero3_buffers": zero3})
        if worst is None or memory.total > worst.memory.total:
            worst = StepMemory(rank, memory, 0.0)
    # Optimizer CPU offload: the offloaded share of the optimizer shard each device owns lives on the host.
    from windtunnel.train.offload_optimizer import host_bytes_per_param, owned_params

    per_param = host_bytes_per_param(builder.states, getattr(plan, "offload_optimizer", 0.0))
    worst.host_bytes = host_bytes + (max(owned_params(builder, chunks, rank) for rank in range(plan.pp)) * per_param
                                     if per_param else 0.0)
    return worst


def _largest_weight(model, plan) -> float:
    """Parameters of a layer's largest single dense weight on one device (the unit DeepSpeed ZeRO-3 gathers whole)."""
    return max(layer_weights(model, plan.tp, moe=False))

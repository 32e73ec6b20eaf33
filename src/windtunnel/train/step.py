"""Simulate one training step: layer costs -> pipeline schedule on the event engine -> result.

One representative rank per pipeline stage is simulated (every DP/TP/CP/EP peer of a stage does
the same work), so the cost grows with pipeline depth and micro-batches, not with device count.
Times are seconds, memory bytes, FLOPs as counted in :mod:`windtunnel.train.flops`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from windtunnel.cost.efficiency import stack_efficiency
from windtunnel.graph.dag import DagModel
from windtunnel.graph.ops import OpGraph, backward_of
from windtunnel.graph.transformer import (
    ACT_BYTES,
    Sharding,
    captured,
    embedding_forward,
    head_forward,
    layer_forward,
    mtp_projection_forward,
)
from windtunnel.specs.bounds import MAX_EXACT_MICRO_BATCHES
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import Cluster
from windtunnel.specs.model import ModelSpec
from windtunnel.specs.plan import Plan, validate_plan
from windtunnel.specs.stack import DEFAULT_STACK, Stack, eager_rope, load_stack, with_stack_defaults
from windtunnel.train.assumptions import step_assumptions
from windtunnel.train.checks import check_training_result
from windtunnel.train.chunks import ChunkCosting
from windtunnel.train.flops import model_flops_per_token
from windtunnel.train.layers import (
    ZERO,
    LayerCoster,
    Played,
    backward_with_recompute,
    split_weight_gradients,
    with_main_grad_add,
)
from windtunnel.train.memory import WEIGHT_BYTES, StateBytes, step_memory
from windtunnel.train.offload_optimizer import check_host
from windtunnel.train.pipeline_play import PipelinePlay
from windtunnel.train.placement import Placement, dp_collective_time, place_plan
from windtunnel.train.result import TrainingResult
from windtunnel.train.steady import play_step
from windtunnel.train.zero3 import stream_exposed, zero3_layer_times

GIB = float(2**30)


@dataclass(frozen=True)
class TrainingJob:
    """What to simulate: a model on a cluster with a plan, sequence length (tokens) and global batch (sequences),
    trained by a stack (``framework``: a built-in stack id, a stack YAML path, or a Stack). ``flash_attention``
    and ``fused_loss`` override the stack's kernels when set (None: the stack's)."""

    model: ModelSpec
    cluster: Cluster
    plan: Plan
    seq_len: int
    global_batch: int
    flash_attention: bool | None = None
    fused_loss: bool | None = None
    framework: str | Stack = DEFAULT_STACK
    moe_imbalance: float = 1.1
    fitted_override: dict | None = None
    keep_trace: bool = False
    extra_assumptions: tuple[str, ...] = field(default_factory=tuple)
    dag: DagModel | None = None
    exact: bool = False  # play every micro-batch on the event engine (default: steady-state, train/steady.py)


def _dag_graphs(dag: DagModel, shard: Sharding, builder=None) -> dict[str, OpGraph]:
    """The forward graphs of an operator-DAG model, checked against the plan's micro-batch; an imported
    whole-model DAG (ONNX) is sharded and cut into the plan's pipeline stages (graph/graph_model.py)."""
    if not isinstance(dag, DagModel):
        from windtunnel.graph.graph_model import plan_graph_model

        return plan_graph_model(dag, builder)
    if dag.tokens_per_micro_batch != shard.tokens:
        raise WindtunnelError(
            f"Operator-DAG model '{dag.name}' is written for {dag.tokens_per_micro_batch} tokens per micro-batch "
            f"(field 'tokens_per_micro_batch'), but the plan gives mbs*seq_len/cp = {shard.tokens}; change mbs or "
            "seq_len, or rewrite the DAG's sizes.", field="tokens_per_micro_batch")
    graphs = {"dense": dag.graph("layer"), "embedding": dag.graph("first_stage"), "head": dag.graph("last_stage")}
    return {kind: captured(graph, [], shard.cuda_graphs) for kind, graph in graphs.items()}


class _StepBuilder(ChunkCosting, PipelinePlay):
    def __init__(self, job: TrainingJob) -> None:
        # The busiest expert (rank) receives at most every routed token: at most `experts` times its share.
        most = float(job.model.moe.experts) if job.dag is None and job.model.moe else 1.0e3
        if not 1.0 <= job.moe_imbalance <= most:
            raise WindtunnelError(f"Field 'moe_imbalance' is {job.moe_imbalance}: it is the busiest expert rank's tokens "
                                  f"over the balanced share, so it must be between 1 (perfectly balanced) and {most:g} "
                                  "(every routed token on one expert).", field="moe_imbalance")
        self.job = job
        model, cluster = job.model, job.cluster
        self.stack = stack = load_stack(job.framework)
        self.plan = validate_plan(with_stack_defaults(job.plan, stack), None if job.dag else model, cluster.devices,
                                  job.seq_len, job.global_batch, layers=model.layers)
        plan = self.plan
        self.chip = cluster.chip
        self.chip.peak(plan.precision)  # clear error if the chip lacks this precision
        self.placement: Placement = place_plan(plan, cluster)
        self.eff = stack_efficiency(self.chip, stack, job.fitted_override, plan.fp8_recipe)
        self.states = StateBytes.of(plan.grads, plan.moments)
        check_host(plan, self.chip)  # offloading needs the chip's host link and memory in the catalog
        if plan.checkpoint_in_cpu and stack.memory.cpu_checkpointing == "none":
            raise WindtunnelError(
                f"Plan field 'checkpoint_in_cpu' is true, but framework '{stack.id}' has no CPU checkpointing (its "
                "stack's memory.cpu_checkpointing is 'none'); use a stack that has it (deepspeed, megatron-deepspeed), "
                "offload_layers for Megatron's activation offloading, or checkpoint_in_cpu=false.",
                field="checkpoint_in_cpu")
        self.schedule = plan.pipeline_schedule
        self.mtp = 0 if job.dag is not None else (model.mtp_layers if plan.mtp is None else plan.mtp)
        self.chosen_layout = ""  # the layout layout=balanced chose (stage_split)
        self.micro_batches = job.global_batch // (plan.mbs * plan.dp)
        kernels = stack.kernels
        self.flash_attention = kernels.attention != "unfused" if job.flash_attention is None else job.flash_attention
        self.fused_loss = kernels.fused_loss if job.fused_loss is None else job.fused_loss
        self.shard = Sharding(tp=plan.tp, sp=plan.sequence_parallel, cp=plan.cp, ep=plan.ep, etp=plan.etp,
                              micro_batch=plan.mbs,
                              seq_len=job.seq_len, flash_attention=self.flash_attention, fused_loss=self.fused_loss,
                              attention_kernel=("unfused" if not self.flash_attention else
                                                "flash" if kernels.attention == "unfused" else kernels.attention),
                              fused_elementwise=kernels.fused_elementwise, linear_host_ops=kernels.linear_host_ops,
                              context_parallel=plan.cp_algo, cp_overlap=plan.cp_overlap, repeat_kv=kernels.repeat_kv,
                              sequential_costs=kernels.sequential_costs if plan.expert_gemm == "sequential" else None,
                              cp_merge=(stack.comm.cp_merge_bytes, stack.comm.cp_merge_backward_bytes),
                              cp_grad_bytes=stack.comm.cp_grad_bytes, cp_regather=stack.comm.cp_backward_regather,
                              gather_index_passes=stack.comm.allgather_index_passes,
                              shared_overlap=stack.comm.shared_expert_overlap,
                              mla_pad_v=kernels.mla_pad_v, embedding_matmul=plan.embedding_lookup == "matmul",
                              rope_eager=kernels.rope_eager_costs if eager_rope(kernels.rope, model) else None,
                              fp8_cast_fused=kernels.fp8_cast == "fused",
                              fp8_quant_launches=kernels.fp8_quant_launches(plan.precision, plan.fp8_recipe),
                              moe_imbalance=job.moe_imbalance if plan.ep > 1 else 1.0,  # ep=1: no rank waits for another
                              precision=plan.precision, dedup_dispatch=plan.dispatcher in ("deepep", "hybridep"),
                              permute_in_dispatch=plan.dispatcher == "hybridep",
                              fused_expert_mlp=plan.expert_gemm == "fused_mlp", fp8_attention=plan.fp8_attention,
                              gather_dispatch=plan.dispatcher == "allgather",
                              dispatch_bytes=1.0 if plan.fp8_dispatch else ACT_BYTES,
                              cuda_graphs="full" if kernels.host_issue == "compiled" else plan.cuda_graphs)
        self.coster = LayerCoster(cluster, self.placement, self.eff, plan.precision,
                                  tp_overlap=plan.tp_overlap and plan.sequence_parallel,
                                  single_queue=plan.device_connections == 1)
        self.dag_stages: list[list[str]] | None = None  # an imported DAG's modules per virtual stage
        self.dag_params: dict[str, tuple[float, float]] = {}
        if job.dag is not None:
            self.forward_graphs = _dag_graphs(job.dag, self.shard, self)
        else:
            self.forward_graphs = {"dense": layer_forward(model, self.shard, moe=False)}
            if model.moe:
                self.forward_graphs["moe"] = layer_forward(model, self.shard, moe=True)
            self.forward_graphs["embedding"] = embedding_forward(model, self.shard)
            self.forward_graphs["head"] = head_forward(model, self.shard)
            if self.mtp:
                self.forward_graphs["mtp_embedding"] = self.forward_graphs["embedding"]
                self.forward_graphs["mtp_proj"] = mtp_projection_forward(model, self.shard)
                self.forward_graphs["mtp_head"] = self.forward_graphs["head"]
        # Compute units NCCL/HCCL kernels hold while sharded-DP transfers run beside the compute.
        self.comm_units = stack.comm.comm_units or 0
        self._played: dict[tuple[str, str], Played] = {}
        self._backward: dict[tuple[str, str], list[OpGraph]] = {}
        self._saved: dict[tuple[str, str], float] = {}  # layer_saved_bytes by (kind, mode)

    # ---- parameters per device ----------------------------------------------------------------
    def layer_params(self, kind: str) -> tuple[float, float]:
        """(dense-sharded, expert) parameters of one layer/module on one device."""
        model, plan, dag = self.job.model, self.plan, self.job.dag
        if self.dag_stages is not None:
            return self.dag_params.get(kind, max(self.dag_params.values()))
        if dag is not None:
            return {"embedding": (dag.first_stage_params, 0.0), "head": (dag.last_stage_params, 0.0)}.get(
                kind, (dag.params_per_layer, dag.expert_params_per_layer))
        if kind == "embedding":
            return model.vocab * model.hidden / plan.tp, 0.0
        if kind == "head":
            return model.vocab * model.hidden / plan.tp + model.hidden, 0.0
        if kind == "mtp_embedding":
            # A copy of the shared embedding where the first stage's is not at hand (see _cost_chunk).
            return model.vocab * model.hidden / plan.tp, 0.0
        if kind == "mtp_head":
            return float(model.hidden), 0.0  # its own final norm; the output layer is the main head's
        if kind == "mtp_proj":
            return 2.0 * model.hidden * model.hidden / plan.tp + 2 * model.hidden, 0.0
        dense = model.attention_params() / plan.tp + 2 * model.hidden
        if kind == "moe":
            dense += model.shared_expert_params() / plan.tp + model.hidden * model.moe.experts
            expert = model.moe.experts // plan.ep * model.expert_params() / plan.etp
            return dense, expert
        return dense + model.mlp_params(model.ffn_hidden) / plan.tp, 0.0

    # ---- played costs -------------------------------------------------------------------------
    def zero3_times(self, kind: str) -> tuple[float, float]:
        """(forward, backward) seconds of ZeRO-3 gathers/reduce-scatters for one layer and micro-batch."""
        if self.plan.zero < 3:
            return 0.0, 0.0
        return zero3_layer_times(self, kind, WEIGHT_BYTES)

    def zero2_reduce(self, kind: str) -> float:
        """Seconds to reduce-scatter one layer's gradients after each micro-batch (ZeRO-2/3)."""
        if self.plan.zero < 2:
            return 0.0
        dense, expert = self.layer_params(kind)
        return self._dp_collective("reduce_scatter", dense, expert, ACT_BYTES)

    def _dp_collective(self, kind: str, dense: float, expert: float, bytes_per_param: float) -> float:
        """Seconds for one data-parallel collective of this device's ``dense`` and ``expert`` parameters (the
        full, unsharded buffers) at ``bytes_per_param`` (:func:`windtunnel.train.placement.dp_collective_time`)."""
        return dp_collective_time(kind, dense * bytes_per_param, expert * bytes_per_param, self.placement,
                                  self.job.cluster, self.eff)

    def phase_graphs(self, kind: str, phase: str) -> list[OpGraph]:
        """The graphs one layer kind plays in a phase: fwd, bwd-<recompute mode>, or the zero-bubble halves of
        that backward (DualPipe's D and W blocks), dgrad-<mode> (input gradients and recomputation) and
        wgrad-<mode> (weight gradients)."""
        if phase == "fwd":
            return [self.forward_graphs[kind]]
        part, mode = phase.split("-", 1)
        graphs = self.backward_graphs(kind, mode)
        if part == "bwd":
            return graphs
        return [split_weight_gradients(graph)[0 if part == "dgrad" else 1] for graph in graphs]

    def played(self, kind: str, phase: str) -> Played:
        """Cost of one layer kind in a phase (:meth:`phase_graphs`), with its sharded-DP transfers."""
        key = (kind, phase)
        if key not in self._played:
            streamed = stream_exposed(self, kind, phase)  # DeepSpeed's one collective stream, else None
            if streamed is not None:
                return self._played.setdefault(key, self.coster.play(self.phase_graphs(kind, phase))
                                               + Played(streamed, {"dp_comm": streamed}))
            gather_fwd, gather_bwd = self.zero3_times(kind)
            graphs = self.phase_graphs(kind, phase)
            if phase == "fwd":
                self._played[key] = self.coster.play(graphs, zero3_gather=gather_fwd, comm_units=self.comm_units)
            else:
                # A zero-bubble split runs ZeRO-3's backward transfers beside the input gradients and
                # ZeRO-2's reduce-scatter after the weight gradients it reduces.
                gather = 0.0 if phase.startswith("wgrad-") else gather_bwd
                played = self.coster.play(graphs, zero3_gather=gather, comm_units=self.comm_units)
                reduce = self.zero2_reduce(kind) if self.plan.zero == 2 and not phase.startswith("dgrad-") else 0.0
                if reduce > played.time:
                    # ZeRO-2 reduce-scatters run beside the next layer's backward; only what they
                    # do not hide extends the step.
                    played = played + Played(reduce - played.time, {"dp_comm": reduce - played.time})
                self._played[key] = played
        return self._played[key]

    def fused(self, forward_kinds: list[str], backward_kinds: list[str], backward_modes: list[str]) -> Played:
        """DualPipe's overlapped block: a forward chunk and a backward chunk played together, layer
        by layer, each on its own streams sharing the device, so each one's all-to-alls can hide
        under the other's compute."""
        total = ZERO
        pairs = max(len(forward_kinds), len(backward_kinds))
        for i in range(pairs):
            key = ("fused", "|".join(forward_kinds[i:i + 1] + ["/"] + backward_kinds[i:i + 1] + backward_modes[i:i + 1]))
            if key not in self._played:
                graphs = []
                if i < len(forward_kinds):
                    graphs.append(self.forward_graphs[forward_kinds[i]])
                if i < len(backward_kinds):
                    graphs.extend(self.backward_graphs(backward_kinds[i], backward_modes[i]))
                self._played[key] = self.coster.play(graphs, concurrent=True)
            total = total + self._played[key]
        return total

    def backward_graphs(self, kind: str, mode: str) -> list[OpGraph]:
        """The graphs of one backward pass of a layer kind (cached)."""
        key = (kind, mode)
        if key not in self._backward:
            graphs = backward_with_recompute(self.forward_graphs[kind], mode,
                                             reads_only=self.stack.memory.recompute_reads_only)
            # Weights whose wgrad GEMM does not accumulate into the main gradients (plan grad_accum_fusion).
            dense, expert = self.layer_params(kind)
            unfused = {"all": 0.0, "experts": dense, "none": dense + expert}[self.plan.grad_accum_fusion]
            self._backward[key] = with_main_grad_add(graphs, unfused, 4.0 if self.plan.grads == "fp32" else 2.0)
        return self._backward[key]

    def recompute_modes(self, count: int) -> list[str]:
        """Recompute mode of each of a chunk's ``count`` layers (full for the first k when asked;
        ``selective[a+b]`` when the plan names its selective modules)."""
        plan = self.plan
        if plan.recompute == "full" and plan.recompute_layers >= 0:
            return ["full"] * min(count, plan.recompute_layers) + ["none"] * max(0, count - plan.recompute_layers)
        if plan.recompute == "selective" and plan.recompute_modules:
            return [f"selective[{plan.recompute_modules}]"] * count
        return [plan.recompute] * count

    # ---- pipeline -----------------------------------------------------------------------------
    def dp_bucket_time(self, dense: float, expert: float) -> float:
        """Seconds to synchronise one bucket of gradients at the end of the step (ZeRO 0/1)."""
        kind = "all_reduce" if self.plan.zero == 0 else "reduce_scatter"
        return self._dp_collective(kind, dense, expert, self.states.grads)

    def param_gather_time(self, dense: float, expert: float) -> float:
        """Seconds to all-gather updated 16-bit parameters after a sharded optimizer step (ZeRO 1/2)."""
        return self._dp_collective("all_gather", dense, expert, WEIGHT_BYTES)


def simulate(job: TrainingJob) -> TrainingResult:
    """Simulate one training step of ``job``; infeasible memory is a result, invalid input an error."""
    builder = _StepBuilder(job)
    plan, model, cluster, chip = builder.plan, job.model, job.cluster, builder.chip
    # Breakdown: averaged over the pipeline ranks, each of which spans the whole step.
    if (job.exact or job.keep_trace) and builder.micro_batches > MAX_EXACT_MICRO_BATCHES:
        raise WindtunnelError(f"{'--exact' if job.exact else 'A trace'} plays every one of the step's "
                              f"{builder.micro_batches:,} micro-batches; at most {MAX_EXACT_MICRO_BATCHES:,} are played "
                              "whole (leave --exact/--trace out: the steady-state path is within 0.1%).",
                              field="global_batch")
    played = play_step(builder, exact=job.exact or job.keep_trace)
    timeline, chunks, flops, step, breakdown = played.timeline, played.chunks, played.flops, played.step, played.breakdown
    tokens = job.global_batch * job.seq_len
    peak = chip.peak(plan.precision)

    # Memory: every rank, the worst one reported (train/memory.step_memory).
    worst_memory = step_memory(builder, chunks)
    worst_rank, memory, host_bytes = worst_memory.rank, worst_memory.memory, worst_memory.host_bytes
    capacity = chip.hbm_bytes
    feasible = memory.total <= capacity
    reason = None
    if not feasible:
        reason = (f"needs {memory.total / GIB:.1f} GiB per device on pipeline rank {worst_rank} "
                  f"(weights {memory.weights / GIB:.1f}, gradients {memory.gradients / GIB:.1f}, optimizer "
                  f"{memory.optimizer / GIB:.1f}, activations {memory.activations / GIB:.1f}, buffers+reserve "
                  f"{(memory.buffers + memory.reserve) / GIB:.1f}), {capacity / GIB:.1f} GiB available")
    elif host_bytes > (chip.host_memory_bytes or 0.0):
        feasible = False
        reason = (f"offloaded activations and optimizer states need {host_bytes / GIB:.1f} GiB of host memory per "
                  f"device (offload_layers={plan.offload_layers}, offload_optimizer={plan.offload_optimizer:g}), "
                  f"{chip.host_memory_bytes / GIB:.1f} GiB available")

    if builder.dag_stages is not None:
        model_flops = 3.0 * job.dag.model_flops(plan.mbs) * builder.micro_batches * plan.dp
    elif job.dag is not None:
        dag = job.dag
        per_rank = model.layers * dag.forward_flops("layer") + dag.forward_flops("first_stage") + dag.forward_flops("last_stage")
        model_flops = 3.0 * per_rank / plan.pp * builder.micro_batches * cluster.devices
    else:
        model_flops = model_flops_per_token(model, job.seq_len, mtp=builder.mtp) * tokens
    hardware_flops_per_device = sum(flops) / plan.pp / 1.0
    devices = cluster.devices
    result = TrainingResult(
        model=model.id, hardware=cluster.id, chip=chip.id, devices=devices, seq_len=job.seq_len,
        global_batch=job.global_batch, plan=plan.to_string(), framework=builder.stack.id, feasible=feasible, infeasible_reason=reason,
        step_time_s=step, tokens_per_s=tokens / step, tokens_per_s_per_device=tokens / step / devices,
        model_tflops_per_device=model_flops / step / devices / 1e12,
        hardware_tflops_per_device=hardware_flops_per_device / step / 1e12,
        mfu=model_flops / step / devices / peak, hfu=hardware_flops_per_device / step / peak,
        peak_flops_name=f"{chip.id} dense {plan.precision} {peak / 1e12:.1f} TFLOP/s",
        peak_memory_bytes=memory.total, memory_capacity_bytes=capacity, memory_breakdown=memory.as_dict(),
        breakdown=dict(sorted(breakdown.items())), micro_batches=builder.micro_batches,
        model_flops_per_step=model_flops, placement=builder.placement.describe(cluster),
        assumptions=step_assumptions(job, builder),
        trace=timeline if job.keep_trace else None,
    )
    check_training_result(result, job)
    return result


def forward_backward_graphs(model: ModelSpec, shard: Sharding, moe: bool) -> tuple[OpGraph, OpGraph]:
    """A layer's forward and backward DAGs (exposed for inspection and tests)."""
    forward = layer_forward(model, shard, moe=moe)
    return forward, backward_of(forward)


def plan_for(model: ModelSpec, cluster: Cluster, plan: Plan, seq_len: int, global_batch: int) -> Plan:
    """The validated plan with dp filled in."""
    return validate_plan(plan, model, cluster.devices, seq_len, global_batch)


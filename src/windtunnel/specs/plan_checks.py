"""Plan checks that need no model shape: hybrid sharding groups and activation offloading.

Kept apart from :mod:`windtunnel.specs.plan` (which calls them from ``validate_plan``); each failure
names the field, its value and what would be valid.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator

from windtunnel.specs.errors import WindtunnelError

if TYPE_CHECKING:
    from windtunnel.specs.plan import Plan


# Names the frameworks give the optimizer CPU offload (plan field offload_optimizer, a fraction):
# Megatron-Core's --optimizer-offload-fraction and --optimizer-cpu-offload (a switch: all of it),
# DeepSpeed's offload_optimizer (device cpu) and its Twin-Flow share (offload_optimizer.ratio).
OFFLOAD_OPTIMIZER_ALIASES = {
    "optimizer_offload_fraction": "offload_optimizer", "optimizer-offload-fraction": "offload_optimizer",
    "optimizer_cpu_offload": "offload_optimizer", "optimizer-cpu-offload": "offload_optimizer",
    "offload-optimizer": "offload_optimizer", "cpu_optimizer": "offload_optimizer",
}
_OFFLOAD_WORDS = {"true": 1.0, "on": 1.0, "yes": 1.0, "cpu": 1.0, "false": 0.0, "off": 0.0, "no": 0.0, "none": 0.0}


def offload_fraction(value: object) -> float:
    """The plan's ``offload_optimizer`` share from its text: a number 0..1, or a switch (true/cpu: 1, false/none: 0)."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    text = str(value).strip().lower()
    if text in _OFFLOAD_WORDS:
        return _OFFLOAD_WORDS[text]
    try:
        share = float(text)
    except ValueError:
        share = float("nan")
    if not 0.0 <= share <= 1.0:  # also rejects nan
        raise WindtunnelError(
            f"Plan field 'offload_optimizer' is '{value}': it is the share of the optimizer states kept in host "
            "memory and stepped on the CPU, a number from 0 (none, the default) to 1 (all; DeepSpeed "
            "offload_optimizer device cpu), or true/cpu (1) / false/none (0).", field="offload_optimizer")
    return share


# How much of a step is captured in CUDA graphs; a captured region's kernels cost the host one graph launch.
# none (eager); full (the whole iteration: needs a sync-free dropless dispatcher, so the host never waits
# for token counts); or Megatron-Core's transformer_engine graph scopes (--cuda-graph-scope) joined by '+':
# attn, mlp (a dense layer's MLP), moe_router and moe_preprocess (the dispatcher's preprocessing, which
# Megatron-Core captures only together with moe_router). modules = all four. The host still waits for the
# dropless token counts after the preprocess (megatron/core/transformer/moe/token_dispatcher.py at core_v0.15.0,
# _maybe_dtoh_and_synchronize), so a scope removes host issue cost, not that wait.
CUDA_GRAPH_MODES = ("none", "modules", "full")
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe_router", "moe_preprocess")


def cuda_graph_scopes(mode: str) -> frozenset[str]:
    """The scopes a plan's ``cuda_graphs`` value captures (``full`` captures these and everything else)."""
    if mode == "none":
        return frozenset()
    if mode in ("modules", "full"):
        return frozenset(CUDA_GRAPH_SCOPES)
    return frozenset(mode.split("+"))


def cuda_graphs_value(value: str) -> str:
    """A valid ``cuda_graphs`` value in canonical form (scopes in CUDA_GRAPH_SCOPES order); else a ValueError
    saying what would be valid."""
    text = str(value).strip().lower()
    if text in CUDA_GRAPH_MODES:
        return text
    scopes = text.split("+")
    bad = [scope for scope in scopes if scope not in CUDA_GRAPH_SCOPES]
    if bad:
        raise ValueError(f"unknown CUDA-graph scope(s) {', '.join(repr(b) for b in bad)}; valid: "
                         f"{', '.join(CUDA_GRAPH_MODES)}, or scopes among {', '.join(CUDA_GRAPH_SCOPES)} joined by "
                         "'+' (e.g. attn+moe_router+moe_preprocess)")
    if "moe_preprocess" in scopes and "moe_router" not in scopes:
        raise ValueError("scope moe_preprocess needs moe_router (Megatron-Core captures the dispatcher's "
                         "preprocessing with the router); add moe_router")
    canonical = "+".join(scope for scope in CUDA_GRAPH_SCOPES if scope in scopes)
    # Every scope at once is the same capture as 'modules': one spelling, so search and reports see one plan.
    return "modules" if canonical == "+".join(CUDA_GRAPH_SCOPES) else canonical


CudaGraphs = Annotated[str, AfterValidator(cuda_graphs_value)]


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n``, ascending (for the valid values an error lists)."""
    return [d for d in range(1, n + 1) if n % d == 0]


def check_dp_shard(plan: Plan, dp: int) -> None:
    """Hybrid sharding: the sharding group must tile the dp ranks, and the expert ranks the same way."""
    if not plan.dp_shard:
        return

    def fail(message: str) -> None:
        raise WindtunnelError(message, field="dp_shard")

    if dp % plan.dp_shard:
        fail(f"Plan field 'dp_shard' is {plan.dp_shard}, which does not divide dp = {dp}: the sharding groups "
             f"(dp_shard ranks each) tile the data-parallel ranks; valid dp_shard values: "
             f"{', '.join(map(str, divisors(dp)))} (or leave it out to shard over all {dp}).")
    if plan.zero == 0:
        fail(f"Plan field 'dp_shard' is {plan.dp_shard}, but zero is 0: nothing is sharded, so there is no "
             "sharding group; use zero=1, 2 or 3 with dp_shard, or leave dp_shard out.")
    replicas = dp // plan.dp_shard
    expert_dp = plan.tp * plan.cp * dp // (plan.ep * plan.etp)
    if plan.ep > 1 and expert_dp % replicas:
        fail(f"Plan field 'dp_shard' is {plan.dp_shard}: its dp/dp_shard = {replicas} replicas must also divide "
             f"the expert-data-parallel group (tp*cp*dp/(ep*etp) = {expert_dp}), which replicates the same way; "
             f"choose dp_shard so that {expert_dp} is a multiple of dp/dp_shard, or lower ep.")


# On/off plan fields that only an FP8 plan can turn on, and what each runs in FP8.
_FP8_ONLY = {"fp8_attention": "runs attention's matmuls", "fp8_dispatch": "sends the MoE tokens to their experts"}


def check_precision(plan: Plan) -> None:
    """The FP8 recipe, FP8 attention and FP8 dispatch need FP8; the fused MXFP8 grouped MLP needs the MXFP8 recipe."""
    if plan.fp8_recipe == "mx" and plan.precision != "fp8":
        raise WindtunnelError(f"Plan field 'fp8_recipe' is 'mx' (MXFP8 block scaling) but precision is "
                              f"'{plan.precision}'; set precision=fp8, or leave fp8_recipe out.", field="fp8_recipe")
    for field, what in _FP8_ONLY.items():
        if getattr(plan, field) and plan.precision != "fp8":
            raise WindtunnelError(f"Plan field '{field}' {what} in FP8, but precision is '{plan.precision}'; set "
                                  f"precision=fp8, or leave {field} out.", field=field)
    if plan.expert_gemm == "fused_mlp" and (plan.precision != "fp8" or plan.fp8_recipe != "mx"):
        raise WindtunnelError(
            "Plan field 'expert_gemm' is 'fused_mlp' (the fused MXFP8 grouped MLP: up projection, GLU and quantisation "
            f"in one kernel), which runs only in MXFP8, but the plan has precision '{plan.precision}' and fp8_recipe "
            f"'{plan.fp8_recipe}'; set precision=fp8,fp8_recipe=mx, or use expert_gemm=grouped.", field="expert_gemm")


def check_offload(plan: Plan, layers: int) -> Plan:
    """Megatron's rules for activation offloading (an unstated recompute mode becomes none) and
    DeepSpeed's for CPU checkpointing (it moves the checkpoints of full recomputation)."""
    def fail(field: str, message: str) -> None:
        raise WindtunnelError(message, field=field)

    if plan.checkpoint_in_cpu:
        if "recompute" not in plan.model_fields_set:
            plan = plan.model_copy(update={"recompute": "full"})
        if plan.recompute != "full" or plan.recompute_layers >= 0:
            fail("checkpoint_in_cpu", "Plan field 'checkpoint_in_cpu' is true, but it moves the checkpointed layer "
                 f"inputs of full recomputation and the plan has recompute={plan.recompute}"
                 + (f":{plan.recompute_layers}" if plan.recompute_layers >= 0 else "")
                 + "; use recompute=full (every layer) or checkpoint_in_cpu=false.")
        if plan.offload_layers:
            fail("checkpoint_in_cpu", "Plan fields 'checkpoint_in_cpu' and 'offload_layers' both move activations "
                 "to host memory (DeepSpeed's checkpoints, Megatron's layers); give one of them.")
    if not plan.offload_layers:
        return plan

    if plan.offload_layers >= layers:
        fail("offload_layers", f"Plan field 'offload_layers' is {plan.offload_layers}; the model has {layers} layers "
             f"and the last one is never offloaded: valid values are 0 to {layers - 1}.")
    if plan.pp > 1:
        fail("offload_layers", f"Plan field 'offload_layers' needs pp=1 (Megatron offloads activations without "
             f"pipeline parallelism), got pp={plan.pp}.")
    if plan.cuda_graphs != "none":
        fail("offload_layers", f"Plan field 'offload_layers' needs cuda_graphs=none, got {plan.cuda_graphs}.")
    if "recompute" not in plan.model_fields_set:
        plan = plan.model_copy(update={"recompute": "none"})
    if plan.recompute != "none":
        fail("offload_layers", f"Plan field 'offload_layers' cannot be combined with recompute={plan.recompute} "
             "(Megatron: CPU offloading does not work with activation recomputation); use recompute=none.")
    return plan


# Other spellings of plan fields --plan accepts (Megatron flag names, hyphens), case-insensitively.
PLAN_FIELD_ALIASES = {
    "mb": "mbs", "micro_batch": "mbs", "microbatch": "mbs", "micro-batch": "mbs",
    "seq_parallel": "sp", "sequence_parallel": "sp", "virtual": "vpp", "vp": "vpp",
    "tp_comm_overlap": "tp_overlap", "overlap": "tp_overlap", "zero_stage": "zero",
    "recompute-layers": "recompute_layers", "pipeline": "schedule", "graphs": "cuda_graphs",
    "cuda_graph": "cuda_graphs", "cuda-graphs": "cuda_graphs", "moe_a2a_overlap": "ep_overlap",
    "overlap_moe_expert_parallel_comm": "ep_overlap", "ep-overlap": "ep_overlap",
    "recompute-modules": "recompute_modules", "modules": "recompute_modules",
    "grad_dtype": "grads", "main_grads": "grads", "main_grads_dtype": "grads",
    "moments_dtype": "moments", "exp_avg_dtype": "moments", "adam_moments": "moments",
    "offload-modules": "offload_modules", "reuse-fp32-param": "reuse_fp32_param", "swap-optimizer": "swap_optimizer",
    "activation_func_fp8_input_store": "act_fp8_store", "activation-func-fp8-input-store": "act_fp8_store",
    "fp8_dot_product_attention": "fp8_attention", "fp8-dot-product-attention": "fp8_attention",
    "fp8-dispatch": "fp8_dispatch", "moe_fp8_dispatch": "fp8_dispatch",
    "cuda_device_max_connections": "device_connections", "device-connections": "device_connections",
    "gradient_accumulation_fusion": "grad_accum_fusion", "gradient-accumulation-fusion": "grad_accum_fusion",
    "overlap-grad-reduce": "overlap_grad_reduce", "overlap-param-gather": "overlap_param_gather",
    "cp_comm_type": "cp_algo", "context_parallel_algo": "cp_algo", "context-parallel-algo": "cp_algo", "cp-algo": "cp_algo",
    "checkpoint-in-cpu": "checkpoint_in_cpu", "cpu_checkpointing": "checkpoint_in_cpu",
    "cpu_offloading_num_layers": "offload_layers", "offload": "offload_layers", "offload-layers": "offload_layers",
    "mtp_num_layers": "mtp", "mtp_layers": "mtp", "mtp-num-layers": "mtp",
    "hsdp": "dp_shard", "data_parallel_shard_degree": "dp_shard", "dp-shard": "dp_shard", "fsdp_shard": "dp_shard",
    "shard_group": "dp_shard", **OFFLOAD_OPTIMIZER_ALIASES, "pipeline_model_parallel_layout": "layout", "pp_layout": "layout", "pipeline-model-parallel-layout": "layout",
}

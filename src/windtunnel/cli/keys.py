"""`windtunnel train plan-keys` and `windtunnel infer deployment-keys`: every key of a plan (the Plan model's
fields) and of a deployment pool (InstanceSpec's fields), one line each, with its values and default.

The names, value sets and defaults come from the models when the listing runs; the one-line meanings are
kept here (a test checks that they name exactly the models' fields), cheap enough for ``--help`` epilogs."""

from __future__ import annotations

import typing

from windtunnel.specs.modules import RECOMPUTE_MODULES

PLAN_KEYS = {
    "tp": "tensor parallelism: devices sharing each layer's weights",
    "pp": "pipeline parallelism: stages the layers are split into",
    "dp": "data parallelism (0: the devices left, devices / (tp*pp*cp))",
    "cp": "context parallelism: devices sharing each sequence",
    "ep": "expert parallelism (MoE): ranks the experts are spread over, inside dp*cp",
    "etp": "tensor parallelism inside each expert (MoE)",
    "vpp": "virtual pipeline stages per rank (interleaved 1F1B when > 1)",
    "mbs": "micro-batch size (sequences per micro-batch)",
    "recompute": "activation recomputation: none, selective (attention) or full (recompute=full:N: N layers)",
    "recompute_layers": "with full recomputation, layers per chunk recomputed (-1: all)",
    "recompute_modules": "with selective, modules re-run, '+'-separated (" + ", ".join(RECOMPUTE_MODULES) + ")",
    "sp": "sequence parallelism with tp > 1 (bare flag 'sp' = true)",
    "zero": "ZeRO / distributed-optimizer stage 0-3 (optimizer, + gradients, + weights sharded over dp)",
    "dp_shard": "hybrid sharding (HSDP): dp ranks per ZeRO/FSDP sharding group, replicated dp/dp_shard times (0: all dp)",
    "tp_overlap": "overlap TP communication with GEMMs (chunked, needs sp)",
    "ep_overlap": "overlap the EP all-to-alls of one micro-batch with another's compute",
    "schedule": "pipeline schedule (default: interleaved when vpp > 1, else 1f1b)",
    "precision": "compute precision of the GEMMs",
    "fp8_recipe": "FP8 scaling: tensor (one scale per tensor) or mx (MXFP8 1x32 blocks, Blackwell)",
    "dispatcher": "MoE token dispatcher (deepep deduplicates tokens, hybridep also fuses the permutation into "
                  "its kernels, alltoall, allgather)",
    "expert_gemm": "local experts as one grouped GEMM, Megatron-Core's SequentialMLP loop (sequential), or the fused "
                   "MXFP8 grouped MLP (fused_mlp)",
    "grad_accum_fusion": "weights whose wgrad GEMM accumulates into the main gradients (all, experts, none)",
    "embedding_lookup": "input embedding as a gather or a one-hot matmul (MaxText use_iota_embed, Praxis 'matmul')",
    "cp_algo": "how context parallelism exchanges keys and values",
    "cp_overlap": "overlap the CP transfers with attention (false: each waited where issued, as compiled)",
    "overlap_grad_reduce": "reduce DP gradients during the backward (false: after it; --overlap-grad-reduce)",
    "overlap_param_gather": "all-gather ZeRO parameters under the first forward (false: before it)",
    "cuda_graphs": "kernels captured in CUDA graphs: none (eager), modules, full (whole step), or scopes attn, mlp, moe_router, moe_preprocess joined by '+'",
    "grads": "main-gradient dtype (also the DP reduction's)",
    "moments": "Adam moment dtype",
    "offload_layers": "first N layers' activations offloaded to host memory (pp=1, no recompute)",
    "offload_modules": "modules whose activations live in host memory, '+'-separated",
    "reuse_fp32_param": "fp32 master weights kept as bf16 weights + 16-bit residual (MindSpeed)",
    "swap_optimizer": "optimizer states kept in host memory outside the optimizer step (MindSpeed)",
    "offload_optimizer": "share (0..1) of the optimizer states in host memory, stepped on the CPU (ZeRO-Offload)",
    "checkpoint_in_cpu": "full recomputation's layer checkpoints in host memory (DeepSpeed cpu_checkpointing)",
    "act_fp8_store": "SwiGLU inputs kept in FP8 for the backward (Megatron --activation-func-fp8-input-store)",
    "fp8_attention": "attention's matmuls in FP8 (Megatron --fp8-dot-product-attention)",
    "fp8_dispatch": "MoE dispatch all-to-all in FP8 (DeepSeek-V3; off: 16-bit tokens, as Megatron-Core sends them)",
    "device_connections": "hardware work queues per device (CUDA_DEVICE_MAX_CONNECTIONS, default 8); 1 queues an "
                          "overlapped pair's all-to-all behind the kernels issued before it",
    "mtp": "multi-token-prediction modules trained (unset: the model's own count)",
    "layout": "Megatron pipeline layout of modules per stage, e.g. 'Et*4|(t*4|)*14tmL' (empty: even split; "
              "balanced: the split that evens the busiest rank's time)",
    "order": "rank order of the parallel groups, innermost first (tp-cp-dp-pp: Megatron's default)",
}

DEPLOYMENT_KEYS = {
    "tp": "tensor parallelism of each instance",
    "dp": "data-parallel attention groups per instance (MoE: attention DP, experts EP)",
    "ep": "expert parallelism of each instance (MoE)",
    "pp": "pipeline stages per instance",
    "replicas": "instances in the pool",
    "precision": "weight precision (default: the model's serving default)",
    "max_batch": "most sequences per iteration (vLLM max_num_seqs)",
    "max_tokens": "most tokens per iteration (vLLM max_num_batched_tokens; the prefill chunk)",
    "batching": "chunked (prefill chunks mixed with decodes), separate or whole",
    "kv": "KV-cache precision",
    "prefix_hit": "fraction of each prompt assumed cached (0-1)",
    "chip": "chip of this pool (default: the hardware's)",
    "mem_util": "fraction of device memory the server may use (vLLM gpu_memory_utilization)",
    "tbo": "two-batch overlap of MoE communication with compute",
    "overhead": "host overhead per iteration (seconds, or with a unit: 2ms)",
    "moe_imbalance": "tokens on the busiest expert rank / the balanced share",
    "block_size": "KV-cache page size (tokens)",
    "admission": "greedy (admit while KV fits now) or reserve (reserve the whole output's KV)",
    "prefix_cache": "keep a prefix cache (default: on when the traffic carries block hashes)",
    "host_cache": "GiB of host memory per device for the prefix cache's host tier",
    "mtp": "draft tokens per decode step (multi-token prediction / speculative decoding)",
    "accept": "acceptance rate of each draft token (default: the catalog's prior)",
}


def _values(annotation) -> str:
    """The values a field takes, from its type: a Literal's choices, true|false, int, number or text."""
    options = [annotation]
    if typing.get_origin(annotation) not in (None, typing.Literal, typing.Annotated):  # a union: X | None
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
    kinds = []
    for option in options:
        if typing.get_origin(option) is typing.Annotated:
            option = typing.get_args(option)[0]
        if typing.get_origin(option) is typing.Literal:
            return "|".join(str(v) for v in typing.get_args(option))
        kinds.append({bool: "true|false", int: "int", float: "number"}.get(option, "text"))
    return "|".join(dict.fromkeys(kinds))


def plan_key_rows() -> list[tuple[str, str, str, str]]:
    """(key, values, default, meaning) for every field of the Plan model, in its order."""
    from windtunnel.specs.plan import Plan

    rows = []
    for name, field in Plan.model_fields.items():
        default = "" if field.default is None else str(field.default).lower()
        rows.append((name, _values(field.annotation), default, PLAN_KEYS.get(name, "")))
    return rows


def deployment_key_rows() -> list[tuple[str, str, str, str]]:
    """(key, values, default, meaning) for every key a deployment pool takes (InstanceSpec's fields)."""
    import dataclasses

    from windtunnel.infer import deployment as dep

    hints = typing.get_type_hints(dep.InstanceSpec)
    fields = {f.name: f for f in dataclasses.fields(dep.InstanceSpec)}
    choices = {"batching": dep.BATCHING, "admission": dep.ADMISSIONS, "kv": dep.KV_PRECISIONS}
    rows = []
    for name in dep.INSTANCE_KEYS:
        default = fields[name].default
        values = "|".join(choices[name]) if name in choices else _values(hints[name])
        rows.append((name, values, "" if default is None else str(default).lower(), DEPLOYMENT_KEYS.get(name, "")))
    return rows


def print_keys(rows: list[tuple[str, str, str, str]], as_json: bool, title: str) -> None:
    """The listing: one line per key (or JSON)."""
    import json
    import sys

    if as_json:
        sys.stdout.write(json.dumps([{"key": k, "values": v, "default": d, "meaning": m} for k, v, d, m in rows],
                                    indent=2) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, box=None, pad_edge=False, title_justify="left", highlight=False)
    table.add_column("key", no_wrap=True)
    table.add_column("values", max_width=16)
    table.add_column("default", overflow="fold", max_width=11)
    table.add_column("meaning", min_width=30)
    for key, values, default, meaning in rows:
        table.add_row(key, values.replace("|", " | "), default or "-", meaning)
    Console().print(table)


def epilog(keys: dict[str, str], command: str) -> str:
    """A --help epilog naming every key (one line each: `command`)."""
    return f"Keys: {', '.join(keys)}. One line each: `{command}`."

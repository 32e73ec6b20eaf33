"""Optimizer CPU offload (ZeRO-Offload): the plan's ``offload_optimizer`` share of the optimizer states.

DeepSpeed's ``offload_optimizer: {device: cpu}`` (Ren et al. 2021, ZeRO-Offload, arXiv 2101.06840) and
Megatron-Core's ``--optimizer-cpu-offload --optimizer-offload-fraction f`` (HybridDeviceOptimizer) keep a
share ``f`` of each device's optimizer states -- the fp32 master weights and Adam's two moments -- in host
memory and run their Adam step on the CPU. Per step the share's 16-bit gradients go device -> host and its
updated 16-bit parameters host -> device over the device's host link (ZeRO-Offload Sec. 4.1: 2 bytes each
way per parameter); the rest is stepped on the device at the same time (DeepSpeed's Twin-Flow,
blogs/deepspeed-offloadpp: "both CPU and GPU can do parameter updates simultaneously"). The one-step
delayed update of ZeRO-Offload (an option, off by default) is not modelled.

The CPU step is bound by host DRAM bandwidth: DeepSpeedCPUAdam's AVX loop (microsoft/DeepSpeed
csrc/includes/cpu_adam.h Step_AVX at 38327e07f) loads the fp32 gradient, parameter and both moments and
stores the parameter and both moments (28 bytes per parameter); the 16-bit copy of the updated parameter
that is sent to the device is written besides (2 bytes). Its arithmetic (~15 FLOP per parameter on AVX
lanes) is far below the bytes' time on any catalogued host. Units: bytes, seconds.
"""

from __future__ import annotations

from dataclasses import replace

from windtunnel.specs.errors import WindtunnelError
from windtunnel.train.memory import GRAD_BYTES, LAYER_MODULES, WEIGHT_BYTES, StateBytes
from windtunnel.train.zero3 import persistent_gather_seconds

CPU_ADAM_BYTES_PER_PARAM = 4 * 4.0 + 3 * 4.0 + WEIGHT_BYTES  # loads, stores, the 16-bit copy to send
COPY_BYTES_PER_PARAM = WEIGHT_BYTES  # 16-bit gradients down, 16-bit parameters up (ZeRO-Offload Sec. 4.1)


# Offloading plan fields -> the chip fields their costs need (the host link and memory; the CPU step's rate).
_HOST_FIELDS = {"offload_layers": ("host_link_bandwidth", "host_memory_bytes"),
                "checkpoint_in_cpu": ("host_link_bandwidth", "host_memory_bytes"),
                "offload_optimizer": ("host_link_bandwidth", "host_memory_bytes", "host_memory_bandwidth")}


def check_host(plan, chip) -> None:
    """Activation offloading needs the chip's host link and host memory in the catalog; optimizer offload
    also its host memory bandwidth (the CPU step's rate). Each failure names the plan field."""
    for field, needed in _HOST_FIELDS.items():
        value = getattr(plan, field)
        missing = [name for name in needed if not getattr(chip, name)]
        if value and missing:
            flag = isinstance(value, bool)  # checkpoint_in_cpu is true/false, the others counts or shares
            shown, off = ("true", "false") if flag else (f"{value:g}", "0")
            raise WindtunnelError(
                f"Plan field '{field}' is {shown}, but chip '{chip.id}' has no {', '.join(missing)} in the catalog, so "
                f"its copies over the host link cannot be costed; use {field}={off} or give the chip those fields "
                f"({', '.join(needed)}).", field=field)


def device_share(states: StateBytes, share: float, memory) -> StateBytes:
    """The model states per parameter left on the device when ``share`` of the optimizer is on the host
    (``memory``: the stack's Memory section; its ``optimizer_offload_grads`` moves the share's main
    gradients too, where ZeRO >= 2 partitions them: below that every rank holds the whole 16-bit gradient
    until it is reduced, and only the owned partition's fp32 copy lives on the host)."""
    if not share:
        return states
    return replace(states, optimizer=states.optimizer * (1.0 - share),
                   grads_on_host=share if memory.optimizer_offload_grads else 0.0)


def owned_params(builder, chunks, rank: int) -> float:
    """Parameters whose optimizer states pipeline rank ``rank``'s devices own: ZeRO (stage >= 1) shards
    them over the dense and the expert data-parallel groups."""
    plan, placement = builder.plan, builder.placement
    return sum(c.dense_params / (placement.dp.size if plan.zero >= 1 else 1)
               + c.expert_params / (placement.expert_dp.size if plan.zero >= 1 else 1)
               for (r, _), c in chunks.items() if r == rank)


def host_bytes_per_param(states: StateBytes, share: float) -> float:
    """Host bytes per parameter a device owns (its optimizer shard): the share's optimizer states (fp32
    master weights and moments, as ``states`` count them) and its fp32 gradients (both frameworks keep a
    host gradient buffer for the CPU step: DeepSpeed's fp32 partition grads, Megatron's pinned CPU grads)."""
    return share * (states.optimizer + GRAD_BYTES)


def step_seconds(builder, owned: float, device_seconds: float) -> float:
    """Seconds of the optimizer step of a device that owns ``owned`` parameters' optimizer states, whose
    all-device step would take ``device_seconds``: the device steps its share while the host steps the
    rest, the copies overlapping as the stack runs them (its ``memory.optimizer_offload_overlap``)."""
    share = builder.plan.offload_optimizer
    if not share:
        return device_seconds
    chip, eff = builder.chip, builder.eff
    host = owned * share
    link = chip.host_link_bandwidth * eff.host_link
    down = up = host * COPY_BYTES_PER_PARAM / link
    cpu = host * CPU_ADAM_BYTES_PER_PARAM / (chip.host_memory_bandwidth * eff.host_memory)
    overlap = builder.stack.memory.optimizer_offload_overlap
    if overlap == "pipelined":
        offloaded = max(down, cpu, up)
    elif overlap == "backward":
        offloaded = cpu + up  # the gradient copies ran under the backward
    else:
        offloaded = down + cpu + up
    return max(device_seconds * (1.0 - share), offloaded)


def rank_step_seconds(builder, chunks: dict, rank: int) -> float:
    """Seconds of pipeline rank ``rank``'s optimizer step (kernel overhead excluded): the memory-bound Adam
    update over the parameters whose states it owns (sharded over its data-parallel group under ZeRO >= 1),
    with the plan's CPU-offloaded share stepped on the host (:func:`step_seconds`), then DeepSpeed ZeRO-3's
    re-gather of its persistent parameters (:func:`persistent_gather_seconds`, zero for other stacks)."""
    plan, placement = builder.plan, builder.placement
    owned = sum(c.dense_params / (placement.dp.size if plan.zero >= 1 else 1)
                + c.expert_params / (placement.expert_dp.size if plan.zero >= 1 else 1)
                for (r, _), c in chunks.items() if r == rank)
    traffic = builder.states.optimizer_traffic(builder.eff.optimizer_bytes_per_param)
    device = owned * traffic / (builder.chip.hbm_bandwidth * builder.eff.memory_bandwidth)
    layers = sum(kind in LAYER_MODULES for (r, _), c in chunks.items() if r == rank for kind in c.layers)
    return step_seconds(builder, owned, device) + persistent_gather_seconds(builder, layers)

"""CPU checkpointing (plan checkpoint_in_cpu; DeepSpeed activation_checkpointing.cpu_checkpointing): the
checkpointed layer inputs of full recomputation wait in host memory, copied synchronously each way. Device
and host memory, the copies' time, the host waits in the ZeRO-3 stream play, and the errors."""

from __future__ import annotations

import pytest

from conftest import assert_one_clear_error
from windtunnel import simulate_training
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.plan import parse_plan, validate_plan
from windtunnel.specs.stack import load_stack
from windtunnel.train.zero3_stream import Submodule, play_step

KW = dict(seq_len=2048, global_batch=64)
BASE = "tp=1,pp=1,mbs=2,recompute=full,zero=3"
LAYERS = 32  # llama3-8b


def _run(plan: str, framework: str = "deepspeed"):
    return simulate_training("llama3-8b", "a100-80g", 32, plan=plan, framework=framework, **KW)


def _high_priority_deepspeed():
    """The deepspeed stack with its collectives at high priority: no collective waits for a compute kernel
    (a copy, which holds no compute units, would shorten such waits and so hide part of itself)."""
    stack = load_stack("deepspeed")
    return stack.model_copy(update={"sharding": stack.sharding.model_copy(update={"collective_priority": "high"})})


def test_checkpoints_leave_the_device_and_their_copies_add_to_both_passes():
    high = _high_priority_deepspeed()
    base, cpu = _run(BASE, high), _run(BASE + ",checkpoint_in_cpu=true", high)
    # A layer's checkpoint under full recomputation is its input: tokens x hidden x 2 bytes.
    checkpoint = 2 * 2048 * 4096 * 2.0
    fragmentation = 1.10  # the deepspeed stack's memory.fragmentation on activations
    saved_on_device = (LAYERS - 1) * checkpoint * fragmentation  # one stays staged while it travels
    assert base.peak_memory_bytes - cpu.peak_memory_bytes == pytest.approx(saved_on_device, rel=0.02)
    chip = load_hardware("a100-80g", 32).chip
    copies = 2 * LAYERS * checkpoint / (chip.host_link_bandwidth * 0.8)  # efficiency.yaml host_link_efficiency
    assert cpu.breakdown["offload"] == pytest.approx(copies, rel=1e-6)
    assert "offload" not in base.breakdown
    # Nothing hides a blocking copy: the step grows by at least the copies.
    assert cpu.step_time_s >= base.step_time_s + copies * (1 - 1e-9)
    # At the stack's own (normal) priority the copies still lengthen the step.
    assert _run(BASE + ",checkpoint_in_cpu=true").step_time_s > _run(BASE).step_time_s
    assert any("CPU checkpointing" in line and "blocking" in line for line in cpu.assumptions)


def test_host_waits_at_each_layer_never_speed_up_the_stream():
    """The layer-start sync costs its copy and can only lose overlap: a transfer-bound layer whose gathers
    ran ahead of the compute now waits at each layer for the compute stream to drain."""
    p = 1.0e8
    layer = [Submodule(p, 0.3, 0.6, (p,)), Submodule(p, 0.3, 0.6, (p,))]
    common = dict(recompute=True, gather=lambda n: 0.4, reduce=lambda n: 0.2, prefetch_bucket=5e7,
                  max_live=float("inf"), max_reuse=0.0, reduce_bucket=p)
    free = play_step(layer, 6, **common)
    synced = play_step(layer, 6, **common, layer_sync_s=0.0)
    copied = play_step(layer, 6, **common, layer_sync_s=0.05)
    # The backward's prefetches, issued behind the waits, no longer run ahead of the recomputation.
    assert synced.backward_s > free.backward_s + 0.1
    assert synced.forward_s >= free.forward_s - 1e-12
    # The copies count as compute (the step builder charges them), so exposure excludes them.
    assert copied.forward_compute_s == pytest.approx(free.forward_compute_s + 6 * 0.05)
    assert copied.backward_compute_s == pytest.approx(free.backward_compute_s + 6 * 0.05)
    assert copied.forward_s >= synced.forward_s and copied.backward_s >= synced.backward_s
    # Compute-bound, the gathers hide either way and each copy adds in full.
    slow = [Submodule(p, 1.0, 2.0, (p,)), Submodule(p, 1.0, 2.0, (p,))]
    assert play_step(slow, 6, **common, layer_sync_s=0.05).forward_s == pytest.approx(
        play_step(slow, 6, **common).forward_s + 6 * 0.05)


def test_unstated_recompute_becomes_full_and_other_modes_are_refused():
    plan = validate_plan(parse_plan("tp=1,pp=1,checkpoint_in_cpu=true"), None, 8, 2048, 64, layers=32)
    assert plan.recompute == "full" and plan.checkpoint_in_cpu
    for bad in ("recompute=selective", "recompute=none", "recompute=full:4"):
        with pytest.raises(WindtunnelError) as err:
            validate_plan(parse_plan(f"tp=1,pp=1,{bad},checkpoint_in_cpu=true"), None, 8, 2048, 64, layers=32)
        assert err.value.field == "checkpoint_in_cpu" and "recompute=full" in str(err.value)
    with pytest.raises(WindtunnelError) as err:
        validate_plan(parse_plan("tp=1,pp=1,recompute=full,checkpoint_in_cpu=true,offload_layers=4"), None, 8, 2048,
                      64, layers=32)
    assert err.value.field == "checkpoint_in_cpu"
    assert parse_plan("checkpoint-in-cpu=true").checkpoint_in_cpu  # Megatron-DeepSpeed's flag name
    assert "checkpoint_in_cpu=true" in parse_plan("recompute=full,checkpoint_in_cpu=true").to_string()


def test_a_stack_without_cpu_checkpointing_refuses_it():
    with pytest.raises(WindtunnelError) as err:
        _run(BASE.replace("zero=3", "zero=1") + ",checkpoint_in_cpu=true", framework="megatron")
    assert err.value.field == "checkpoint_in_cpu" and "'megatron'" in str(err.value)


def test_cli_names_the_field(cli):
    proc = cli("train", "simulate", "--model", "llama3-8b", "--hardware", "a100-80g", "--devices", "8",
               "--seq-len", "2048", "--global-batch", "64", "--framework", "megatron",
               "--plan", "tp=1,pp=1,recompute=full,checkpoint_in_cpu=true")
    assert_one_clear_error(proc, "checkpoint_in_cpu", "megatron")

"""Per-stack memory physics (train/memory.step_memory): ZeRO-3/FSDP gather buffers, the stack's reserve,
fragmentation and loss workspace, FSDP's fp32 sharded parameters, and the published peak-memory report
(validation/memory_runs.csv). Bytes throughout; GiB = 2**30 bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import small_dense
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.plan import parse_plan
from windtunnel.specs.stack import load_stack
from windtunnel.train.step import TrainingJob, simulate
from windtunnel.validation.training import read_rows, validate_rows

GIB = 2**30
REPORT = Path(__file__).resolve().parents[1] / "validation" / "memory_runs.csv"


def _job(framework, plan: str = "tp=1,pp=1,dp=8,mbs=1,recompute=full,zero=3", seq: int = 2048) -> TrainingJob:
    return TrainingJob(model=small_dense(), cluster=load_hardware("h100-sxm", 8), plan=parse_plan(plan),
                       seq_len=seq, global_batch=8, framework=framework)


def _with(stack_id: str, section: str, **fields):
    stack = load_stack(stack_id)
    return stack.model_copy(update={section: getattr(stack, section).model_copy(update=fields)})


def _layer_params() -> float:
    m = small_dense()
    return m.attention_params() + 2 * m.hidden + m.mlp_params(m.ffn_hidden)


@pytest.mark.parametrize("layers", [1, 3, 5])
def test_zero3_gather_buffers_scale_with_gathered_layers(layers):
    """Each more gathered layer holds one more layer's 16-bit parameters (2 bytes each)."""
    base = simulate(_job(_with("pytorch-fsdp", "sharding", gathered_layers=1))).memory_breakdown["buffers"]
    more = simulate(_job(_with("pytorch-fsdp", "sharding", gathered_layers=layers))).memory_breakdown["buffers"]
    assert more - base == pytest.approx((layers - 1) * _layer_params() * 2.0, rel=1e-9)


def test_no_reshard_with_pp_keeps_every_block_gathered():
    """torchtitan keeps gathered blocks under PP: the rank's whole share is resident in 16 bits."""
    plan = "tp=1,pp=2,dp=4,mbs=1,recompute=full,zero=3"
    kept = simulate(_job(_with("pytorch-fsdp", "sharding", reshard_with_pp=False), plan)).memory_breakdown["buffers"]
    resharded = simulate(_job(load_stack("pytorch-fsdp"), plan)).memory_breakdown["buffers"]
    assert kept > resharded + 4 * _layer_params()  # 8 layers per rank held instead of 2


def test_fsdp_keeps_no_sharded_16bit_weights_but_deepspeed_does():
    fsdp = simulate(_job("pytorch-fsdp")).memory_breakdown
    deepspeed = simulate(_job("deepspeed")).memory_breakdown
    assert fsdp["weights"] == 0.0
    assert deepspeed["weights"] > 0.0


def test_reserve_and_fragmentation_come_from_the_stack():
    base = simulate(_job("pytorch-fsdp"))
    reserve = simulate(_job(_with("pytorch-fsdp", "memory", reserve_bytes=5 * GIB)))
    assert reserve.peak_memory_bytes - base.peak_memory_bytes == pytest.approx(3 * GIB, rel=1e-9)
    frag = simulate(_job(_with("pytorch-fsdp", "memory", fragmentation=0.25)))
    ratio = frag.memory_breakdown["activations"] / base.memory_breakdown["activations"]
    assert ratio == pytest.approx(1.25 / 1.05, rel=1e-9)


def test_user_stack_yaml_with_memory_fields_changes_peak(tmp_path):
    path = tmp_path / "my-fsdp.yaml"
    path.write_text("inherits: pytorch-fsdp\nmemory:\n  reserve_bytes: 6442450944\n  fragmentation: 0.05\n")
    base = simulate(_job("pytorch-fsdp"))
    mine = simulate(_job(str(path)))
    assert mine.framework == "my-fsdp"
    assert mine.peak_memory_bytes - base.peak_memory_bytes == pytest.approx(4 * GIB, rel=1e-9)


def test_eager_loss_workspace_is_per_logit():
    """An eager fp32 cross entropy allocates 8 bytes per logit in its backward beyond the saved
    log-probabilities; with a large vocabulary it is the step's largest transient."""
    model = small_dense().model_copy(update={"vocab": 131072})

    def run(workspace: float):
        stack = _with("pytorch-fsdp", "memory", loss_workspace_bytes_per_logit=workspace)
        return simulate(TrainingJob(model=model, cluster=load_hardware("h100-sxm", 8), framework=stack,
                                    plan=parse_plan("tp=1,pp=1,dp=8,mbs=1,recompute=full,zero=3"),
                                    seq_len=2048, global_batch=8)).memory_breakdown["activations"]

    logits = 2048 * model.vocab
    assert run(8.0) - run(4.0) == pytest.approx(4.0 * logits * 1.05, rel=1e-9)


def test_megatron_default_has_no_loss_workspace():
    assert load_stack("megatron").memory.loss_workspace_bytes_per_logit == 0.0
    assert load_stack("pytorch-fsdp").memory.loss_workspace_bytes_per_logit == 8.0


def test_memory_report_rows_all_predict():
    rows = read_rows(REPORT)
    assert len(rows) >= 12 and all(row["metric"] == "peak_memory_gib" for row in rows)
    results = validate_rows(rows)
    skipped = [(r.id, r.status) for r in results if r.predicted is None]
    assert not skipped
    assert all(0.2 < r.predicted / r.measured < 2.0 for r in results)


def test_head_activations_are_freed_before_a_layers_recompute_transient():
    """Under full recompute the step's peak is a layer's re-materialised forward; by then the loss and
    the head have run their backward and freed what they saved, so the peak holds the layers' saved
    inputs plus the largest layer transient, not the head's saved activations on top."""
    from windtunnel.train import step as step_module
    from windtunnel.train.memory import _layer_transient, layer_saved_bytes, step_memory

    model = small_dense()
    job = TrainingJob(model=model, cluster=load_hardware("h100-sxm", 8), framework="megatron",
                      plan=parse_plan("tp=1,pp=1,dp=8,mbs=1,recompute=full,zero=1"), seq_len=2048, global_batch=8)
    builder = step_module._StepBuilder(job)
    played = step_module.play_step(builder, exact=False)
    parts = step_memory(builder, played.chunks).memory.parts
    head = layer_saved_bytes(builder, "head", "none")
    layer = _layer_transient(builder, "dense", "full")
    assert head > 0 and layer > head
    assert parts["transient"] == pytest.approx(layer - head, rel=1e-9)


def test_jax_stack_charges_no_allocator_fragmentation():
    """A compiled JAX step saves stacked residual arrays and lays out temporaries at compile time: the
    activations are the saved bytes themselves; an eager stack adds its caching-allocator share."""
    assert load_stack("jax").memory.fragmentation == 0.0
    assert load_stack("pytorch-fsdp").memory.fragmentation == pytest.approx(0.05)
    jax = simulate(_job("jax")).memory_breakdown["activations"]
    eager_like = simulate(_job(_with("jax", "memory", fragmentation=0.05))).memory_breakdown["activations"]
    assert eager_like == pytest.approx(1.05 * jax, rel=1e-9)

"""DeepSpeed ZeRO-3's gathered working set (train/memory.py): per-submodule fetching under a live-parameter
cap (stage3_max_live_parameters) and gradient reduction from a bucket (reduce_bucket_size), never below the
largest single weight; and the DeepSpeed-on-Azure rows (X60-X68) that exercise it. Bytes; 16-bit = 2 bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import small_dense
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.plan import parse_plan
from windtunnel.specs.stack import load_stack
from windtunnel.train.step import TrainingJob, simulate
from windtunnel.validation.training import build_job, read_rows

EXTRA = Path(__file__).resolve().parents[1] / "validation" / "extra_training_runs.csv"


def _job(framework) -> TrainingJob:
    return TrainingJob(model=small_dense(), cluster=load_hardware("h100-sxm", 8),
                       plan=parse_plan("tp=1,pp=1,dp=8,mbs=1,recompute=full,zero=3"),
                       seq_len=2048, global_batch=8, framework=framework)


def _sharding(**fields):
    stack = load_stack("deepspeed")
    return stack.model_copy(update={"sharding": stack.sharding.model_copy(update=fields)})


def _largest_weight() -> float:
    m = small_dense()
    mats = 3 if m.activation == "swiglu" else 2
    return max(m.mlp_params(m.ffn_hidden) * (2 if mats == 3 else 1) / mats, 0.75 * m.attention_params())


def _layer() -> float:
    m = small_dense()
    return m.attention_params() + 2 * m.hidden + m.mlp_params(m.ffn_hidden)


def test_live_cap_floors_at_the_largest_weight():
    """A cap below any single weight still gathers the running module whole: two whole layers become one weight."""
    whole = simulate(_job(_sharding(max_live_params=None, reduce_bucket_params=None))).memory_breakdown["buffers"]
    capped = simulate(_job(_sharding(max_live_params=1.0, reduce_bucket_params=None))).memory_breakdown["buffers"]
    assert whole - capped == pytest.approx((2 * _layer() - _largest_weight()) * 2.0, rel=1e-9)


def test_live_cap_above_the_working_set_changes_nothing():
    whole = simulate(_job(_sharding(max_live_params=None, reduce_bucket_params=None))).memory_breakdown["buffers"]
    roomy = simulate(_job(_sharding(max_live_params=1e15, reduce_bucket_params=1e15))).memory_breakdown["buffers"]
    assert roomy == pytest.approx(whole, rel=1e-12)


def test_reduce_bucket_bounds_the_unsharded_gradients():
    """Gradients reduced from a bucket smaller than a layer hold the bucket (never below the largest weight),
    in 16 bits plus the reduction dtype's copy when that differs."""
    grads = load_stack("deepspeed").comm.grad_reduce
    copy = 0.0 if grads == "bf16" else 4.0
    layer = simulate(_job(_sharding(max_live_params=None, reduce_bucket_params=None))).memory_breakdown["buffers"]
    bucket = simulate(_job(_sharding(max_live_params=None, reduce_bucket_params=1.0))).memory_breakdown["buffers"]
    assert layer - bucket == pytest.approx((_layer() - _largest_weight()) * (2.0 + copy), rel=1e-9)


def test_megatron_deepspeed_inherits_deepspeed_sharding():
    md, ds = load_stack("megatron-deepspeed"), load_stack("deepspeed")
    assert md.zero == 3 and md.sharding == ds.sharding
    assert md.kernels.attention == "unfused" and md.calibration_family == "megatron"


@pytest.mark.parametrize("row_id", ["X61", "X62", "X68"])
def test_azure_zero3_rows_fit_in_memory(row_id):
    """The 530B and 1T runs ran on 80 GB A100s; with whole-layer gathers the model put them over memory."""
    row = next(r for r in read_rows(EXTRA) if r["id"] == row_id)
    job, _, error = build_job(row)
    assert error is None
    assert simulate(job).feasible

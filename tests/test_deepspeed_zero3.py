"""DeepSpeed ZeRO-3 (stack data, train/memory.py, train/step.py): per-submodule fetching under a live-parameter
cap (stage3_max_live_parameters) and gradient reduction from a bucket (reduce_bucket_size), never below the
largest single weight; one collective per weight matrix and per reduce bucket, each paying its ring latency;
and the DeepSpeed-on-Azure rows (X60-X74) that exercise it. Bytes; 16-bit = 2 bytes; seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import small_dense
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.plan import parse_plan
from windtunnel.specs.stack import load_stack
from windtunnel.train.step import TrainingJob, _StepBuilder, simulate
from windtunnel.train.zero3 import layer_weights, reduce_buckets
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
    return max(layer_weights(small_dense(), 1, moe=False))


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
    """DeepSpeed's fetching and its one collective stream, with the Azure recipes' ZeRO-3 sizes."""
    md, ds = load_stack("megatron-deepspeed"), load_stack("deepspeed")
    assert md.zero == 3 and md.sharding.fetch_unit == ds.sharding.fetch_unit == "module"
    assert md.sharding.collective_stream == ds.sharding.collective_stream == "shared"
    assert (md.sharding.max_live_params, md.sharding.reduce_bucket_params) == (3e9, 9e7)
    assert (ds.sharding.max_live_params, ds.sharding.reduce_bucket_params) == (1e9, 5e8)
    assert md.kernels.attention == "unfused" and md.calibration_family == "megatron"


@pytest.mark.parametrize("row_id", ["X61", "X62", "X68"])
def test_azure_zero3_rows_fit_in_memory(row_id):
    """The 530B and 1T runs ran on 80 GB A100s; with whole-layer gathers the model put them over memory."""
    row = next(r for r in read_rows(EXTRA) if r["id"] == row_id)
    job, _, error = build_job(row)
    assert error is None
    assert simulate(job).feasible


def test_layer_weights_cover_the_layer():
    """QKV, output projection, MLP in and out: together the layer's attention and MLP weights (GQA split by heads)."""
    m = small_dense()
    qkv, out, up, down = layer_weights(m, 1, moe=False)
    assert out == m.heads * m.head_dim * m.hidden
    assert qkv + out == m.attention_params()
    assert up + down == m.mlp_params(m.ffn_hidden)
    assert [w / 2 for w in layer_weights(m, 1, moe=False)] == layer_weights(m, 2, moe=False)


@pytest.mark.parametrize(("grads", "bucket", "expected"), [
    ([3.0, 3.0, 1.0, 1.0], 4.0, [3.0, 4.0, 1.0]),     # 3 + 3 > 4 flushes; 3 + 1 = 4 fits; 4 + 1 > 4 flushes
    ([5.0, 1.0], 4.0, [5.0, 1.0]),                    # a gradient larger than the bucket goes alone
    ([1.0, 1.0, 1.0], 10.0, [3.0]),
    ([2.0, 2.0], None, [4.0]),
])
def test_reduce_buckets_fill_like_deepspeed(grads, bucket, expected):
    assert reduce_buckets(grads, bucket) == expected
    assert sum(reduce_buckets(grads, bucket)) == sum(grads)


def _zero3_times(fetch_unit: str, devices: int = 64):
    stack = _sharding(fetch_unit=fetch_unit)
    job = TrainingJob(model=small_dense(), cluster=load_hardware("a100-80g", devices),
                      plan=parse_plan(f"tp=1,pp=1,dp={devices},mbs=1,recompute=full,zero=3"),
                      seq_len=2048, global_batch=devices, framework=stack)
    return _StepBuilder(job).zero3_times("dense")


def test_module_fetch_pays_one_ring_latency_per_weight():
    """Same bytes in four all-gathers instead of one: slower by about three rings' latency, more so on more ranks."""
    small = [m - b for m, b in zip(_zero3_times("module", 16), _zero3_times("layer", 16), strict=True)]
    large = [m - b for m, b in zip(_zero3_times("module", 512), _zero3_times("layer", 512), strict=True)]
    assert all(d > 0 for d in small)
    assert large[0] > 10 * small[0]


def test_small_tensors_of_gpt_and_llama_blocks():
    """A GPT block (LayerNorm, a bias on every projection) has 8 small tensors per layer, a Llama block
    (RMSNorm, no biases) 2; the final norm adds its own; tensors at or above the threshold are left out."""
    from windtunnel.train.zero3 import small_tensors

    llama = small_dense()
    gpt = llama.model_copy(update={"norm": "layernorm", "activation": "gelu", "linear_bias": True})
    h = llama.hidden
    assert small_tensors(llama, 1, 1e9, 4) == {float(h): 2 * 4 + 1}
    gpt_counts = small_tensors(gpt, 1, 1e9, 4)
    assert sum(gpt_counts.values()) == 8 * 4 + 2
    assert gpt_counts[float(h)] == 6 * 4 + 2  # two norms' weight and bias, the two output-side biases
    assert small_tensors(gpt, 1, float(h), 4) == {}  # nothing is smaller than the hidden width
    # Column-parallel biases split over TP.
    assert float(gpt.ffn_hidden) / 2 in small_tensors(gpt, 2, 1e9, 4)


def test_deepspeed_regathers_persistent_parameters_after_each_step():
    """DeepSpeed 0.6.2 all-gathers each parameter under stage3_param_persistence_threshold by its own
    collective after the optimizer step: the step grows by exactly that many latency-bound all-gathers
    over the data-parallel group, and not at all without the threshold or below ZeRO-3."""
    from windtunnel.train.zero3 import persistent_gather_seconds, small_tensors

    with_gathers = simulate(_job("deepspeed"))
    without = simulate(_job(_sharding(persistence_threshold_params=None)))
    builder = _StepBuilder(_job("deepspeed"))
    extra = persistent_gather_seconds(builder, small_dense().layers)
    counts = small_tensors(small_dense(), 1, 1e5, small_dense().layers)
    assert extra == pytest.approx(sum(n * builder._dp_collective("all_gather", size, 0.0, 2.0)
                                      for size, n in counts.items()), rel=1e-12)
    assert extra > 0
    assert with_gathers.step_time_s - without.step_time_s == pytest.approx(extra, rel=1e-6)
    zero2 = TrainingJob(model=small_dense(), cluster=load_hardware("h100-sxm", 8), framework="deepspeed",
                        plan=parse_plan("tp=1,pp=1,dp=8,mbs=1,recompute=full,zero=2"), seq_len=2048, global_batch=8)
    assert persistent_gather_seconds(_StepBuilder(zero2), small_dense().layers) == 0.0


def test_gpt_rows_carry_projection_biases():
    row = next(r for r in read_rows(EXTRA) if r["id"] == "X74")
    job, notes, _ = build_job(row)
    assert job.model.linear_bias and "GPT block: a bias on every projection" in notes


def test_synchronous_offload_copy_serialises_the_reduce_scatters():
    """With optimizer offload DeepSpeed 0.6.2 copies each reduced partition to the host synchronously inside
    the gradient hook: the host issues nothing until the bucket's reduce-scatter and the copy are done, so the
    backward takes compute + reduce-scatter + copy per bucket instead of hiding the reduce-scatters."""
    from windtunnel.train.zero3_stream import Submodule, play_step

    # No gathers; each layer's weight gradient fills a bucket, and its bias gradient, arriving right after
    # it, flushes that bucket (a weight larger than the bucket is reduced on its own).
    layer = [Submodule(0.0, 1.0, 2.0, (10.0, 0.001))]
    common = dict(recompute=False, gather=lambda n: 0.0, reduce=lambda n: 0.5 if n >= 1 else 0.0,
                  prefetch_bucket=1.0, max_live=float("inf"), max_reuse=0.0, reduce_bucket=10.0)
    free = play_step(layer, 4, **common)
    blocking = play_step(layer, 4, **common, host_copy=lambda n: 0.25 if n >= 1 else 0.0)
    assert free.backward_s == pytest.approx(4 * 2.0 + 0.5)  # only the last reduce-scatter sticks out
    assert blocking.backward_s == pytest.approx(4 * (2.0 + 0.5 + 0.25))


def test_deepspeed_offload_blocks_on_reduce_only_when_the_stack_says_so():
    offload = "tp=1,pp=1,dp=8,mbs=1,recompute=full,zero=3,offload_optimizer=1"

    def step(stack) -> float:
        return simulate(TrainingJob(model=small_dense(), cluster=load_hardware("h100-sxm", 8), framework=stack,
                                    plan=parse_plan(offload), seq_len=2048, global_batch=8)).step_time_s

    stack = load_stack("deepspeed")
    relaxed = stack.model_copy(update={"memory": stack.memory.model_copy(update={"optimizer_offload_blocking_copy": False})})
    assert stack.memory.optimizer_offload_blocking_copy
    assert step(stack) > step(relaxed)

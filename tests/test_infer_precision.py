"""Serving precisions (W8A8 int8, weight-only int4), GEMM tile autotuning and per-system expert kernels."""

from __future__ import annotations

import pytest

from windtunnel.infer.deployment import InstanceSpec, resolve_instance
from windtunnel.infer.iteration import IterationModel
from windtunnel.infer.kernels import expert_kernel
from windtunnel.infer.memory import bytes_of
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.model import load_model


def _model(model: str, chip: str, **spec) -> IterationModel:
    m = load_model(model)
    return IterationModel(m, resolve_instance(m, chip, InstanceSpec(**spec)))


def test_int8_on_910c_is_faster_than_bf16_and_reads_half_the_weights() -> None:
    bf16 = _model("deepseek-v3", "ascend-910c", role="decode", ep=32, dp=32, precision="bf16")
    int8 = _model("deepseek-v3", "ascend-910c", role="decode", ep=32, dp=32, precision="int8")
    assert int8.plan.kv_precision == "bf16"
    # Decode (weight-bound) and prefill (compute-bound) both gain, by less than the 2x of the peaks.
    for tokens in (32 * 32, 32 * 4096):
        ratio = int8.base(tokens) / bf16.base(tokens)
        assert 0.4 < ratio < 0.95, (tokens, ratio)


def test_weight_only_int4_speeds_decode_not_prefill() -> None:
    bf16 = _model("llama3-70b", "h100-sxm", tp=4, precision="bf16")
    w4 = _model("llama3-70b", "h100-sxm", tp=4, precision="w4a16")
    assert bytes_of("w4a16") == 0.5
    assert w4.base(8) < 0.5 * bf16.base(8)  # decode: weights dominate
    assert w4.base(8192) == pytest.approx(bf16.base(8192), rel=0.1)  # prefill: same 16-bit math


def test_int8_needs_an_int8_peak() -> None:
    m = load_model("llama3-70b")
    with pytest.raises(WindtunnelError, match="int8"):
        resolve_instance(m, "b200", InstanceSpec(tp=4, precision="int8"))


def test_decode_gemm_is_not_padded_to_128_row_tiles() -> None:
    """A decode GEMM of 8 rows is weight-bound: close to its weight bytes over the streaming bandwidth."""
    it = _model("llama3-70b", "h100-sxm", tp=8, precision="bf16")
    n, k = 8192, 8192
    weight_time = 2.0 * n * k / (it.chip.hbm_bandwidth * it.eff.memory_bandwidth)
    assert it._gemm(8, n, k) < 1.2 * weight_time + 2 * it.eff.kernel_overhead_s


def test_tensorrt_llm_09_runs_hopper_experts_on_the_legacy_kernel() -> None:
    kernel = expert_kernel("TensorRT-LLM 0.9.0", "hopper", "fp8")
    assert kernel.precision == "bf16" and kernel.weight_bytes == 1.0 and kernel.rate_share < 1.0
    assert expert_kernel("TensorRT-LLM 0.9.0", "ampere", "fp16").rate_share == 1.0
    assert expert_kernel("vLLM", "hopper", "fp8").precision is None


def test_910c_counted_in_dies() -> None:
    """A CloudMatrix-Infer-style deployment counts EP/DP in dies: half a package's peak, HBM and bandwidth each."""
    m = load_model("deepseek-v3")
    die = resolve_instance(m, "ascend-910c-die", InstanceSpec(role="decode", ep=64, dp=64, precision="int8"))
    package = resolve_instance(m, "ascend-910c", InstanceSpec(role="decode", ep=32, dp=32, precision="int8"))
    assert die.chip.peak("int8") * 2 == package.chip.peak("int8")
    assert die.chip.hbm_bandwidth * 2 == package.chip.hbm_bandwidth
    assert die.devices == 2 * package.devices
    # Attention and dense layers are replicated per DP rank, so dies hold more than half a package's weights.
    assert die.weight_bytes > 0.5 * package.weight_bytes

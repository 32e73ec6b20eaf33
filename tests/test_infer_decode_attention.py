"""The decode-attention kernel class is serving-system data (catalog serving.yaml ``decode_attention``): TensorRT-LLM
0.9 decodes on XQA only for the head shapes its precompiled kernels cover and on masked MHA otherwise; masked MHA
costs a fixed number of SM clocks per (query head, cached token) pair, so it does not speed up with faster HBM;
its throughput is fitted on the TensorRT-LLM 0.5 calibration rows."""

from __future__ import annotations

import pytest

from windtunnel.infer.iteration import IterationModel
from windtunnel.infer.kernels import EXP_PER_SM_CLOCK, decode_attention_kernel, mmha_pair_rate
from windtunnel.specs.hardware import load_chip
from windtunnel.validation import inference
from windtunnel.validation.inference import build_instance, read_rows

TRT09 = "TensorRT-LLM 0.9.0 (gptSessionBenchmark static batching)"


def _decode_cost(row_id: str, hardware: str | None = None, system: str | None = TRT09) -> float:
    """Seconds per cached token of one decode iteration's attention for a validation row's instance."""
    row = next(r for r in read_rows("validation/inference_runs_2.csv") if r["id"] == row_id)
    if hardware:
        row = dict(row, hardware=hardware)
    model = inference._row_model(row, [])
    plan = build_instance(row, model, [], batching="separate", admission="reserve", max_batch=8, max_tokens=8192)
    return IterationModel(model, plan, system=system).decode_per_ctx


def test_xqa_only_for_the_shapes_its_kernels_cover() -> None:
    assert decode_attention_kernel(TRT09, 128, 4).kind == "mmha"  # Mixtral 8x7B at any TP: 4 query heads per KV head
    assert decode_attention_kernel(TRT09, 128, 1).kind == "mmha"  # Llama-2-7B (MHA)
    assert decode_attention_kernel(TRT09, 128, 8).kind == ""  # Llama-2-70B: XQA
    assert decode_attention_kernel("TensorRT-LLM 0.5", 128, 8).kind == "mmha"  # before XQA shipped
    assert decode_attention_kernel("NVIDIA NIM 1.8.0 (TensorRT-LLM backend)", 128, 4).kind == ""
    assert decode_attention_kernel("vLLM 0.6", 128, 4).kind == ""
    assert decode_attention_kernel(None, 128, 4).kind == ""


def test_masked_mha_does_not_speed_up_with_hbm_bandwidth() -> None:
    # Mixtral (masked MHA): the same per-token attention cost on H100 and H200 (pair-bound on both), but slower
    # than a fused kernel would be; without the system the fused kernel follows the HBM ratio (3.35 vs 4.8 TB/s).
    h100, h200 = _decode_cost("A22"), _decode_cost("A22", "h200")
    assert h200 == pytest.approx(h100, rel=1e-9)
    fused_h100, fused_h200 = _decode_cost("A22", system=None), _decode_cost("A22", "h200", system=None)
    assert fused_h100 / fused_h200 == pytest.approx(4.8 / 3.35, rel=1e-6)
    assert h100 > 1.3 * fused_h100 and h200 > 2.0 * fused_h200
    # Llama-2-70B at TP2 (32 query heads over 4 KV heads: XQA): the system changes nothing.
    assert _decode_cost("A19") == pytest.approx(_decode_cost("A19", system=None), rel=1e-12)


def test_masked_mha_rate_scales_with_sms_times_clock_and_needs_a_fit() -> None:
    a100, h100 = load_chip("a100-80g"), load_chip("h100-sxm")
    fit = {"generations": {"hopper": {"mmha_pairs_per_sm_clock": 0.1}, "ampere": {"mmha_pairs_per_sm_clock": 0.1}}}
    assert mmha_pair_rate(h100, fit) == pytest.approx(0.1 * h100.exp_per_s / EXP_PER_SM_CLOCK)
    assert mmha_pair_rate(a100, fit) / mmha_pair_rate(h100, fit) == pytest.approx(a100.exp_per_s / h100.exp_per_s)
    # A generation without calibration rows for the kernel has no figure: bounded by its KV reads only.
    assert mmha_pair_rate(a100, {"generations": {"hopper": {"mmha_pairs_per_sm_clock": 0.1}}}) is None
    assert mmha_pair_rate(a100) is None and mmha_pair_rate(h100) is not None  # the shipped fit: Hopper rows only


def test_calibration_fits_the_kernel_class_for_masked_mha_systems() -> None:
    rows = [r for r in read_rows("validation/inference_runs.csv") if inference.row_role(r) == "calibration"]
    params = {(scope, key, name) for scope, key, name, _, _ in inference._parameters(rows)}
    assert ("generations", "hopper", "mmha_pairs_per_sm_clock") in params
    assert ("systems", "TensorRT-LLM 0.5", "attention_bandwidth") not in params
    assert ("systems", "DeepSeek in-house", "attention_bandwidth") in params


def test_row_notes_say_which_decode_kernel_runs() -> None:
    row = next(r for r in read_rows("validation/inference_runs_2.csv") if r["id"] == "A22")
    notes: list[str] = []
    build_instance(row, inference._row_model(row, []), notes, batching="separate", admission="reserve",
                   max_batch=8, max_tokens=8192)
    assert any("masked MHA" in n and "4 query heads per KV head" in n for n in notes)

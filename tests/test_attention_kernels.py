"""The attention kernel check against published cuDNN benchmarks (validation/attention_kernels.py) and the one
attention cost both it and a layer's graph use (graph/attention_work.py)."""

from __future__ import annotations

import math

import pytest

from conftest import report_as_committed, validation_script
from windtunnel.graph.attention_work import attention_work
from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.specs.model import load_model


def _script():
    return validation_script("attention_kernels")


def test_every_measurement_is_a_catalog_chip_and_a_finite_prediction():
    script = _script()
    rows = script.read_rows()
    assert len(rows) >= 500
    for row in rows:
        assert row["pass"] in ("fwd", "bwd") and row["dtype"] in ("bf16", "fp8", "mxfp8")
        assert row["mask"] in ("causal", "none") and float(row["time_ms"]) > 0
        predicted = script.predicted_ms(row)
        assert math.isfinite(predicted) and predicted > 0


def test_report_is_the_scripts_own(tmp_path, monkeypatch):
    written, committed = report_as_committed(_script(), tmp_path, monkeypatch)
    assert written == committed


def test_the_model_ranks_kernel_calls_as_measured():
    # Across shapes (head dims 64-256, MLA, windows, masks) and sequence lengths on one chip and precision,
    # the kernel model must order the calls as cuDNN's measurements do.
    script = _script()
    scored = [(row, script.predicted_ms(row), float(row["time_ms"])) for row in script.read_rows()]
    agree, total = script._pairs([(p, m) for row, p, m in scored if (row["chip"], row["dtype"], row["pass"])
                                  == ("gb200", "bf16", "fwd")])
    assert total > 100 and agree / total >= 0.9


@pytest.mark.parametrize("causal,window", [(True, None), (False, None), (True, 128)])
def test_attention_work_halves_for_causal_and_caps_for_a_window(causal, window):
    full = attention_work(2, 16, 4, 4096, 4096, 128, 128, causal=False)
    work = attention_work(2, 16, 4, 4096, 4096, 128, 128, causal=causal, window=window,
                          windowed_fraction=1.0 if window else 0.0)
    expected = 128 if window else (2048 if causal else 4096)
    assert work.scores == pytest.approx(full.scores * expected / 4096)
    assert work.flops == pytest.approx(2.0 * work.scores * (128 + 128))
    assert work.shape[5] == (1.0 if window else 0.0)


def test_the_layer_graph_costs_attention_as_attention_work_does():
    model = load_model("llama3-8b")
    graph = layer_forward(model, Sharding(micro_batch=2, seq_len=4096), moe=False)
    op = next(op for op in graph.ops if op.name == "core_attention")
    work = attention_work(2, model.heads, model.kv_heads, 4096, 4096, model.head_dim, model.head_dim)
    assert op.flops == work.flops and op.shape == work.shape


def test_blackwell_fp8_backward_costs_every_causal_score_of_a_windowed_call():
    """cuDNN's FP8 attention backward on Blackwell does not skip the keys outside a sliding window (the
    cudnn-frontend timings grow with the square of the sequence); the 16-bit backward and Hopper's FP8 one do.
    Costed as the check costs a measured call (the script's predicted_ms)."""
    script = _script()

    def backward_s(chip_id: str, precision: str, window: int | None) -> float:
        return script.predicted_ms({"chip": chip_id, "batch": "1", "q_heads": "64", "kv_heads": "8", "q_len": "8192",
                                    "kv_len": "8192", "qk_dim": "64", "v_dim": "64", "window": str(window or ""),
                                    "mask": "causal", "dtype": precision, "pass": "bwd"})

    full = backward_s("gb200", "fp8", None)
    assert backward_s("gb200", "fp8", 128) == pytest.approx(full, rel=0.02)
    assert backward_s("gb200", "bf16", 128) < 0.25 * backward_s("gb200", "bf16", None)
    assert backward_s("h200", "fp8", 128) < 0.25 * backward_s("h200", "fp8", None)

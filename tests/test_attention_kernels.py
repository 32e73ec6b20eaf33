"""The attention kernel check against published cuDNN benchmarks (validation/attention_kernels.py) and the one
attention cost both it and a layer's graph use (graph/attention_work.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import validation_script
from windtunnel.graph.attention_work import attention_work
from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.specs.model import load_model

ROOT = Path(__file__).resolve().parents[1]


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
    script = _script()
    monkeypatch.setattr(script, "REPORT", tmp_path / "ATTENTION_KERNELS.md")
    script.main()
    assert (tmp_path / "ATTENTION_KERNELS.md").read_text() == (ROOT / "validation" / "ATTENTION_KERNELS.md").read_text()


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
    cudnn-frontend timings grow with the square of the sequence); the 16-bit backward and Hopper's FP8 one do."""
    from windtunnel.cost.compute import attention_time
    from windtunnel.cost.efficiency import efficiency_for
    from windtunnel.graph.ops import Op, OpGraph, backward_of
    from windtunnel.specs.hardware import load_chip

    def backward_s(chip_id: str, precision: str, window: int | None) -> float:
        work = attention_work(1, 64, 8, 8192, 8192, 64, 64, window=window, windowed_fraction=1.0 if window else 0.0)
        graph = OpGraph()
        graph.add(Op("core_attention", "attention", flops=work.flops, exponentials=work.exponentials,
                     bytes_moved=work.qkv_bytes + work.out_bytes, shape=work.shape, precision=precision))
        chip = load_chip(chip_id)
        return attention_time(backward_of(graph).ops[0], chip, efficiency_for(chip))

    full = backward_s("gb200", "fp8", None)
    assert backward_s("gb200", "fp8", 128) == pytest.approx(full, rel=0.02)
    assert backward_s("gb200", "bf16", 128) < 0.25 * backward_s("gb200", "bf16", None)
    assert backward_s("h200", "fp8", 128) < 0.25 * backward_s("h200", "fp8", None)

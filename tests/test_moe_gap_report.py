"""The MoE gap diagnostic (validation/moe_gap_report.py): its per-layer arithmetic and its sign."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import validation_script
from windtunnel.validation.training import build_job, read_rows

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", name="script")
def script_fixture():
    return validation_script("moe_gap_report")


@pytest.fixture(scope="module", name="row")
def row_fixture():
    """Qwen3-30B-A3B on 16 H100 (EP16, one micro-batch of 4,096 tokens, global batch 1,024): a throughput row."""
    return next(r for r in read_rows(ROOT / "validation" / "extra_training_runs.csv") if r["id"] == "X103")


def test_layer_microbatches_counts_one_pipeline_ranks_layers_and_microbatches(script, row):
    job, _, _ = build_job(row)
    dp = job.cluster.devices // (job.plan.tp * job.plan.pp * job.plan.cp)
    assert script.layer_microbatches(job) == 1024 // (1 * dp) * math.ceil(48 / job.plan.pp) == 64 * 48


def test_a_row_measured_as_predicted_has_no_unexplained_time(script, row):
    first = script.gap(row)
    predicted = first["ratio"] * float(row["value"])  # the predicted throughput
    exact = script.gap(dict(row, value=repr(predicted)))
    assert exact["ratio"] == pytest.approx(1.0) and exact["unexplained_ms"] == pytest.approx(0.0, abs=1e-9)


def test_unexplained_time_is_positive_when_the_model_is_too_fast_and_splits_over_the_local_experts(script, row):
    job, _, _ = build_job(row)
    slower = script.gap(dict(row, value=repr(float(row["value"]) / 2)))  # half the measured throughput
    base = script.gap(row)
    assert slower["ratio"] == pytest.approx(2 * base["ratio"])
    assert slower["unexplained_ms"] > base["unexplained_ms"]
    assert slower["local"] == 128 // job.plan.ep == 8
    assert slower["per_expert_ms"] == pytest.approx(slower["unexplained_ms"] / 8)
    # The model's MoE layer: wall time at least each stream's busy time, every stream charged.
    layer = slower["layer"]
    assert layer["wall"] >= max(layer["compute"], layer["host"]) > 0 and layer["ep"] > 0

"""Serving systems' behaviour is catalog data looked up by name (infer/systems.py): the lookup rule, that the
data (not words in a row) decides the validator's KV precision, scheduler and two-batch overlap, that a stated
column wins, and that an unknown system gets the stated defaults and is listed."""

from __future__ import annotations

import copy

import pytest

import windtunnel.infer.systems as systems
from windtunnel.infer.deployment import serving_defaults
from windtunnel.infer.systems import lookup_system, system_name, system_options
from windtunnel.validation import inference
from windtunnel.validation.inference import build_instance, read_rows, unknown_systems

ROW = {"id": "X1", "model": "Llama-2-70B", "arch": "dense", "layers": "80", "hidden": "8192", "ffn_hidden": "28672",
       "heads": "64", "kv_heads": "8", "head_dim": "128", "vocab": "32000", "hardware": "h100-sxm",
       "devices_per_instance": "4", "tp": "4", "precision": "fp8", "kv_precision": "", "role": "mixed",
       "serving_system": "TensorRT-LLM 0.9.0 (gptSessionBenchmark static batching)", "metric": "ttft_s",
       "value": "1", "input_len": "128", "output_len": "16", "concurrency": "4"}


def _model(row):
    return inference._row_model(row, [])


def _patched(monkeypatch, edit) -> None:
    """Serve a copy of the catalog's serving defaults with ``edit`` applied to it."""
    data = copy.deepcopy(serving_defaults())
    edit(data)
    monkeypatch.setattr(systems, "serving_defaults", lambda: data)


def test_lookup_rule_strips_details_and_matches_entries_at_a_boundary() -> None:
    assert system_name("TensorRT-LLM 0.9.0 (gptSessionBenchmark static batching)") == "TensorRT-LLM 0.9.0"
    assert system_options("SGLang (PD-disaggregated; DeepEP normal mode, two-batch overlap)") == (
        "pd-disaggregated", "deepep normal mode", "two-batch overlap")
    assert lookup_system("TensorRT-LLM 0.9.0 (static)").entries == ("TensorRT-LLM", "TensorRT-LLM 0.9")
    assert lookup_system("TensorRT-LLM 0.95").entries == ("TensorRT-LLM",)  # '0.9' does not match '0.95'
    assert lookup_system("NVIDIA NIM 1.8.0 (TensorRT-LLM backend)").entries == ("TensorRT-LLM", "NVIDIA NIM")
    sglang = lookup_system("SGLang (DeepGEMM, two-batch overlap)")
    assert sglang.get("two_batch_overlap") and sglang.options == ("two-batch overlap",)
    assert not lookup_system("SGLang (DeepGEMM)").get("two_batch_overlap")


def test_kv_precision_comes_from_the_system_and_a_stated_column_wins() -> None:
    notes: list[str] = []
    assert inference._kv_precision(ROW, "fp8", notes) == "fp8"  # TensorRT-LLM fp8 engines
    moe = dict(ROW, arch="moe")
    assert inference._kv_precision(moe, "fp8", []) == "bf16"  # TensorRT-LLM 0.9's Mixtral path
    assert inference._kv_precision(dict(moe, serving_system="TensorRT-LLM 0.5"), "fp8", []) == "fp8"
    assert inference._kv_precision(dict(ROW, kv_precision="bf16"), "fp8", []) == "bf16"


def test_changing_a_systems_data_changes_the_behaviour(monkeypatch) -> None:
    before = build_instance(ROW, _model(ROW), [], batching="whole", admission="reserve", max_tokens=8192)
    assert not before.spec.tbo

    def edit(data):
        entry = data["systems"]["TensorRT-LLM"]
        entry["kv_precision"] = {"fp8": {"any": {"kv": "bf16", "note": "edited"}}}
        entry["scheduler"] = {"batching": "chunked", "admission": "greedy", "max_tokens": 2048, "note": "edited"}
        entry["two_batch_overlap"] = True

    _patched(monkeypatch, edit)
    notes: list[str] = []
    assert inference._kv_precision(ROW, "fp8", notes) == "bf16" and notes == ["edited"]
    assert lookup_system(ROW["serving_system"]).scheduler()["max_tokens"] == 2048
    plan = build_instance(ROW, _model(ROW), [])
    assert plan.spec.tbo and plan.kv_precision == "bf16"


def test_closed_loop_scheduler_follows_the_system(monkeypatch) -> None:
    captured = {}

    def spy(row, model, notes, **kw):
        captured.update(kw)
        raise inference.WindtunnelError("stop here")

    monkeypatch.setattr(inference, "build_instance", spy)
    with pytest.raises(inference.WindtunnelError):
        inference._served(ROW, _model(ROW), [], None)
    assert (captured["batching"], captured["admission"], captured["max_tokens"]) == ("whole", "reserve", 8192)
    with pytest.raises(inference.WindtunnelError):
        inference._served(dict(ROW, serving_system="SGLang"), _model(ROW), [], None)
    assert (captured["batching"], captured["admission"], captured["max_tokens"]) == (None, "greedy", None)


def test_unknown_system_gets_the_stated_defaults_and_is_listed() -> None:
    row = dict(ROW, serving_system="FooServe 2.1 (two-batch overlap)")
    system = lookup_system(row["serving_system"])
    assert not system.known and system.entries == ()
    assert system.kv_precision("fp8", "dense")[0] == "bf16"
    assert not system.get("two_batch_overlap")  # options of an unknown system change nothing
    assert system.scheduler()["admission"] == "greedy"
    notes: list[str] = []
    assert inference._kv_precision(row, "fp8", notes) == "bf16" and notes == ["kv_precision blank: bf16"]
    assert unknown_systems([row, ROW]) == ["FooServe 2.1"]


def test_every_validation_row_names_a_catalogued_system() -> None:
    from conftest import REPO

    assert unknown_systems(read_rows(REPO / "validation")) == []


def test_eplb_option_puts_the_measured_imbalance_on_the_busiest_rank() -> None:
    """SGLang's stated 'EPLB' gives the sourced 1.109 (TensorRT-LLM tech blog 4 Table 1); 'simulated perfect
    EPLB' stays balanced; the busiest rank's expert GEMMs and its dispatch/combine traffic grow with it."""
    from conftest import REPO
    from windtunnel.infer.iteration import IterationModel

    rows = {r["id"]: r for r in read_rows(REPO / "validation")}
    plans = {}
    for rid in ("I08a", "I08b"):
        row = rows[rid]
        plans[rid] = build_instance(row, _model(row), [])
    assert plans["I08a"].moe_imbalance == pytest.approx(1.109)
    assert plans["I08b"].moe_imbalance == 1.0
    model = _model(rows["I08a"])
    real, perfect = (IterationModel(model, plans[r], system="SGLang") for r in ("I08a", "I08b"))
    tr = 16384
    comm_ratio = real._group_parts(tr)[3] / perfect._group_parts(tr)[3]
    assert 1.05 < comm_ratio < 1.12  # the two all-to-alls scale with the hot rank's tokens
    assert real._expert_part(tr * plans["I08a"].dp) > 1.05 * perfect._expert_part(tr * plans["I08b"].dp)
    assert real.base(tr * plans["I08a"].dp) > perfect.base(tr * plans["I08b"].dp)

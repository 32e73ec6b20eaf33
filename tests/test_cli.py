"""The command line: clear one-line errors for bad input, infeasible plans as results, the JSON contracts,
the Chrome trace. Runs the real entry point in a subprocess (``python -m windtunnel.cli``)."""

from __future__ import annotations

import csv
import io
import json

import pytest

from conftest import REPO, assert_one_clear_error, tiny_training_csv

SIM = ["train", "simulate"]


def test_malformed_yaml_model(cli, tmp_path):
    """A model YAML with broken syntax: the error names the file and the line."""
    path = tmp_path / "broken.yaml"
    path.write_text("id: broken\nlayers: [1, 2\nhidden: 4096\n")
    proc = cli(*SIM, "--model", str(path), "--hardware", "h100-sxm", "--devices", "8", "--global-batch", "8")
    line = assert_one_clear_error(proc, "broken.yaml", "YAML")
    assert "line" in line


def test_invalid_field_in_model_yaml(cli, tmp_path):
    """A well-formed model YAML with a bad value: the error names the field."""
    path = tmp_path / "neg.yaml"
    path.write_text("layers: -3\nhidden: 1024\nffn_hidden: 4096\nheads: 16\n")
    proc = cli(*SIM, "--model", str(path), "--hardware", "h100-sxm", "--devices", "8", "--global-batch", "8")
    assert_one_clear_error(proc, "layers")


def test_unknown_chip(cli):
    """An unknown chip: the error names the field 'hardware' and lists known chips."""
    proc = cli(*SIM, "--model", "llama3-8b", "--hardware", "tpu-v9", "--devices", "8", "--global-batch", "8")
    assert_one_clear_error(proc, "tpu-v9", "hardware", "h100-sxm")


def test_unknown_model(cli):
    """An unknown model: the error names the field 'model' and lists catalog models."""
    proc = cli(*SIM, "--model", "gpt-9", "--hardware", "h100-sxm", "--devices", "8", "--global-batch", "8")
    assert_one_clear_error(proc, "gpt-9", "model", "llama3-8b")


def test_tp_not_dividing_heads(cli):
    """tp=7 for a 64-head model: the error names 'tp' and the valid values."""
    proc = cli(*SIM, "--model", "llama3-70b", "--hardware", "h100-sxm", "--devices", "56", "--global-batch", "8",
               "--plan", "tp=7")
    assert_one_clear_error(proc, "'tp'", "64", "1, 2, 4, 8, 16, 32, 64")


def test_unknown_plan_key(cli):
    """An unknown plan key: the error names the key, the field 'plan' and the valid keys."""
    proc = cli(*SIM, "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--global-batch", "8",
               "--plan", "tp=2,flux=3")
    assert_one_clear_error(proc, "flux", "plan", "tp")


def test_ep_not_dividing_experts(cli):
    """ep=3 for an 8-expert model: the error names 'ep' and the valid values."""
    proc = cli(*SIM, "--model", "mixtral-8x7b", "--hardware", "h100-sxm", "--devices", "24", "--global-batch", "24",
               "--plan", "ep=3")
    assert_one_clear_error(proc, "'ep'", "8 experts", "1, 2, 4, 8")


def test_non_integer_plan_value(cli):
    """tp=abc: the error names the field."""
    proc = cli(*SIM, "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--global-batch", "8",
               "--plan", "tp=abc")
    assert_one_clear_error(proc, "tp", "abc")


def test_global_batch_not_divisible(cli):
    """A global batch that dp*mbs does not divide: the error names 'global' batch and suggests valid ones."""
    proc = cli(*SIM, "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--global-batch", "12",
               "--plan", "tp=1,mbs=1")
    assert_one_clear_error(proc, "Global batch 12", "16")


# ---- infeasible plan is a result ---------------------------------------------------------------------


def test_infeasible_plan_is_a_result(cli):
    """405B on 64 H100s with tp=8,pp=8 and no recompute does not fit: exit 0, JSON says why."""
    proc = cli(*SIM, "--model", "llama3-405b", "--hardware", "h100-sxm", "--devices", "64", "--seq-len", "8192",
               "--global-batch", "16", "--plan", "tp=8,pp=8,recompute=none", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["feasible"] is False
    assert "GiB" in data["infeasible_reason"] and "available" in data["infeasible_reason"]
    assert data["peak_memory_bytes"] > 80 * 2**30
    assert data["step_time_s"] > 0


# ---- JSON contracts ------------------------------------------------------------------------------------

RESULT_KEYS = {"step_time_s", "tokens_per_s", "tokens_per_s_per_device", "model_tflops_per_device", "mfu", "hfu",
               "peak_memory_bytes", "feasible", "infeasible_reason", "breakdown", "assumptions"}


def test_train_simulate_unfused_loss_flag(cli):
    """`--unfused-loss` costs Megatron-LM's fp32 cross-entropy: a slower step, stated in the assumptions."""
    args = (*SIM, "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--seq-len", "2048",
            "--global-batch", "16", "--plan", "tp=1,pp=1", "--json")
    fused, unfused = cli(*args), cli(*args, "--unfused-loss")
    assert fused.returncode == 0 and unfused.returncode == 0, (fused.stderr, unfused.stderr)
    fused, unfused = json.loads(fused.stdout), json.loads(unfused.stdout)
    assert unfused["step_time_s"] > fused["step_time_s"]
    assert any("unfused fp32 cross-entropy" in a for a in unfused["assumptions"])


def test_train_simulate_json_contract_and_trace(cli, tmp_path):
    """`train simulate --json --trace`: the result keys, a breakdown summing to the step time, and a Chrome
    trace of 'X' events with numeric ts/dur that ends at the step time."""
    trace = tmp_path / "out.json"
    proc = cli(*SIM, "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "16", "--seq-len", "2048",
               "--global-batch", "32", "--plan", "tp=2,pp=2", "--json", "--trace", str(trace))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) >= RESULT_KEYS
    assert data["feasible"] is True and data["infeasible_reason"] is None
    for key in ("step_time_s", "tokens_per_s", "tokens_per_s_per_device", "model_tflops_per_device", "mfu", "hfu",
                "peak_memory_bytes"):
        assert isinstance(data[key], float) and data[key] > 0, key
    assert isinstance(data["breakdown"], dict) and data["breakdown"]
    assert all(isinstance(v, float) for v in data["breakdown"].values())
    assert sum(data["breakdown"].values()) == pytest.approx(data["step_time_s"], rel=0.01)
    assert isinstance(data["assumptions"], list) and data["assumptions"]
    assert all(isinstance(a, str) and a for a in data["assumptions"])

    doc = json.loads(trace.read_text())
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    assert events
    for e in events:
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float))
        assert e["ts"] >= 0 and e["dur"] > 0
    end_us = max(e["ts"] + e["dur"] for e in events)
    assert end_us == pytest.approx(data["step_time_s"] * 1e6, rel=1e-3)
    assert {e["pid"] for e in events} == {0, 1}  # one process per pipeline rank


def test_trace_without_json_writes_file(cli, tmp_path):
    """`--trace` alone (table output) still writes a valid trace."""
    trace = tmp_path / "t.json"
    proc = cli(*SIM, "--model", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--devices", "8", "--seq-len", "2048",
               "--global-batch", "8", "--plan", "ep=8", "--trace", str(trace))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(trace.read_text())
    assert any(e.get("ph") == "X" for e in doc["traceEvents"])


def _tiny_csv(tmp_path, ids=("21", "67", "103")):
    return tiny_training_csv(tmp_path, ids)


@pytest.fixture(scope="module")
def validation_json(tmp_path_factory):
    path, rows = _tiny_csv(tmp_path_factory.mktemp("val"))
    from conftest import run_cli

    proc = run_cli("validate", "training", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), rows


def test_validate_training_json_contract(validation_json):
    """`validate training --json`: rows with the documented keys, and the summary counts."""
    data, rows = validation_json
    assert [r["id"] for r in data["rows"]] == ["21", "67", "103"]
    for row in data["rows"]:
        assert {"id", "metric", "measured", "predicted", "error", "role", "status", "assumptions"} <= set(row)
        assert isinstance(row["assumptions"], list)
        assert row["measured"] == pytest.approx(float(rows[row["id"]]["value"]))
        assert row["metric"] == rows[row["id"]]["metric"]
    summary = data["summary"]
    assert {"median_abs_error", "max_abs_error", "n_predicted", "n_skipped"} <= set(summary)
    assert summary["n_predicted"] == 2 and summary["n_skipped"] == 1


def test_validate_training_errors_and_skips(validation_json):
    """error == (predicted - measured) / measured; the TPU row is skipped with a reason and no prediction."""
    data, _ = validation_json
    by_id = {r["id"]: r for r in data["rows"]}
    for rid in ("21", "67"):
        row = by_id[rid]
        assert row["predicted"] is not None and row["predicted"] > 0
        assert row["error"] == pytest.approx((row["predicted"] - row["measured"]) / row["measured"], rel=1e-9)
        assert row["status"].startswith("predicted")
    tpu = by_id["103"]
    assert tpu["predicted"] is None and tpu["error"] is None
    assert tpu["status"].startswith("skipped") and "tpu-v4" in tpu["status"]
    # summary errors are over validation rows only: both predicted rows here are single-node calibration rows
    predicted_validation = [abs(r["error"]) for r in data["rows"] if r["role"] == "validation" and r["error"] is not None]
    if predicted_validation:
        assert data["summary"]["max_abs_error"] == pytest.approx(max(predicted_validation))
    else:
        assert data["summary"]["max_abs_error"] is None


def test_validate_training_reports_the_derived_dp(validation_json):
    """The plan a validated row reports has dp filled in (n_devices / (tp*pp*cp)), not the placeholder dp=0."""
    data, rows = validation_json
    for rid, dp in (("21", 1), ("67", 4)):
        plan = next(a for a in {r["id"]: r for r in data["rows"]}[rid]["assumptions"] if a.startswith("plan "))
        assert f"dp={dp}," in plan, plan


def test_validate_missing_csv_is_one_clear_error(cli, tmp_path):
    """A missing CSV: exit non-zero, one error line, no traceback."""
    proc = cli("validate", "training", str(tmp_path / "nope.csv"), "--json")
    assert_one_clear_error(proc, "nope.csv")


def test_catalog_list_json(cli):
    """`catalog list --json` lists chips, clusters and models."""
    proc = cli("catalog", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert "h100-sxm" in data["chips"] and "cloudmatrix384" in data["clusters"] and "deepseek-v3" in data["models"]


@pytest.mark.parametrize("flag,value", [("--seq-len", "0"), ("--global-batch", "0"), ("--seq-len", "-4096")])
def test_nonpositive_seq_len_or_batch_is_a_clear_error(cli, flag, value):
    """A zero or negative sequence length or global batch is one clear error naming the field, no traceback."""
    args = {"--seq-len": "4096", "--global-batch": "8", flag: value}
    proc = cli(*SIM, "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8",
               "--seq-len", args["--seq-len"], "--global-batch", args["--global-batch"], "--json")
    assert_one_clear_error(proc, flag.lstrip("-").replace("-", "_"))


def test_validation_skips_a_precision_it_does_not_model():
    """A row in a precision the model has no peak or kernels for (e.g. NVFP4) is skipped with the
    reason, never silently costed in bf16."""
    from windtunnel.validation.training import build_job

    text = (REPO / "validation" / "training_runs.csv").read_text(encoding="utf-8")
    row = next(r for r in csv.DictReader(io.StringIO(text)) if r["id"] == "67")
    job, _, reason = build_job({**row, "precision": "nvfp4"})
    assert job is None and "nvfp4" in reason
    job, _, reason = build_job(row)
    assert job is not None and reason is None and job.plan.precision == row["precision"]

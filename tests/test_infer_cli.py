"""`windtunnel infer ...` and `windtunnel validate inference` through the real entry point (subprocess)."""

from __future__ import annotations

import json

import pytest

from conftest import REPO, assert_one_clear_error

SMALL = ["--model", "llama3-8b", "--hardware", "h100-sxm"]
TRAFFIC = "poisson:rate=8,input=lognormal(800,0.6),output=lognormal(150,0.6),requests=150"


def test_simulate_json_contract(cli):
    proc = cli("infer", "simulate", *SMALL, "--deployment", "mixed:tp=1,replicas=2", "--traffic", TRAFFIC,
               "--slo", "ttft=1s,tpot=50ms", "--seed", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        assert set(data[key]) == {"p50", "p90", "p99", "mean"}
    assert set(data["throughput"]) >= {"requests_per_s", "requests_per_s_per_device", "output_tokens_per_s",
                                       "output_tokens_per_s_per_device", "total_tokens_per_s"}
    assert set(data["goodput"]) == {"requests_per_s", "requests_per_s_per_device", "slo_attainment"}
    assert data["devices"] == 2 and data["completed"] == 150 and data["seed"] == 3
    assert len(data["series"]["t_s"]) == len(data["series"]["kv_fraction"]) == len(data["series"]["queue"])
    assert data["slo"] == {"ttft_s": 1.0, "tpot_s": pytest.approx(0.05)}


def test_simulate_human_output_disaggregated(cli):
    proc = cli("infer", "simulate", *SMALL, "--deployment", "prefill:tp=1;decode:tp=1", "--traffic", TRAFFIC)
    assert proc.returncode == 0, proc.stderr
    assert "goodput at SLO" in proc.stdout and "TTFT" in proc.stdout


@pytest.mark.parametrize("deployment, needles", [
    ("mixed:tp=3", ["tp", "3", "valid tp"]),
    ("mixed:tp=1;router=random", ["router", "random", "least_tokens"]),
    ("prefill:tp=1", ["decode"]),
])
def test_bad_deployment_is_assert_one_clear_error(cli, deployment, needles):
    proc = cli("infer", "simulate", *SMALL, "--deployment", deployment, "--traffic", TRAFFIC)
    assert_one_clear_error(proc, *needles)


@pytest.mark.parametrize("traffic, needles", [
    ("poisson:rate=abc,input=10,output=10", ["rate", "abc"]),
    ("poisson:rate=2,input=normal(5,1),output=10", ["input", "lognormal(mean,sigma)"]),
    ("trace:missing.csv", ["missing.csv"]),
])
def test_bad_traffic_is_assert_one_clear_error(cli, traffic, needles):
    proc = cli("infer", "simulate", *SMALL, "--deployment", "mixed:tp=1", "--traffic", traffic)
    assert_one_clear_error(proc, *needles)


def test_validate_inference_json(cli, tmp_path):
    """Same kind of table and JSON as validate training; the committed calibration meets the issue's target."""
    out = tmp_path / "report.md"
    proc = cli("validate", "inference", str(REPO / "validation" / "inference_runs.csv"), "--json", "--out", str(out),
               timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data["summary"]) >= {"median_abs_error", "max_abs_error", "n_predicted", "n_skipped"}
    for row in data["rows"]:
        assert set(row) >= {"id", "metric", "measured", "predicted", "error", "role", "status", "assumptions"}
        assert row["role"] in ("calibration", "validation")
    roles = {r["id"]: r["role"] for r in data["rows"]}
    assert roles["I04"] == roles["I27"] == "calibration" and roles["I31a"] == roles["I06"] == "validation"
    assert data["summary"]["n_predicted"] + data["summary"]["n_skipped"] == len(data["rows"])
    assert data["summary"]["median_abs_error"] <= 0.20
    assert "Split rule" in out.read_text()


def test_search_json(cli):
    proc = cli("infer", "search", *SMALL, "--devices", "2", "--traffic", TRAFFIC, "--slo", "ttft=1s,tpot=50ms",
               "--top", "3", "--json", "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert len(data["deployments"]) == 3 and data["feasible"] is True
    assert data["best"]["attainment"] >= 0.99 and data["best"]["devices"] <= 2
    assert data["best_colocated"]["kind"] == "colocated"
    assert "screen: " in proc.stderr  # progress on stderr, plain lines off a terminal

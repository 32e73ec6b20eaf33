"""Round trip (issue 18 item 1): every plan `train search` prints (the --wide table, the narrow table's
"best plan (for --plan)" line, --json plans, Pareto front and baseline, plans.csv) is accepted back by
`train simulate --plan` and gives the step time the search reported; every deployment `infer search` prints
(table, --json deployments, their equivalents, best, baseline) is accepted back by `infer simulate` and gives
the SLO attainment the search reported."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import REPO
from windtunnel.cli.app import app

JOBS = [
    # (model, hardware, devices, global batch, extra search options; simulate gets the plan-independent ones)
    ("llama3-8b", "h100-sxm", 64, 256, ["--framework", "torchtitan"]),
    ("qwen3-30b-a3b", "h100-sxm", 64, 512, ["--precision", "fp8", "--dispatcher", "alltoall"]),
]
ROW = re.compile(r"^[│|]\s*\d+\s*[│|]\s*(\S+)\s*[│|]")


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250"}
    proc = subprocess.run([sys.executable, "-m", "windtunnel.cli", *args], capture_output=True, text=True, cwd=str(REPO),
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def _simulate(argv: list[str]) -> dict:
    result = CliRunner().invoke(app, [*argv, "--json"])
    assert result.exit_code == 0, (argv, result.exception, result.output[-1000:])
    return json.loads(result.stdout)


@pytest.fixture(scope="module", params=JOBS, ids=[job[0] for job in JOBS])
def train_search(request, tmp_path_factory):
    model, hardware, devices, batch, extra = request.param
    job = ["--model", model, "--hardware", hardware, "--devices", str(devices), "--global-batch", str(batch)]
    search = ["train", "search", *job, "--top", "6", "--refine", "8", *extra]
    out = tmp_path_factory.mktemp("plans") / "plans.csv"
    doc = json.loads(_cli(*search, "--json", "--out", str(out), "--baseline", "tp=2,pp=1").stdout)
    wide = _cli(*search, "--wide").stdout
    narrow = _cli(*search).stdout
    framework = extra[extra.index("--framework") + 1] if "--framework" in extra else "megatron"
    return job + ["--framework", framework], doc, out, wide, narrow


def test_every_printed_plan_simulates_to_the_searched_step_time(train_search):
    job, doc, out, wide, narrow = train_search
    expected = {row["plan"]: row["step_time_s"] for row in doc["plans"] + doc["pareto"]}
    expected[doc["baseline"]["plan"]] = doc["baseline"]["step_time_s"]
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and {r["model"] for r in rows} == {doc["model"]} and {int(r["devices"]) for r in rows} == {doc["devices"]}
    assert {int(r["seq_len"]) for r in rows} == {doc["seq_len"]} and {r["framework"] for r in rows} == {doc["framework"]}
    printed = {r["plan"]: float(r["step_time_s"]) for r in rows}
    table = [m.group(1) for m in map(ROW.match, wide.splitlines()) if m]
    assert len(table) == len(doc["plans"]), wide
    printed.update(zip(table, (row["step_time_s"] for row in doc["plans"]), strict=True))
    best = re.search(r"best plan \(for --plan\): (\S+)", narrow)
    if best:  # the narrow table names the best plan in full
        printed[best.group(1)] = doc["plans"][0]["step_time_s"]
    printed.update(expected)
    for plan, step in printed.items():
        result = _simulate(["train", "simulate", *job, "--plan", plan])
        assert result["step_time_s"] == pytest.approx(step, rel=0.01), plan


INFER = [("llama3-8b", "h100-sxm", 8, "poisson:rate=5,input=512,output=128", ["--slo", "ttft=1s,tpot=50ms"]),
         ("qwen3-30b-a3b", "h100-sxm", 8, "poisson:rate=8,input=1024,output=128", ["--mode", "disaggregated"])]


@pytest.mark.parametrize("model,hardware,devices,traffic,extra", INFER, ids=[job[0] for job in INFER])
def test_every_printed_deployment_simulates(model, hardware, devices, traffic, extra):
    job = ["--model", model, "--hardware", hardware, "--traffic", traffic]
    search = ["infer", "search", *job, "--devices", str(devices), "--requests", "200", "--top", "5", *extra]
    baseline = "mixed:tp=2"
    doc = json.loads(_cli(*search, "--json", "--baseline", baseline).stdout)
    text = _cli(*search, "--wide").stdout  # the full table (the default one fits 80 columns)
    slo = extra[extra.index("--slo") + 1] if "--slo" in extra else "ttft=2s,tpot=100ms"
    attained = {row["deployment"]: row["attainment"] for row in doc["deployments"]}
    printed = set(attained)
    for row in doc["deployments"]:
        printed.update(row.get("equivalent") or [])
    for key in ("best", "best_colocated", "best_disaggregated", "baseline"):
        if isinstance(doc.get(key), dict) and doc[key].get("deployment"):
            printed.add(doc[key]["deployment"])
    table = [m.group(1) for m in map(ROW.match, text.splitlines()) if m]
    assert table == [row["deployment"] for row in doc["deployments"]], text
    assert baseline in printed or any(d.startswith(baseline) for d in printed)
    for deployment in sorted(printed):
        result = _simulate(["infer", "simulate", *job, "--deployment", deployment, "--slo", slo])
        if deployment in attained:  # the search re-simulated its winners on the full traffic, same seed
            assert result["goodput"]["slo_attainment"] == pytest.approx(attained[deployment], abs=1e-9), deployment

"""Readable output at 80 columns (issue 18 item 4): the 20-plan `train search` table on one line per plan,
validation names whole, plan and deployment keys listed from their models, HTML tables that scroll."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

from conftest import REPO
from windtunnel.cli.keys import DEPLOYMENT_KEYS, PLAN_KEYS, deployment_key_rows, plan_key_rows
from windtunnel.search.html import counts_table
from windtunnel.specs.plan import Plan, parse_plan


def _run(*args: str, columns: int = 80) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns), "WINDTUNNEL_PROGRESS": "0"}
    return subprocess.run([sys.executable, "-m", "windtunnel.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=str(REPO), env=env)


SEARCH = ("train", "search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "64", "--global-batch",
          "256", "--workers", "1")


def test_train_search_20_plans_fit_80_columns_in_under_50_lines(tmp_path):
    proc = _run(*SEARCH, "--state", str(tmp_path / "s.json"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) < 50, proc.stdout
    assert max(len(line) for line in lines) <= 80
    ranks = [line.split()[0] for line in lines if line.split() and line.split()[0].isdigit()]
    assert ranks == [str(i) for i in range(1, 21)]  # 20 plans, one line each
    assert "…" not in proc.stdout
    best = next(line for line in lines if line.startswith("best plan (for --plan): ")).split(": ", 1)[1]
    assert parse_plan(best).tp >= 1  # the printed best plan goes back into --plan


def test_train_search_wide_keeps_the_full_plans(tmp_path):
    proc = _run(*SEARCH, "--top", "3", "--wide", "--state", str(tmp_path / "s.json"), columns=200)
    assert proc.returncode == 0, proc.stderr
    assert "recompute=" in proc.stdout and "largest overhead" in proc.stdout


def test_validation_table_keeps_group_names_at_80_columns():
    proc = _run("validate", "training", "validation/training_runs.csv")
    assert proc.returncode == 0, proc.stderr
    assert "blackwell/fp8" in proc.stdout and "…" not in proc.stdout and "..." not in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80
    assert "tok/s/dev = tokens_per_s_per_device" in " ".join(proc.stdout.split())  # abbreviations explained


def test_plan_keys_are_the_plan_models_fields_each_explained():
    assert list(PLAN_KEYS) == list(Plan.model_fields)
    rows = plan_key_rows()
    assert [r[0] for r in rows] == list(Plan.model_fields) and all(r[3] for r in rows)
    assert dict((r[0], r[1]) for r in rows)["recompute"] == "none|selective|full"


def test_deployment_keys_are_the_instance_spec_keys_each_explained():
    from windtunnel.infer.deployment import INSTANCE_KEYS, InstanceSpec

    assert set(DEPLOYMENT_KEYS) == set(INSTANCE_KEYS) <= {f.name for f in dataclasses.fields(InstanceSpec)}
    assert all(r[3] for r in deployment_key_rows())


def test_help_names_every_plan_and_deployment_key():
    train = _run("train", "search", "--help", columns=200).stdout
    assert all(key in train for key in Plan.model_fields) and "windtunnel train plan-keys" in train
    infer = _run("infer", "simulate", "--help", columns=200).stdout
    assert "max_tokens" in infer and "windtunnel infer deployment-keys" in infer
    listing = _run("train", "plan-keys").stdout
    assert "cp_algo" in listing and "ring | allgather" in listing
    assert max(len(line) for line in listing.splitlines()) <= 80


def test_html_candidate_counts_are_a_table_in_a_scrolling_box():
    page = counts_table({"enumerated": 1200, "pruned": {"out of memory": 100, "too small": 20}, "refined": 4})
    assert page.startswith('<div class="scroll"><table>') and "{" not in page
    assert "<td class=n>120</td>" in page and "1,200" in page


def test_infer_search_table_fits_80_columns():
    proc = _run("infer", "search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--traffic",
                "poisson:rate=8,input=lognormal(800,0.6),output=lognormal(150,0.6),requests=150", "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80 and "…" not in proc.stdout
    ranks = [line.split()[0] for line in proc.stdout.splitlines() if line.split() and line.split()[0].isdigit()]
    assert ranks[:3] == ["1", "2", "3"]


def test_html_reports_put_wide_tables_in_scrolling_boxes(tmp_path):
    report = tmp_path / "search.html"
    proc = _run(*SEARCH, "--top", "3", "--report", str(report), "--state", str(tmp_path / "s.json"))
    assert proc.returncode == 0, proc.stderr
    page = report.read_text()
    assert "overflow-x:auto" in page and '<div class="scroll"><table>' in page
    counts = page.split("<h2>Candidates</h2>", 1)[1][:4000]
    assert counts.startswith('<div class="scroll"><table>') and '"enumerated"' not in counts  # a table, not JSON


def test_train_job_phase_table_fits_80_columns_with_whole_headers():
    proc = _run("train", "job", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "256",
                "--phase", "name=pretrain-8k,seq=8192,tokens=1T,batch=512,plan=tp=1;zero=3",
                "--phase", "name=long-128k,seq=131072,tokens=50B,batch=32,plan=tp=8;cp=4", "--replications", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    table = lines[:next(i for i, line in enumerate(lines) if line.startswith("step s:"))]
    assert max(len(line) for line in table) <= 80 and "…" not in proc.stdout
    header = next(line for line in lines if line.startswith("phase"))
    assert header.split() == ["phase", "seq", "tokens", "step", "s", "tok/s", "ETTR", "ckpt", "s", "every", "min",
                              "wall", "d", "intr"]
    assert any(line.startswith("pretrain-8k") for line in lines) and any(line.startswith("long-128k") for line in lines)
    assert any(line.startswith("step s: step time (s)") for line in lines)  # the short headers are explained

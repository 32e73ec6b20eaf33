"""`windtunnel run scenario.yaml` (issue 18 item 6): every example scenario runs and prints the JSON its verbs
print; a study is validated before anything runs (unknown keys, kinds and unit-less quantities are one clear
error naming the study and the key); the examples/ folder (one scenario per pillar, a notebook-style API
script, the older examples) all run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import REPO, assert_one_clear_error
from windtunnel.cli.app import app
from windtunnel.specs.errors import WindtunnelError

EXAMPLES = REPO / "examples"


def run(*argv: str):
    return CliRunner().invoke(app, list(argv))


def run_json(*argv: str) -> dict:
    result = run(*argv, "--json")
    assert result.exit_code == 0, (argv, result.exception, result.output[-1500:])
    return json.loads(result.stdout)


@pytest.mark.parametrize("name,kinds", [
    ("train.yaml", ["train-simulate", "train-search"]),
    ("infer.yaml", ["infer-simulate", "infer-search"]),
    ("avail.yaml", ["avail-markov", "avail-simulate"]),
    ("study.yaml", ["train-search", "avail-goodput", "infer-simulate"]),
])
def test_example_scenarios_run(name, kinds):
    doc = run_json("run", str(EXAMPLES / name))
    assert [s["kind"] for s in doc["studies"]] == kinds
    assert doc["provenance"]["command"] == "windtunnel run" and doc["windtunnel_version"]
    assert str(EXAMPLES / name) in doc["provenance"]["input_files_sha256"]
    for study in doc["studies"]:
        assert study["command"].startswith("windtunnel " + study["kind"].replace("-", " ", 1))
        assert study["result"]["provenance"]["command"] == "windtunnel " + study["kind"].replace("-", " ", 1)


def test_one_study_prints_the_verbs_json():
    doc = run_json("run", str(EXAMPLES / "job.yaml"))
    assert doc["provenance"]["command"] == "windtunnel train job" and doc["phases"] and doc["warnings"] == []
    argv = ["train", "job", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "256", "--tokens", "1T",
            "--seq-len", "8192", "--global-batch", "1024", "--plan", "tp=2,pp=1,recompute=selective,zero=1",
            "--faults", "catalog:llama3-54day", "--checkpoint-every", "30min", "--storage-bandwidth", "2TB/s",
            "--price", "2.5/device-hour", "--replications", "4"]
    assert run_json(*argv) == doc  # the same JSON, provenance included


def test_text_output_names_each_study():
    result = run("run", str(EXAMPLES / "avail.yaml"))
    assert result.exit_code == 0, result.output
    assert "== Markov model: windtunnel avail markov --devices 16384" in result.stdout
    assert "availability" in result.stdout


def test_notebook_script_runs():
    proc = subprocess.run([sys.executable, str(EXAMPLES / "notebook.py")], capture_output=True, text=True,
                          cwd=str(REPO), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tokens/s" in proc.stdout and "SLO attainment" in proc.stdout and "ETTR" in proc.stdout


def test_older_examples_still_run():
    wt = f"{sys.executable} -m windtunnel.cli"
    proc = subprocess.run(["bash", str(EXAMPLES / "drug_screening.sh")], capture_output=True, text=True,
                          cwd=str(REPO), timeout=300, env={**os.environ, "WT": wt})
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = run_json("train", "simulate", "--model", str(EXAMPLES / "llama3-8b-layer-dag.yaml"), "--hardware",
                   "h100-sxm", "--devices", "8", "--seq-len", "8192", "--global-batch", "64")
    assert doc["step_time_s"] > 0


def _error(tmp_path, text: str) -> str:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    result = run("run", str(path), "--json")
    assert isinstance(result.exception, WindtunnelError), (result.exit_code, result.output)
    message = str(result.exception)
    assert "\n" not in message
    return message


SIM = "kind: train-simulate\nmodel: llama3-8b\nhardware: h100-sxm\ndevices: 8\nglobal_batch: 8\n"


@pytest.mark.parametrize("text,needles", [
    (SIM + "plna: tp=2\n", ["'plna'", "did you mean 'plan'", "global_batch"]),
    (SIM.replace("train-simulate", "train-simulat"), ["'kind'", "did you mean 'train-simulate'", "infer-search"]),
    ("kind: avail-markov\ndevices: 1024\ncheckpoint_every: 30\n", ["study 1", "checkpoint-every", "'30'", "min"]),
    ("kind: infer-simulate\nmodel: llama3-8b\nhardware: h100-sxm\n", ["study 1", "deployment"]),
    (SIM + "devices: eight\n", ["'devices'", "integer"]),
    (SIM + "json: true\n", ["'json'", "not a study option"]),
    ("studies:\n  - " + SIM.replace("\n", "\n    ") + "\nstudy: x\n", ["unknown top-level key 'study'"]),
    ("kind: [train-simulate\n", ["YAML", "line"]),
    ("studies: 3\n", ["studies"]),
])
def test_bad_scenarios_are_one_clear_error(tmp_path, text, needles):
    message = _error(tmp_path, text)
    for needle in needles:
        assert needle in message, message


def test_nothing_runs_before_every_study_is_valid(tmp_path):
    (tmp_path / "out.csv").unlink(missing_ok=True)
    text = ("studies:\n  - {kind: train-search, model: llama3-8b, hardware: h100-sxm, devices: 8, global_batch: 8, "
            "out: out.csv}\n  - {kind: avail-markov, devices: 8, horizon: 5}\n")
    message = _error(tmp_path, text)
    assert "horizon" in message and not (tmp_path / "out.csv").exists()


def test_relative_paths_are_the_scenario_folders(tmp_path):
    (tmp_path / "my-model.yaml").write_text((REPO / "src/windtunnel/catalog/models/llama3-8b.yaml").read_text())
    path = tmp_path / "s.yaml"
    path.write_text(SIM.replace("model: llama3-8b", "model: my-model.yaml"))
    doc = run_json("run", str(path))
    assert doc["step_time_s"] > 0 and doc["provenance"]["inputs"]["model"] == str(tmp_path / "my-model.yaml")


def test_cli_error_is_exit_2(cli, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SIM + "seq: 8\n")
    assert_one_clear_error(cli("run", str(path)), "'seq'", "did you mean 'seq_len'")

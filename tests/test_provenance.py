"""Provenance (issue 18 item 6): every JSON result a command prints carries windtunnel_version, the command and
its resolved inputs, the catalog digest and a digest of every input file; `--version` says the same version."""

from __future__ import annotations

import hashlib
import json

import pytest
from typer.testing import CliRunner

from windtunnel import __version__
from windtunnel.cli.app import app
from windtunnel.report.provenance import catalog_digest
from windtunnel.specs.yamlio import catalog_dir

TRAIN = ["--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--global-batch", "8"]
SERVE = ["--model", "llama3-8b", "--hardware", "h100-sxm", "--traffic", "poisson:rate=2,input=256,output=32"]


def run_json(*argv: str) -> dict:
    result = CliRunner().invoke(app, [*argv, "--json"])
    assert result.exit_code == 0, (argv, result.exception, result.output[-800:])
    return json.loads(result.stdout)


@pytest.mark.parametrize("argv,inputs", [
    (["train", "simulate", *TRAIN, "--plan", "tp=2"], {"model": "llama3-8b", "plans": ["tp=2"], "seq_len": 4096,
                                                       "framework": "megatron"}),
    (["train", "search", *TRAIN, "--top", "2", "--refine", "2"], {"devices": 8, "global_batch": 8}),
    (["infer", "simulate", *SERVE, "--deployment", "mixed:tp=1"], {"deployment": "mixed:tp=1", "seed": 0}),
    (["avail", "markov", "--devices", "1024"], {"faults": "catalog:llama3-54day", "step_time": "10s"}),
    (["train", "job", *TRAIN, "--tokens", "1B", "--replications", "2"], {"tokens": "1B"}),
    (["catalog", "list"], {}),
])
def test_every_json_result_carries_provenance(argv, inputs):
    doc = run_json(*argv)
    assert doc["windtunnel_version"] == __version__
    block = doc["provenance"]
    assert block["command"] == "windtunnel " + " ".join(argv[:2])
    for key, value in inputs.items():
        assert block["inputs"][key] == value, key
    assert "as_json" not in block["inputs"]
    assert block["catalog"] == catalog_digest() and len(block["catalog"]["sha256"]) == 16


def test_input_files_are_digested(tmp_path):
    model = tmp_path / "my-model.yaml"
    model.write_text((catalog_dir("models") / "llama3-8b.yaml").read_text())
    doc = run_json("train", "simulate", "--model", str(model), *TRAIN[2:])
    assert doc["provenance"]["input_files_sha256"] == {str(model): hashlib.sha256(model.read_bytes()).hexdigest()[:16]}


def test_catalog_digest_covers_the_catalog():
    digest = catalog_digest()
    assert digest["files"] == sum(1 for p in catalog_dir().rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def test_version_flag_matches():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"windtunnel {__version__}"

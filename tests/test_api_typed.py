"""The Python API's searches and availability (issue 18 item 7): top-level names, typed results whose field
names are the JSON keys of the matching CLI verb, to_json_dict() equal to the CLI's JSON, to_frame()."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import pandas as pd

import windtunnel
from conftest import REPO

SEARCH = dict(model="llama3-8b", hardware="h100-sxm", devices=16, global_batch=32)
PINS = {"pp": [1, 2], "vpp": [1], "cp": [1], "mbs": [1, 2]}
TRAFFIC = "poisson:rate=8,input=lognormal(800,0.6),output=lognormal(150,0.6),requests=150"


def _cli_json(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "windtunnel.cli", *args, "--json"], capture_output=True, text=True,
                          timeout=300, cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _fields(result) -> set[str]:
    return {f.name for f in dataclasses.fields(result)} - {"extra"}


def _strip(document: dict) -> dict:
    return {k: v for k, v in document.items() if k not in ("elapsed_s", "provenance")}


def test_search_training_fields_are_the_cli_json_keys(tmp_path):
    result = windtunnel.search_training(**SEARCH, pins=PINS, refine=4, top=3)
    assert type(result).__name__ == "TrainingSearch" and result.extra == {}
    cli = _cli_json("train", "search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "16",
                    "--global-batch", "32", "--pin", "pp=1,2", "--pin", "vpp=1", "--pin", "cp=1", "--pin", "mbs=1,2",
                    "--refine", "4", "--top", "3", "--workers", "1", "--state", str(tmp_path / "s.json"))
    assert set(cli) <= _fields(result) and set(result.to_json_dict()) == set(cli)
    assert _strip(result.to_json_dict()) == _strip(cli)  # same search, same plans
    frame = result.to_frame()
    assert isinstance(frame, pd.DataFrame) and len(frame) == len(result.plans) == 3
    assert list(frame["plan"]) == [row["plan"] for row in cli["plans"]] and "breakdown.compute" in frame
    assert result.best == result.plans[0]


def test_simulate_availability_fields_are_the_cli_json_keys():
    result = windtunnel.simulate_availability(1024, replications=40, seed=3, checkpoint_every_s=1800.0)
    cli = _cli_json("avail", "simulate", "--devices", "1024", "--replications", "40", "--seed", "3",
                    "--checkpoint-every", "30min")
    assert _fields(result) == set(cli) and result.extra == {}
    assert _strip(result.to_json_dict()) == _strip(cli)
    assert result.provenance["command"] == "windtunnel.simulate_availability()"
    assert result.provenance["catalog"] == cli["provenance"]["catalog"]
    assert 0 < result.ettr <= result.availability <= 1
    frame = result.to_frame()
    assert set(frame["cause"]) == set(cli["lost_seconds_by_cause"])
    assert math.isclose(frame["lost_s"].sum(), sum(cli["lost_seconds_by_cause"].values()))


def test_search_serving_fields_are_the_cli_json_keys():
    result = windtunnel.search_serving("llama3-8b", "h100-sxm", 2, TRAFFIC, slo="ttft=1s,tpot=50ms", top=3, workers=1)
    cli = _cli_json("infer", "search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "2",
                    "--traffic", TRAFFIC, "--slo", "ttft=1s,tpot=50ms", "--top", "3", "--workers", "1")
    assert set(cli) <= _fields(result) and set(result.to_json_dict()) == set(cli) and result.extra == {}
    assert result.to_frame()["deployment"].tolist() == [row["deployment"] for row in cli["deployments"]]


def test_serving_result_fields_are_its_json_keys():
    from windtunnel.infer.metrics import ServingResult

    result = windtunnel.simulate_serving("llama3-8b", "h100-sxm", "mixed:tp=1", TRAFFIC)
    document = result.to_json_dict()
    fields = {f.name for f in dataclasses.fields(ServingResult)}
    internal = {"load", "wall_s"}  # load is a JSON key too; wall_s only with timings
    assert fields - internal - {"warnings"} <= set(document)
    assert all(hasattr(result, key) for key in document)  # every JSON key is an attribute of the result
    assert result.throughput == document["throughput"] and result.goodput == document["goodput"]
    assert result.goodput_requests_per_s == document["goodput"]["requests_per_s"]  # the old flat names still read


def test_import_windtunnel_stays_cheap_and_names_resolve_lazily():
    code = ("import sys, windtunnel\nassert 'windtunnel.api' not in sys.modules\n"
            "assert callable(windtunnel.search_training) and callable(windtunnel.search_serving)\n"
            "assert callable(windtunnel.simulate_availability)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(REPO), timeout=120)

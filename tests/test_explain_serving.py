"""infer explain: an overloaded deployment is flagged (offered load above capacity: the queue grows), what bounds
TTFT and TPOT comes from replaying the simulation on changed hardware, and each remedy shown was simulated and
raises SLO goodput; infer simulate --what-if shows the variant beside the base."""

from __future__ import annotations

import json

import pytest

from conftest import assert_one_clear_error
from windtunnel.infer.api import simulate_serving
from windtunnel.infer.explain import explain_serving

TRAFFIC = "poisson:rate={rate},input=lognormal(2000,0.8),output=lognormal(400,1.0)"
ARGS = ["--model", "llama3-70b", "--hardware", "h100-sxm", "--deployment", "mixed:tp=8,replicas=2"]


@pytest.fixture(scope="module", name="overloaded")
def overloaded_fixture() -> dict:
    return explain_serving("llama3-70b", "h100-sxm", "mixed:tp=8,replicas=2", TRAFFIC.format(rate=40))


def test_overloaded_deployment_is_flagged(overloaded):
    assert overloaded["overloaded"] is True
    assert overloaded["offered_rate"] > overloaded["served_rate"]
    assert overloaded["verdict"][0].startswith("OVERLOADED")
    assert overloaded["bounds"]["ttft"]["resource"] == "queueing"
    assert overloaded["slo"]["ttft_missed"]


def test_overload_remedies_are_simulated_and_raise_goodput(overloaded):
    assert overloaded["remedies"]
    for remedy in overloaded["remedies"]:
        assert remedy["verified"] is True
        again = simulate_serving("llama3-70b", "h100-sxm", remedy["deployment"], TRAFFIC.format(rate=40))
        assert again.goodput_requests_per_s == pytest.approx(remedy["goodput_requests_per_s"])
        assert again.goodput_requests_per_s > overloaded["goodput_requests_per_s"]
    assert any(not remedy["overloaded"] for remedy in overloaded["remedies"])


def test_light_load_keeps_up_and_names_a_resource():
    document = explain_serving("llama3-70b", "h100-sxm", "mixed:tp=8,replicas=2", TRAFFIC.format(rate=2))
    assert document["overloaded"] is False and document["verdict"][0].startswith("keeps up")
    for metric in ("ttft", "tpot"):
        bound = document["bounds"][metric]
        assert bound["resource"] in bound["elasticities"] and bound["elasticity"] < 0
    json.dumps(document, allow_nan=False)


def test_cli_infer_explain_json_and_what_if(cli):
    proc = cli("infer", "explain", *ARGS, "--traffic", TRAFFIC.format(rate=2), "--what-if", "hbm_bandwidth=x2",
               "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {"overloaded", "bounds", "remedies", "verdict", "variant"} <= set(doc)
    assert doc["variant"]["hardware"] == "h100-sxm (hbm_bandwidth=x2)"


def test_cli_infer_simulate_what_if(cli):
    proc = cli("infer", "simulate", *ARGS, "--traffic", TRAFFIC.format(rate=2), "--what-if", "flops=x0.5", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["variant"]["ttft_s"]["mean"] > doc["ttft_s"]["mean"]
    bad = cli("infer", "simulate", *ARGS, "--traffic", TRAFFIC.format(rate=2), "--what-if", "tflops=x2")
    assert_one_clear_error(bad, "tflops", "hbm_bandwidth")


def test_cli_infer_search_on_what_if_hardware(cli):
    proc = cli("infer", "search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--traffic",
               "poisson:rate=4,input=lognormal(1000,0.8),output=lognormal(200,1.0)", "--top", "2", "--requests", "200",
               "--workers", "1", "--what-if", "hbm_bandwidth=x2", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["hardware"] == "h100-sxm (hbm_bandwidth=x2)" and doc["what_if"] == "hbm_bandwidth=x2"

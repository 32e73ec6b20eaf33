"""avail serve --deployment: goodput of every degraded state from Sim2Infer, no typed goodput."""

import json

import pytest
from typer.testing import CliRunner

from windtunnel.cli.app import app
from windtunnel.serve_avail import serve_availability
from windtunnel.specs.errors import WindtunnelError

DEP = "mixed:tp=8,replicas=4"


def _run(rate: float, **kw) -> dict:
    return serve_availability("llama3-70b", "h100-sxm", DEP, f"poisson:rate={rate},input=1000,output=200,requests=400",
                              faults="catalog:llama3-54day", policy="restart-from-checkpoint", **kw)


def test_degraded_states_come_from_sim2infer():
    light, heavy = _run(10), _run(32)
    assert light["states"][0]["instances_lost"] == [0]
    probs = [s["probability"] for s in light["states"]]
    assert probs == sorted(probs, reverse=True) and sum(probs) == pytest.approx(1.0, abs=1e-5)
    g_light = [s["goodput_requests_per_s"] for s in light["states"]]
    g_heavy = [s["goodput_requests_per_s"] for s in heavy["states"]]
    assert g_heavy[0] > g_light[0]                       # the traffic, not a typed number, sets the goodput
    assert g_heavy[-1] < g_heavy[0]                       # fewer replicas serve less
    assert heavy["fraction_time_slo_met"] <= light["fraction_time_slo_met"]


def test_more_faults_lower_the_fraction():
    a = _run(32)
    b = _run(32, max_lost=3)
    assert a == b
    worse = serve_availability("llama3-70b", "h100-sxm", DEP, "poisson:rate=32,input=1000,output=200,requests=400",
                               faults="catalog:llama3-54day", policy="restart-from-checkpoint,restart=6h")
    assert worse["pools"][0]["instance_availability"] < a["pools"][0]["instance_availability"]
    assert worse["fraction_time_slo_met"] < a["fraction_time_slo_met"]


def test_cli_and_errors():
    res = CliRunner().invoke(app, ["avail", "serve", "--model", "llama3-70b", "--hardware", "h100-sxm", "--deployment", DEP,
                                   "--traffic", "poisson:rate=10,input=1000,output=200,requests=200", "--json"])
    assert res.exit_code == 0, res.output
    assert 0.0 < json.loads(res.output)["fraction_time_slo_met"] <= 1.0
    bad = CliRunner().invoke(app, ["avail", "serve", "--deployment", DEP])
    assert isinstance(bad.exception, WindtunnelError)
    with pytest.raises(WindtunnelError):
        serve_availability("llama3-70b", "h100-sxm", "dep.yaml", "poisson:rate=1", target=0.9)


def test_disaggregated_pools_and_options():
    from windtunnel.serve_avail import _options, _pools

    dep = "prefill:tp=8,replicas=2;decode:tp=8,replicas=2;router=round_robin"
    assert _pools(dep) == [("prefill:tp=8,replicas=2", 2), ("decode:tp=8,replicas=2", 2)]
    assert _options(dep) == ["router=round_robin"]
    out = serve_availability("llama3-70b", "h100-sxm", dep, "poisson:rate=10,input=1000,output=200,requests=200")
    assert len(out["pools"]) == 2 and out["states"][0]["instances_lost"] == [0, 0]
    lost_all_decode = next(s for s in out["states"] if s["instances_lost"] == [0, 2])
    assert lost_all_decode["slo_attainment"] == 0.0 and not lost_all_decode["meets_target"]

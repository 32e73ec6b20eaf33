"""Sim2Infer deployment search and dynamic role switching."""

from __future__ import annotations

import json
import pickle

import pytest

from windtunnel.infer.api import simulate_serving
from windtunnel.infer.search import candidates, search_deployments, sped_up
from windtunnel.infer.traffic import parse_traffic
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.model import load_model

TRAFFIC = "poisson:rate=30,input=lognormal(1500,0.7),output=lognormal(250,0.7),requests=600"
SLO = "ttft=1s,tpot=40ms"


def _search(budget: int = 8, **kwargs) -> dict:
    traffic = kwargs.pop("traffic", TRAFFIC)
    options = {"slo": SLO, "seed": 1, "top": 3, "workers": 1, "requests": 200} | kwargs
    return search_deployments("llama3-8b", "h100-sxm", budget, traffic, **options)


def _stable(doc: dict) -> str:
    return json.dumps({k: v for k, v in doc.items() if k != "elapsed_s"}, sort_keys=True, allow_nan=False)


SCENARIOS = [
    ("llama3-8b", "h100-sxm", 8, TRAFFIC, SLO, "both"),
    ("llama3-8b", "h100-sxm", 8, "gamma:rate=12,cv=2,input=lognormal(3000,0.6),output=lognormal(300,0.6),requests=500",
     "ttft=2s,tpot=60ms", "disaggregated"),
    ("mixtral-8x7b", "h100-sxm", 16, "poisson:rate=8,input=lognormal(1000,0.5),output=lognormal(200,0.5),requests=400",
     "ttft=2s,tpot=100ms", "colocated"),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=["dense-both", "dense-disaggregated-bursty", "moe-colocated"])
def test_winners_meet_the_target_when_resimulated(scenario):
    """Every winner, simulated again on the whole traffic by simulate_serving, reaches the attainment target
    at the offered load without overload; winners are ordered by devices and reported per plan."""
    model, hardware, budget, traffic, slo, mode = scenario
    doc = search_deployments(model, hardware, budget, traffic, slo=slo, top=3, workers=1, requests=150, mode=mode,
                             attainment=0.99)
    assert doc["feasible"] and doc["deployments"], doc["reason"]
    devices = [r["devices"] for r in doc["deployments"]]
    assert devices == sorted(devices)
    for row in doc["deployments"]:
        assert {"devices", "attainment", "goodput_requests_per_s", "served_rate", "offered_rate"} <= set(row)
        result = simulate_serving(model, hardware, row["deployment"], traffic, slo=slo)
        assert result.slo_attainment >= 0.99 and not result.overloaded
        assert result.slo_attainment == row["attainment"] and result.devices == row["devices"]


def test_fewest_devices_is_the_same_with_a_larger_budget():
    """A bigger budget cannot change the fewest devices that serve the traffic (the spaces nest)."""
    small, large = _search(4), _search(8)
    assert small["best"]["devices"] == large["best"]["devices"] <= 4
    assert small["best"]["deployment"] == large["best"]["deployment"]


def test_cannot_be_served_is_a_result_with_its_reason():
    doc = _search(1, traffic="poisson:rate=200,input=4000,output=500,requests=300", requests=100)
    assert doc["feasible"] is False and doc["deployments"] == [] and doc["best"] is None
    assert doc["reason"].startswith("cannot be served within 1 devices")
    assert doc["closest"]["attainment"] < 0.99


def test_identical_results_collapse():
    """Decode batch limits the light traffic never reaches give one result, not two rows."""
    doc = _search(8, traffic="poisson:rate=2,input=500,output=100,requests=60", requests=None, mode="disaggregated",
                  top=20)
    rows = doc["deployments"]
    signatures = {(r["devices"], r["attainment"], r["goodput_requests_per_s"], r["ttft_p90_s"], r["tpot_p90_s"])
                  for r in rows}
    assert len(signatures) == len(rows)
    assert any("max_batch=512" in text for r in rows for text in r["equivalent"])
    assert doc["candidates"]["distinct"] < doc["candidates"]["screened"]


class _PicklingBackend:
    """Ships the evaluator and every item through pickle and maps in reverse order, as a remote backend would."""

    workers = 3

    def map(self, function, items):
        function = pickle.loads(pickle.dumps(function))
        out = [function(pickle.loads(pickle.dumps(item))) for item in reversed(items)]
        return list(reversed(out))

    def close(self):
        pass


def test_same_answer_on_every_backend():
    """Inline, two local processes and a pickling out-of-order backend (what Ray does) give the same document."""
    inline = _search(4, workers=1)
    pool = _search(4, workers=2)
    shipped = _search(4, backend=_PicklingBackend())
    assert _stable(inline) == _stable(pool) == _stable(shipped)


def test_ray_in_local_mode_gives_the_same_answer():
    """The Ray backend (a local instance of two CPUs) returns the document the local processes do."""
    pytest.importorskip("ray")
    from windtunnel.search.backends import RayBackend

    backend = RayBackend(num_cpus=2)
    try:
        on_ray = _search(4, backend=backend)
    finally:
        backend.close()
    assert on_ray["feasible"] and _stable(on_ray) == _stable(_search(4, workers=2))


def test_baseline_gain_at_the_same_offered_load():
    doc = _search(8, baseline="mixed:tp=2,replicas=4")
    base, best = doc["baseline"], doc["best"]
    assert base["offered_rate"] == best["offered_rate"] == doc["offered_rate"]
    gain = base["gain"]
    assert gain["devices_saved"] == 8 - best["devices"]
    assert gain["goodput"] == pytest.approx(best["goodput_requests_per_s"] / base["goodput_requests_per_s"] - 1.0)
    priced = _search(8, price_per_device_hour=2.5)
    assert priced["objective"] == "devices" and priced["best"]["cost_per_hour"] == 2.5 * priced["best"]["devices"]


def test_goodput_objective_finds_the_sustainable_load():
    """With the budget fixed, the winner sustains at least the offered load at the target, re-simulated, and no
    other winner sustains more; a load beyond the winner's (twice it) misses the target."""
    doc = _search(8, objective="goodput")
    best = doc["best"]
    assert best["speed"] >= 1.0 and best["attainment"] >= 0.99 and not best["overloaded"]
    assert best["speed"] == max(r["speed"] for r in doc["deployments"])
    faster = simulate_serving("llama3-8b", "h100-sxm", best["deployment"],
                              sped_up(parse_traffic(TRAFFIC, seed=1), 2 * best["speed"]), slo=SLO)
    assert faster.slo_attainment < 0.99 or faster.overloaded
    assert best["offered_rate"] == pytest.approx(doc["offered_rate"] * best["speed"])


def test_candidate_sets_nest():
    """The space for a budget contains the space of every smaller budget (what makes the best monotone)."""
    model = load_model("deepseek-v3")
    small = {d.text() for _, d in candidates(model, "h800", 64)}
    large = {d.text() for _, d in candidates(model, "h800", 128)}
    assert small and small < large


@pytest.mark.parametrize(("kwargs", "field"), [({"mode": "fastest"}, "mode"), ({"objective": "speed"}, "objective"),
                                               ({"attainment": 1.5}, "attainment"), ({"objective": "cost"}, "price")])
def test_bad_options_are_one_clear_error(kwargs, field):
    with pytest.raises(WindtunnelError, match=field):
        search_deployments("llama3-8b", "h100-sxm", 2, TRAFFIC, **kwargs)


SHIFTING = """
arrival: poisson
classes:
  chat: {input: "lognormal(2000,0.4)", output: "lognormal(100,0.5)"}
  generation: {input: "lognormal(200,0.5)", output: "lognormal(1000,0.4)"}
phases:
  - {duration: 300, rate: 15, mix: {chat: 1.0}}
  - {duration: 300, rate: 12, mix: {generation: 1.0}}
"""


def test_dynamic_switching_follows_the_mix(tmp_path):
    """Traffic moves from prefill-heavy chat to decode-heavy generation: the policy moves an instance to
    prefill, later back to decode, and beats every static split of the same instances; every request still
    finishes exactly once with its tokens."""
    from windtunnel.infer.api import run_raw
    from windtunnel.infer.deployment import parse_deployment
    from windtunnel.infer.dynamic import RoleSwitcher, compare_dynamic
    from windtunnel.infer.metrics import parse_slo
    from windtunnel.infer.sim import Simulator
    from windtunnel.infer.traffic import parse_traffic

    path = tmp_path / "shift.yaml"
    path.write_text(SHIFTING)
    doc = compare_dynamic("llama3-70b", "h100-sxm", "prefill:tp=4,replicas=2;decode:tp=4,replicas=2", str(path),
                          slo="ttft=3s,tpot=50ms", switch_cost="30s", interval="15s")
    moves = [(s["from"], s["to"]) for s in doc["dynamic"]["switches"]]
    assert ("decode", "prefill") in moves and ("prefill", "decode") in moves
    assert moves.index(("decode", "prefill")) < moves.index(("prefill", "decode"))
    assert doc["dynamic"]["goodput_per_s"] > doc["best_static"]["goodput_per_s"]
    assert all(s["ready_s"] - s["drained_s"] == pytest.approx(30.0) for s in doc["dynamic"]["switches"] if "ready_s" in s)

    spec = load_model("llama3-70b")
    dep = parse_deployment("prefill:tp=4,replicas=2;decode:tp=4,replicas=2")
    workload = parse_traffic(str(path))
    plans, _ = run_raw(spec, "h100-sxm", dep, parse_traffic("poisson:rate=1,input=10,output=10,requests=2"))
    from windtunnel.specs.hardware import load_hardware

    sim = Simulator(spec, plans, workload, dep.router, transfer_cluster=load_hardware("h100-sxm", 16),
                    controller=RoleSwitcher(parse_slo("ttft=3s,tpot=50ms"), interval_s=15.0, switch_cost_s=30.0))
    out = sim.run()
    assert (out.completions == 1).all() and (out.generated == out.output).all()
    assert all(inst.kv_max <= inst.cap for inst in out.instances)

"""Sim2Infer deployment search and dynamic role switching."""

from __future__ import annotations

import pytest

from windtunnel.infer.search import candidates, search_deployments
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.model import load_model

TRAFFIC = "poisson:rate=30,input=lognormal(1500,0.7),output=lognormal(250,0.7),requests=300"


@pytest.fixture(scope="module")
def searches():
    return {budget: search_deployments("llama3-8b", "h100-sxm", budget, TRAFFIC, slo="ttft=1s,tpot=40ms", seed=1,
                                       top=5, workers=2)
            for budget in (1, 2, 4, 8)}


def test_more_devices_never_lower_the_best(searches):
    """At fixed traffic, a bigger budget's best goodput per device (and best goodput) is at least a smaller one's."""
    budgets = sorted(searches)
    objective = [searches[b]["deployments"][0]["goodput_per_s_per_device"] for b in budgets]
    goodput = [searches[b]["max_goodput_per_s"] for b in budgets]
    assert objective == sorted(objective)
    assert goodput == sorted(goodput)
    assert goodput[-1] > goodput[0], "the traffic is meant to need more than one device"


def test_search_reports_both_kinds_and_ranks(searches):
    doc = searches[8]
    assert doc["best_colocated"] is not None and doc["best_disaggregated"] is not None
    rows = doc["deployments"]
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    values = [r["goodput_per_s_per_device"] for r in rows]
    assert values == sorted(values, reverse=True)
    assert all(r["devices"] <= 8 for r in rows)
    assert doc["candidates"]["simulated"] + sum(doc["candidates"]["infeasible"].values()) == \
        doc["candidates"]["enumerated"]


def test_candidate_sets_nest():
    """The space for a budget contains the space of every smaller budget (what makes the best monotone)."""
    model = load_model("deepseek-v3")
    small = {d.text() for _, d in candidates(model, "h800", 64)}
    large = {d.text() for _, d in candidates(model, "h800", 128)}
    assert small and small < large


def test_baseline_gain_and_bad_mode():
    doc = search_deployments("llama3-8b", "h100-sxm", 2, TRAFFIC, slo="ttft=1s,tpot=40ms", top=3, workers=1,
                             baseline="mixed:tp=2")
    base = doc["baseline"]
    assert base["feasible"]
    assert base["gain"] == pytest.approx(doc["deployments"][0]["goodput_per_s_per_device"]
                                         / base["goodput_per_s_per_device"] - 1.0)
    with pytest.raises(WindtunnelError, match="mode"):
        search_deployments("llama3-8b", "h100-sxm", 2, TRAFFIC, mode="fastest")


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

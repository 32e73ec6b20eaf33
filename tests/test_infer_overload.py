"""Overload flag of a serving simulation: offered vs served rate, queue growth rule."""

from __future__ import annotations

import json
import math

from windtunnel.infer.api import simulate_serving

TRAFFIC = "poisson:rate={rate},input=lognormal(1500,0.5),output=lognormal(200,0.5),duration=120s"


def _run(rate: float):
    return simulate_serving("llama3-8b", "h100-sxm", "mixed:tp=1", TRAFFIC.format(rate=rate), slo="ttft=2s,tpot=100ms")


def test_light_load_is_served_and_heavy_load_is_overloaded():
    """One H100 serves 2 req/s of 1,500-token prompts; 200 req/s piles up: served rate near the capacity, far
    below the offered rate, and a makespan far past the arrivals."""
    light, heavy = _run(2.0), _run(200.0)
    assert not light.overloaded
    assert math.isclose(light.load["served_rate"], light.load["offered_rate"], rel_tol=0.25)
    assert heavy.overloaded
    assert heavy.load["served_rate"] < 0.5 * heavy.load["offered_rate"]
    assert heavy.load["drain_s"] > heavy.load["arrival_window_s"]
    assert heavy.load["backlog_growth"] > 0.5


def test_json_carries_the_flag_and_rates():
    doc = _run(200.0).to_json_dict()
    text = json.dumps(doc, allow_nan=False)
    assert doc["overloaded"] is True
    assert doc["offered_rate"] > 150 and 0 < doc["served_rate"] < doc["offered_rate"]
    assert "queue keeps growing" in doc["load"]["rule"] and "NaN" not in text


def test_closed_loop_is_never_overloaded():
    result = simulate_serving("llama3-8b", "h100-sxm", "mixed:tp=1", "closed:concurrency=8,input=500,output=50,requests=40")
    assert result.load["offered_rate"] is None and not result.overloaded

"""Autoscaling controller (windtunnel.infer.autoscale): replicas start with a cost and stop when idle."""

from __future__ import annotations

import pytest

from windtunnel.infer.autoscale import compare_autoscale
from windtunnel.specs.errors import WindtunnelError

BURST = ("poisson:rate=0.5,input=512,output=128", )


def _phases(tmp_path) -> str:
    path = tmp_path / "phases.yaml"
    path.write_text("classes:\n  chat: {input: 2000, output: 300}\nphases:\n"
                    "  - {duration: 120, rate: 2, mix: {chat: 1.0}}\n"
                    "  - {duration: 120, rate: 40, mix: {chat: 1.0}}\n"
                    "  - {duration: 240, rate: 2, mix: {chat: 1.0}}\n")
    return str(path)


def test_autoscaler_starts_replicas_for_a_burst_and_stops_them_after(tmp_path) -> None:
    doc = compare_autoscale("llama3-8b", "h100-sxm", "mixed:tp=1,replicas=4", _phases(tmp_path),
                            slo="ttft=2s,tpot=100ms", startup="20s", interval="5s")
    auto = doc["autoscaled"]
    actions = [e["action"] for e in auto["events"]]
    assert "start" in actions and "stop" in actions
    starts = [e for e in auto["events"] if e["action"] == "start"]
    assert all(e["ready_s"] == pytest.approx(e["decided_s"] + 20.0) for e in starts)
    # It holds fewer devices on average than the most replicas, more than the fewest; the burst (40 req/s for
    # 120 s) starts replicas only once it is seen, so the burst's first start-up goes at the smaller size.
    assert 1.0 < auto["mean_devices"] < 4.0
    assert min(e["decided_s"] for e in starts) >= 120.0
    assert len(doc["static"]) == 4 and doc["static"][-1]["devices"] == 4


def test_autoscale_is_deterministic(tmp_path) -> None:
    args = ("llama3-8b", "h100-sxm", "mixed:tp=1,replicas=3", _phases(tmp_path))
    one = compare_autoscale(*args, startup="20s", interval="5s")
    two = compare_autoscale(*args, startup="20s", interval="5s")
    assert one["autoscaled"]["events"] == two["autoscaled"]["events"]
    assert one["autoscaled"]["device_hours"] == two["autoscaled"]["device_hours"]


def test_autoscale_rejects_a_bad_start_fraction() -> None:
    with pytest.raises(WindtunnelError, match="start_fraction"):
        compare_autoscale("llama3-8b", "h100-sxm", "mixed:tp=1,replicas=2", BURST[0], start_fraction=0.0)

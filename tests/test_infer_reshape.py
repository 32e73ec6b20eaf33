"""Role switching between prefill and decode instances of different shapes (windtunnel.infer.reshape)."""

from __future__ import annotations

from windtunnel.infer.dynamic import compare_dynamic


def _phases(tmp_path) -> str:
    path = tmp_path / "shift.yaml"
    path.write_text("classes:\n  chat: {input: 300, output: 800}\n  doc: {input: 6000, output: 60}\nphases:\n"
                    "  - {duration: 150, rate: 30, mix: {chat: 1.0}}\n"
                    "  - {duration: 150, rate: 6, mix: {doc: 1.0}}\n"
                    "  - {duration: 150, rate: 30, mix: {chat: 1.0}}\n")
    return str(path)


def test_different_shapes_share_the_device_budget(tmp_path) -> None:
    doc = compare_dynamic("llama3-8b", "h100-sxm", "prefill:tp=1,replicas=4;decode:tp=2,replicas=2", _phases(tmp_path),
                          slo="ttft=2s,tpot=30ms", switch_cost="10s", interval="5s")
    # Static splits use at most the starting 8 devices: p x 1 + d x 2 <= 8.
    assert all(r["prefill_instances"] + 2 * r["decode_instances"] <= 8 for r in doc["static"])
    assert doc["dynamic"]["devices"] == 8
    switches = doc["dynamic"]["switches"]
    assert switches, "the phase changes should move capacity"
    for s in switches:
        assert s["to"] in ("prefill", "decode") and s["ready_s"] >= s["decided_s"] + 10.0
        if s["to"] == "decode" and s["from"] == "prefill":
            assert len(s["instances"]) >= 1  # a TP2 decode instance takes the devices of TP1 prefill instances


def test_readme_disaggregated_deployment_is_accepted() -> None:
    doc = compare_dynamic("deepseek-v3", "ascend-910c", "prefill:ep=32,replicas=2;decode:ep=128,replicas=1",
                          "poisson:rate=4,input=1000,output=100,duration=30s", slo="ttft=2s,tpot=100ms")
    assert {(r["prefill_instances"], r["decode_instances"]) for r in doc["static"]} == {(1, 1), (2, 1)}

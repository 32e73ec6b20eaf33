"""`infer simulate|search --model X.onnx`: forward-only serving of an operator DAG under load
(train/dag_serving.py, routed in cli/infer_dag.py); LLM-only options are clear errors."""

from __future__ import annotations

import json

import pytest

from windtunnel.specs.errors import WindtunnelError
from windtunnel.train.dag_serving import load_estimate, parse_dag_deployment, serve_dag


def test_infer_simulate_serves_an_onnx_model_with_latency_throughput_and_memory(cli):
    proc = cli("infer", "simulate", "--model", "onnx:resnet50", "--hardware", "a100-80g", "--deployment",
               "tp=1,replicas=8", "--batch", "64", "--traffic", "poisson:rate=20000", "--slo", "latency=50ms", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "dag_serving" and doc["devices"] == 8 and doc["batch"] == 64
    assert 0 < doc["latency_per_batch_s"] < 0.1
    assert doc["samples_per_s"] == pytest.approx(8 * doc["samples_per_s_per_device"])
    memory = doc["memory"]
    assert memory["fits"] and memory["total_bytes_per_device"] == pytest.approx(
        memory["weight_bytes_per_device"] + memory["activation_bytes_per_device"])
    assert 40e6 < memory["weight_bytes_per_device"] < 60e6  # 25.6 M parameters in 16-bit
    load = doc["load"]
    assert load["utilization"] == pytest.approx(20000 / doc["samples_per_s"])
    assert load["latency_p99_s"] > load["latency_mean_s"] > doc["latency_per_batch_s"]
    assert doc["slo"]["met"] is (load["latency_p99_s"] <= 0.05)
    text = cli("infer", "simulate", "--model", "onnx:resnet50", "--hardware", "a100-80g", "--batch", "8")
    assert text.returncode == 0 and "samples/s" in text.stdout and "latency per batch" in text.stdout


def test_latency_at_load_grows_with_the_rate_and_saturates():
    base = serve_dag("onnx:molecule-mpnn", "ascend-910b", "replicas=16", batch=32)
    capacity = base["samples_per_s"]
    result = {"batch": 32, "latency_s": base["latency_per_batch_s"], "samples_per_s": capacity}
    low, high = (load_estimate(result, 16, f * capacity, 1.0) for f in (0.3, 0.9))
    assert low["queue_wait_mean_s"] < high["queue_wait_mean_s"]
    assert high["latency_mean_s"] > base["latency_per_batch_s"]
    over = load_estimate(result, 16, 1.1 * capacity, 1.0)
    assert over["saturated"] and over["latency_p99_s"] is None


@pytest.mark.parametrize("args, words", [
    (["--traffic", "poisson:rate=10,input=100"], "Traffic key 'input'"),
    (["--traffic", "closed:concurrency=4"], "poisson:rate=R"),
    (["--traffic", "poisson:rate=10", "--slo", "ttft=1s"], "SLO key 'ttft'"),
    (["--slo", "latency=10ms"], "--traffic"),
    (["--deployment", "prefill:tp=1;decode:tp=1"], "no prefill/decode"),
    (["--deployment", "tp=1,max_batch=8"], "Deployment key 'max_batch'"),
    (["--router", "kv_aware"], "'--router'"),
])
def test_llm_only_options_are_clear_errors_for_a_dag(cli, args, words):
    proc = cli("infer", "simulate", "--model", "onnx:resnet50", "--hardware", "a100-80g", *args)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert words in proc.stderr


def test_llm_still_needs_deployment_and_refuses_dag_options(cli):
    proc = cli("infer", "simulate", "--model", "llama3-8b", "--hardware", "a100-80g", "--traffic", "poisson:rate=1")
    assert proc.returncode != 0 and "'--deployment' is missing" in proc.stderr
    proc = cli("infer", "simulate", "--model", "llama3-8b", "--hardware", "a100-80g", "--deployment", "mixed:tp=1",
               "--traffic", "poisson:rate=1", "--batch-shape", "seq=128")
    assert proc.returncode != 0 and "'--batch-shape'" in proc.stderr


def test_infer_search_on_a_dag_finds_the_fewest_devices_meeting_the_slo(cli):
    proc = cli("infer", "search", "--model", "onnx:resnet50", "--hardware", "a100-80g", "--devices", "8", "--traffic",
               "poisson:rate=20000", "--slo", "latency=20ms", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    best = doc["best"]
    assert best["meets"] and best["latency_p99_s"] <= 0.02 and best["samples_per_s"] > 20000
    assert best["devices"] == min(r["devices"] for r in doc["top"] if r["meets"]) < 8


def test_parse_dag_deployment():
    assert parse_dag_deployment("mixed:tp=2,replicas=4") == (2, 1, 4)
    assert parse_dag_deployment(None) == (1, 1, 1)
    with pytest.raises(WindtunnelError, match="positive"):
        parse_dag_deployment("tp=0")

"""Sim2Infer specs: traffic and deployment parsing, memory model, clear errors for bad input."""

from __future__ import annotations

import numpy as np
import pytest

from windtunnel.infer.deployment import parse_deployment, resolve_deployment, weight_bytes_per_device
from windtunnel.infer.metrics import parse_slo
from windtunnel.infer.traffic import parse_lengths, parse_traffic
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.model import load_model

TRACE = "validation/traces/azure_llm_2023_conv.csv"


def error_of(function, *args, **kwargs) -> str:
    with pytest.raises(WindtunnelError) as info:
        function(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message, "one paragraph"
    return message


# ---- traffic ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, needles", [
    ("uniform:rate=3,input=10,output=10", ["uniform", "poisson", "gamma", "trace", "closed"]),
    ("poisson:input=10,output=10", ["rate"]),
    ("poisson:rate=-2,input=10,output=10", ["rate", "-2"]),
    ("poisson:rate=2,input=lognormal(abc),output=10", ["input", "lognormal(abc)", "uniform(a,b)"]),
    ("poisson:rate=2,input=uniform(50,10),output=10", ["input", "uniform(50,10)"]),
    ("poisson:rate=2,input=10,output=10,burst=3", ["burst", "rate", "duration"]),
    ("poisson:rate=2,cv=2,input=10,output=10", ["cv", "gamma"]),
    ("trace:no/such/file.csv", ["no/such/file.csv", "traffic"]),
    ("closed:input=10,output=10", ["concurrency"]),
    ("justtext", ["KIND"]),
])
def test_bad_traffic_specs_name_field_and_valid_values(spec, needles):
    message = error_of(parse_traffic, spec)
    for needle in needles:
        assert needle in message, message


def test_bad_traffic_yaml(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("classes:\n  chat: {input: 100, output: 10}\nphases:\n  - {duration: 60, rate: 2, mix: {code: 1}}\n")
    message = error_of(parse_traffic, str(path))
    assert "mix" in message and "chat" in message
    path.write_text("classes: [1, 2\n")
    assert "line" in error_of(parse_traffic, str(path))


def test_trace_without_columns(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("time,prompt\n1,2\n")
    message = error_of(parse_traffic, f"trace:{path}")
    assert "ContextTokens" in message and "GeneratedTokens" in message


def test_length_distributions_means_and_bounds():
    rng = np.random.default_rng(0)
    lognormal = parse_lengths("lognormal(2000,0.8)", "input").sample(rng, 200_000, "input")
    assert lognormal.mean() == pytest.approx(2000, rel=0.02)
    uniform = parse_lengths("uniform(5,9)", "input").sample(rng, 10_000, "input")
    assert uniform.min() == 5 and uniform.max() == 9
    assert (parse_lengths("fixed(7)", "x").sample(rng, 5, "input") == 7).all()
    empirical = parse_lengths(f"empirical({TRACE})", "output").sample(rng, 50_000, "output")
    assert empirical.mean() == pytest.approx(211, rel=0.03)  # the conversation trace's mean output


def test_gamma_is_burstier_than_poisson():
    """Same rate; gamma with cv=4 has inter-arrival CV near 4, Poisson near 1."""
    base = "input=100,output=10,requests=20000"
    poisson = np.diff(parse_traffic(f"poisson:rate=10,{base}", seed=1).arrival)
    gamma = np.diff(parse_traffic(f"gamma:rate=10,cv=4,{base}", seed=1).arrival)
    assert poisson.std() / poisson.mean() == pytest.approx(1.0, abs=0.05)
    assert gamma.std() / gamma.mean() == pytest.approx(4.0, rel=0.15)
    assert 1 / gamma.mean() == pytest.approx(10, rel=0.1)


def test_phases_and_mix(tmp_path):
    """A YAML mix of classes with phases: rate and mix change at the phase boundary."""
    path = tmp_path / "mix.yaml"
    path.write_text(
        "arrival: poisson\n"
        "classes:\n"
        "  chat: {input: 'lognormal(800,0.5)', output: 'lognormal(200,0.5)'}\n"
        "  long:\n    input: lognormal(600,0.5)\n    output: lognormal(2000,0.5)\n"
        "phases:\n"
        "  - {duration: 200, rate: 5, mix: {chat: 0.9, long: 0.1}}\n"
        "  - {duration: 200, rate: 15, mix: {chat: 0.2, long: 0.8}}\n")
    w = parse_traffic(str(path), seed=5)
    first, second = w.arrival < 200, w.arrival >= 200
    assert second.sum() / first.sum() == pytest.approx(3.0, rel=0.2)
    long = w.class_names.index("long")
    assert (w.klass[first] == long).mean() == pytest.approx(0.1, abs=0.05)
    assert (w.klass[second] == long).mean() == pytest.approx(0.8, abs=0.05)
    assert w.output[w.klass == long].mean() > 5 * w.output[w.klass != long].mean()


def test_trace_replay_is_the_trace():
    w = parse_traffic(f"trace:{TRACE}")
    assert w.size == 19366
    assert w.arrival[0] == 0.0 and np.all(np.diff(w.arrival) >= 0)
    assert w.prompt[:2].tolist() == [374, 396] and w.output[:2].tolist() == [44, 109]


# ---- deployments --------------------------------------------------------------------------------------------


def test_deployment_string_forms():
    mixed = parse_deployment("mixed:tp=8,replicas=2")
    assert len(mixed.groups) == 1 and mixed.groups[0].tp == 8 and mixed.groups[0].replicas == 2
    pd = parse_deployment("prefill:ep=32,replicas=2;decode:ep=128,replicas=1;router=kv_aware")
    assert pd.disaggregated and pd.router == "kv_aware"
    spec = load_model("deepseek-v3")
    plans = resolve_deployment(spec, "h800", pd)
    assert [(p.tp, p.dp, p.ep, p.devices) for p in plans] == [(1, 32, 32, 32), (1, 128, 128, 128)]


def test_deployment_yaml(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("router: round_robin\ninstances:\n  - {role: prefill, tp: 4, replicas: 2}\n"
                    "  - {role: decode, tp: 8, max_batch: 128, chip: h200}\n")
    dep = parse_deployment(str(path))
    plans = resolve_deployment(load_model("llama3-70b"), "h100-sxm", dep)
    assert plans[1].chip.id == "h200" and plans[0].chip.id == "h100-sxm"
    assert plans[1].max_batch == 128 and dep.router == "round_robin"


@pytest.mark.parametrize("model, spec, needles", [
    ("llama3-70b", "mixed:tp=3", ["tp", "3", "64", "valid tp", "1, 2, 4, 8, 16, 32, 64"]),
    ("llama3-70b", "mixed:tp=8;router=random", ["router", "random", "round_robin", "least_tokens", "kv_aware"]),
    ("llama3-70b", "serve:tp=8", ["role", "serve", "mixed", "prefill", "decode"]),
    ("llama3-70b", "mixed:tp=8;prefill:tp=8", ["mixed", "prefill"]),
    ("llama3-70b", "prefill:tp=8", ["decode", "missing"]),
    ("llama3-70b", "mixed:tp=8,ep=8", ["ep", "dense"]),
    ("llama3-70b", "mixed:tp=8,speed=3", ["speed", "valid keys", "max_batch"]),
    ("llama3-70b", "mixed:tp=8,precision=int4", ["precision", "int4", "bf16", "fp8"]),
    ("llama3-70b", "mixed:tp=8,prefix_hit=1.5", ["prefix_hit", "1.5"]),
    ("llama3-70b", "mixed:tp=1", ["does not fit", "GiB"]),
    ("llama3-70b", "mixed:tp=8,batching=magic", ["batching", "chunked", "separate", "whole"]),
    ("deepseek-v3", "prefill:ep=3;decode:ep=8", ["ep", "3"]),
    ("deepseek-v3", "prefill:tp=2,dp=4,ep=16;decode:ep=8", ["ep", "16", "valid ep"]),
    ("llama3-70b", "mixed:tp=8,precision=fp8,chip=ascend-910c", ["precision", "fp8", "ascend-910c"]),
])
def test_bad_deployments_name_field_and_valid_values(model, spec, needles):
    def resolve():
        return resolve_deployment(load_model(model), "h100-sxm", parse_deployment(spec))

    message = error_of(resolve)
    for needle in needles:
        assert needle in message, message


def test_bad_slo():
    assert "ttft, tpot" in error_of(parse_slo, "latency=3s")
    assert "slo.ttft" in error_of(parse_slo, "ttft=fast")
    slo = parse_slo("ttft=2s,tpot=100ms")
    assert slo.ttft_s == 2.0 and slo.tpot_s == pytest.approx(0.1)


def test_weights_split_over_devices():
    """Weight bytes per device fall with TP; DeepSeek-V3 fp8 over EP32 DP-attention: experts / 32 plus replicas."""
    llama = load_model("llama3-70b")
    assert weight_bytes_per_device(llama, 8, 1, 1, 1, "bf16") == pytest.approx(
        weight_bytes_per_device(llama, 4, 1, 1, 1, "bf16") / 2, rel=1e-9)
    total = llama.total_params() * 2
    assert weight_bytes_per_device(llama, 8, 1, 1, 1, "bf16") == pytest.approx(total / 8, rel=0.01)
    ds = load_model("deepseek-v3")
    per_device = weight_bytes_per_device(ds, 1, 32, 32, 1, "fp8")
    # routed experts spread over the 32 ranks; attention, dense layers, shared experts, router and embeddings
    # replicated on every DP-attention rank (tp=1)
    experts = ds.moe_layers * ds.moe.experts * ds.expert_params()
    replicated = (ds.layers * ds.attention_params() + ds.dense_layers * ds.mlp_params(ds.ffn_hidden)
                  + ds.moe_layers * (ds.shared_expert_params() + ds.hidden * ds.moe.experts) + ds.embedding_params())
    assert per_device == pytest.approx(experts / 32 + replicated, rel=1e-6)


def test_kv_capacity_from_memory_model():
    """Llama-3-70B bf16 on TP8 H100: (0.9 x 80 GiB - 17.6 GB weights - activations) / 40 KiB per token per GPU."""
    spec = load_model("llama3-70b")
    plan = resolve_deployment(spec, "h100-sxm", parse_deployment("mixed:tp=8"))[0]
    assert plan.kv_bytes_per_token == 80 * 2 * 1 * 128 * 2  # 80 layers, K and V, 1 KV head per GPU, bf16
    free = 0.9 * 80 * 2**30 - plan.weight_bytes - plan.activation_bytes
    assert plan.kv_capacity_tokens == int(free // plan.kv_bytes_per_token)

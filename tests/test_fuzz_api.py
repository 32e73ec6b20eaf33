"""API fuzz (issue 20): thousands of random, mostly malformed inputs through the Python API (spec parsers,
Hugging Face configs, plans, training and serving simulations, availability models). Each must give a result
with no non-finite number in it, or a WindtunnelError (never InternalError: a result that cannot be true is a
bug), never another exception and never a hang. Seed and size: WINDTUNNEL_FUZZ_SEED, WINDTUNNEL_FUZZ_API_CASES
(printed)."""

from __future__ import annotations

import dataclasses
import math
import os
import random
import signal
import time
import traceback

import numpy as np

SEED = int(os.environ.get("WINDTUNNEL_FUZZ_SEED", "20"))
COUNT = int(os.environ.get("WINDTUNNEL_FUZZ_API_CASES", "5000"))
LIMIT_S = 10.0

NUMBERS = [0, 1, 2, 3, 8, -1, -8, 0.5, 1.5, 1e-300, 1e300, 2**31, 2**63, 2**64 + 1, 10**30, -(10**30),
           math.nan, math.inf, -math.inf, True, False, None, "8", "abc", "", "1e400", [], {}, "nan", "inf"]
WORDS = ["tp", "pp", "cp", "ep", "dp", "vpp", "mbs", "zero", "recompute", "sp", "mtp", "schedule", "precision",
         "replicas", "rate", "input", "output", "requests", "duration", "ttft", "tpot", "spares", "nodes", "edges",
         "foo", "", "=", ",", ";", ":", "(", ")", "full", "selective", "none", "dualpipe", "1f1b", "fixed(", "x"]


class CaseTimeout(BaseException):
    """Raised by the alarm inside a case that ran past LIMIT_S."""


def _alarm(signum, frame):
    raise CaseTimeout()


def _number(rng: random.Random):
    return rng.choice(NUMBERS) if rng.random() < 0.7 else rng.choice([rng.randint(-10, 10**6), rng.uniform(-1e3, 1e6)])


def _text(rng: random.Random) -> str:
    """A random spec-like string: keys, values, separators, numbers, sometimes very long."""
    parts = []
    for _ in range(rng.randint(0, 6)):
        key = rng.choice(WORDS)
        value = str(_number(rng)) if rng.random() < 0.6 else rng.choice(WORDS)
        parts.append(f"{key}={value}" if rng.random() < 0.8 else key)
    text = rng.choice([",", ";", ", "]).join(parts)
    if rng.random() < 0.02:
        text += "x" * rng.choice([300, 100_000])
    return text


def _finite_problems(value, path: str = "", depth: int = 0) -> list[str]:
    """Paths of the non-finite numbers inside a result (dicts, lists, dataclasses, pydantic models, arrays)."""
    if depth > 12:
        return []
    if isinstance(value, bool) or value is None or isinstance(value, (str, bytes, int)):
        return []
    if isinstance(value, float):
        return [] if math.isfinite(value) else [f"{path}={value}"]
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "fc" and value.size and not np.isfinite(value).all():
            return [f"{path}[array]"]
        return []
    if isinstance(value, np.generic):
        return _finite_problems(value.item(), path, depth + 1)
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _finite_problems(v, f"{path}.{k}", depth + 1)]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value[:200]) for p in _finite_problems(v, f"{path}[{i}]", depth + 1)]
    if dataclasses.is_dataclass(value):
        return [p for f in dataclasses.fields(value)
                for p in _finite_problems(getattr(value, f.name), f"{path}.{f.name}", depth + 1)]
    if hasattr(value, "model_dump"):
        return _finite_problems(value.model_dump(), path, depth + 1)
    return []


# ---- case generators: each returns (label, thunk) --------------------------------------------------------------


def _plan_case(rng):
    from windtunnel.specs.plan import parse_plan

    arg = _text(rng) if rng.random() < 0.7 else {rng.choice(WORDS): _number(rng) for _ in range(rng.randint(0, 4))}
    return f"parse_plan({str(arg)[:80]!r})", lambda: parse_plan(arg)


def _validate_plan_case(rng):
    from windtunnel.specs.model import load_model
    from windtunnel.specs.plan import parse_plan, validate_plan

    plan = rng.choice(["tp=1", "tp=2,pp=2", "tp=8", "pp=4,vpp=2", "ep=8", "cp=2", "tp=2,pp=2,mbs=2", _text(rng)])
    model = rng.choice(["llama3-8b", "mixtral-8x7b", "deepseek-v3"])
    devices, seq, batch = (rng.choice([8, 16, 0, -1, 2**40, 10**7]), rng.choice([2048, 0, -5, 2**30, 4096]),
                           rng.choice([8, 64, 0, -1, 10**6, 10**18, 2**64]))
    return (f"validate_plan({plan[:60]!r}, {model}, {devices}, {seq}, {batch})",
            lambda: validate_plan(parse_plan(plan), load_model(model), devices, seq, batch))


HF_KEYS = ["hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size", "intermediate_size",
           "num_key_value_heads", "head_dim", "max_position_embeddings", "num_local_experts", "num_experts_per_tok",
           "n_routed_experts", "moe_intermediate_size", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
           "qk_nope_head_dim", "v_head_dim", "first_k_dense_replace", "n_shared_experts", "num_experts",
           "sliding_window", "num_nextn_predict_layers", "swiglu_limit", "layer_types", "decoder_sparse_step",
           "mlp_only_layers", "shared_expert_intermediate_size", "tie_word_embeddings", "model_type"]
_HF_CONFIGS: list = []


def _hf_case(rng):
    import json
    from pathlib import Path

    from windtunnel.specs.model import model_from_hf_config

    if not _HF_CONFIGS:
        _HF_CONFIGS.extend(json.loads(p.read_text()) for p in sorted((Path(__file__).parent / "data" / "hf").glob("*.json")))
    config = dict(rng.choice(_HF_CONFIGS))
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(HF_KEYS + list(config))
        if rng.random() < 0.3:
            config.pop(key, None)
        else:
            config[key] = _number(rng) if key != "model_type" else rng.choice(["llama", "deepseek_v3", "x", 7, None])
    if rng.random() < 0.03:
        config = rng.choice([[1, 2], "config", None, 3])
    return f"model_from_hf_config({str(config)[:100]})", lambda: model_from_hf_config(config)


def _mutated(rng: random.Random, base: dict, bad: dict) -> dict:
    """``base`` (valid arguments) with none, one or two of them replaced by a value from ``bad``."""
    out = dict(base)
    for key in rng.sample(sorted(bad), rng.choice([0, 1, 1, 1, 2])):
        choice = rng.choice(bad[key])
        out[key] = choice(rng) if callable(choice) else choice
    return out


TRAIN_BASE = dict(model="llama3-8b", hardware="h100-sxm", devices=8, plan="tp=1", seq_len=2048, global_batch=8,
                  moe_imbalance=1.1, framework="megatron")
TRAIN_BAD = {
    "model": ["mixtral-8x7b", "qwen3-30b-a3b", "nonexistent", "", "x" * 300],
    "hardware": ["a100-80g", "ascend-910b", "b200", "nope", ""],
    "devices": [16, 0, -8, 3, 10**8, 2**64, 1.5, None, "8"],
    "plan": ["tp=2", "tp=8", "tp=2,pp=2", "ep=8", "recompute=full", "zero=3", "cp=2", "tp=2,pp=2,schedule=dualpipe",
             "pp=2,vpp=2", "mbs=2", "offload_layers=1", _text, _text],
    "seq_len": [4096, 1, 0, -1, 2**25, 2**64, 1.5, math.nan],
    "global_batch": [16, 64, 0, 7, 10**9, 10**18, -1, math.inf],
    "moe_imbalance": [1.0, 2.0, 0.5, math.inf, math.nan, 1e6, -1],
    "framework": ["pytorch-fsdp", "deepspeed", "torchtitan", "nope", ""],
    "what_if": ["flops=x2", "hbm_bandwidth=x0.5", "flops=x0", "flops=xnan", "bogus=x2", "hbm_capacity=1e30GiB",
                "scale_up_bandwidth=x1e-20", "hbm_capacity=1GiB", _text],
}


def _training_case(rng):
    from windtunnel.api import simulate_training

    kw = _mutated(rng, TRAIN_BASE, TRAIN_BAD)
    return f"simulate_training({kw})", lambda: simulate_training(**kw).to_json_dict()


SERVE_BASE = dict(model="llama3-8b", hardware="h100-sxm", deployment="mixed:tp=1",
                  traffic="poisson:rate=4,input=200,output=20,requests=20", slo="ttft=1s,tpot=50ms", seed=0)
SERVE_BAD = {
    "model": ["mixtral-8x7b", "nope", "qwen3-8b"],
    "hardware": ["a100-80g", "nope", "ascend-910b"],
    "deployment": ["mixed:tp=1,replicas=2", "prefill:tp=1;decode:tp=1", "mixed:tp=8", "mixed:tp=1,max_batch=0",
                   "mixed:tp=1,replicas=1e9", "mixed:tp=1,overhead=1e308", "mixed:tp=1,mem_util=2",
                   "mixed:tp=1,max_batch=1", "mixed:tp=1,max_tokens=1", "mixed:tp=1,prefix_hit=0.9",
                   "mixed:tp=1,accept=0.9,mtp=2", lambda r: "mixed:" + _text(r), _text],
    "traffic": [f"poisson:rate={rate},input={length},output=20,requests=20"
                for rate in ("2", "0", "inf", "1e-300", "1e308") for length in ("fixed(inf)", "0", "1e30")]
               + ["poisson:rate=2,input=lognormal(1e6,5),output=20,requests=20",
                  "poisson:rate=2,input=uniform(1,99999999999),output=20,requests=20",
                  "gamma:rate=2,cv=0.01,input=100,output=20,requests=20", "gamma:rate=2,cv=20,input=100,output=20,"
                  "requests=20", "closed:concurrency=1e9,input=100,output=20,requests=20",
                  "closed:concurrency=4,input=100,output=20,requests=20,think=1e308s",
                  "poisson:rate=2,input=100,output=100000,requests=5", "poisson:rate=1e6,input=100,output=20,requests=50",
                  "poisson:rate=2,input=100,output=20,duration=1e308s", _text],
    "slo": ["ttft=0s", "ttft=-1s", "ttft=inf", None, "tpot=1e308s", "ttft=1us", _text],
    "seed": [1, -1, 2**70, 1.5, None],
}


def _serving_case(rng):
    from windtunnel.infer.api import simulate_serving

    kw = _mutated(rng, SERVE_BASE, SERVE_BAD)
    model, hardware, deployment, traffic = (kw.pop(k) for k in ("model", "hardware", "deployment", "traffic"))
    return (f"simulate_serving({model}, {hardware}, {deployment[:60]!r}, {traffic[:80]!r}, {kw})",
            lambda: simulate_serving(model, hardware, deployment, traffic, **kw).to_json_dict())


def _parsers_case(rng):
    from windtunnel.avail.policy import parse_policy
    from windtunnel.avail.units import parse_duration
    from windtunnel.graph.onnx_import import parse_batch_shape
    from windtunnel.infer.deployment import parse_deployment
    from windtunnel.infer.metrics import parse_slo
    from windtunnel.infer.traffic import parse_lengths, parse_traffic
    from windtunnel.job.run import parse_phase
    from windtunnel.job.units import (
        parse_bandwidth,
        parse_device_hour_price,
        parse_energy_price,
        parse_fraction,
        parse_power,
        parse_pue,
        parse_tokens,
    )
    from windtunnel.specs.whatif import parse_what_if

    text = _text(rng) if rng.random() < 0.6 else str(_number(rng)) + rng.choice(["", "s", "h", "TB/s", "B", "W",
                                                                                "/kWh", "/device-hour", "%", "x"])
    parsers = {
        "parse_deployment": lambda: parse_deployment(rng.choice(["mixed:", "prefill:", "decode:", ""]) + text),
        "parse_traffic": lambda: parse_traffic(rng.choice(["poisson:", "gamma:", "closed:", ""]) + text,
                                               seed=rng.choice([0, 3])),
        "parse_slo": lambda: parse_slo(text),
        "parse_policy": lambda: parse_policy(rng.choice(["hot-spare,", "restart-from-checkpoint,", ""]) + text),
        "parse_duration": lambda: parse_duration(text),
        "parse_what_if": lambda: parse_what_if(text),
        "parse_batch_shape": lambda: parse_batch_shape(text),
        "parse_lengths": lambda: parse_lengths(rng.choice(["fixed(", "uniform(", "lognormal(", ""]) + text
                                               + rng.choice([")", ""]), "input"),
        "parse_phase": lambda: parse_phase(text, 0),
        "parse_tokens": lambda: parse_tokens(text),
        "parse_bandwidth": lambda: parse_bandwidth(text),
        "parse_device_hour_price": lambda: parse_device_hour_price(text),
        "parse_energy_price": lambda: parse_energy_price(text),
        "parse_power": lambda: parse_power(text),
        "parse_fraction": lambda: parse_fraction(text, "idle-power"),
        "parse_pue": lambda: parse_pue(text),
    }
    name = rng.choice(sorted(parsers))
    return f"{name}({text[:80]!r})", parsers[name]


AVAIL_BASE = dict(devices=1024, faults="catalog:llama3-54day", policy="restart-from-checkpoint", step_time_s=10.0,
                  horizon_s=86400.0, rate_scale=1.0)
AVAIL_BAD = {
    "devices": [8, 16384, 0, -1, 10**8, 2**64, 1.5],
    "faults": ["catalog:meta-rsc1", "catalog:meta-rsc2", "nope", "", "catalog:"],
    "policy": ["hot-spare,spares=2", "elastic-shrink", "restart-from-checkpoint,checkpoint_every=5y",
               "hot-spare,spares=-1", "hot-spare,spares=100000", "restart-from-checkpoint,checkpoint_cost=1e308s",
               "restart-from-checkpoint,detect=0s,restart=0s", _text],
    "step_time_s": [1e-9, 0.0, -1.0, math.inf, math.nan, 1e9, 86400.0 * 365],
    "horizon_s": [1.0, 1e-9, 0.0, math.inf, 1e308, 100 * 365 * 86400.0, 3600.0],
    "rate_scale": [0.0, -1.0, math.inf, math.nan, 1e6, 1e-9],
}


def _avail_case(rng):
    from windtunnel.avail.formulas import daly_interval_s, exact_interval_s, mttf_s, young_interval_s
    from windtunnel.avail.markov import solve_markov
    from windtunnel.avail.optimize import checkpoint_interval
    from windtunnel.avail.scenario import make_scenario
    from windtunnel.avail.serving import serving_availability
    from windtunnel.avail.sim import simulate

    def scenario():
        kw = _mutated(rng, AVAIL_BASE, AVAIL_BAD)
        return make_scenario(kw.pop("devices"), kw.pop("faults"), kw.pop("policy"), **kw)

    a, b = _number(rng), _number(rng)
    cases = {
        "young": lambda: young_interval_s(a, b), "daly": lambda: daly_interval_s(a, b),
        "exact": lambda: exact_interval_s(a, b),
        "mttf": lambda: mttf_s(a, rng.choice([8, 0, 10**9, 1.5]), rng.choice([8, 0, -1])),
        "checkpoint_interval": lambda: checkpoint_interval(a, b, rng.choice([60.0, -1.0, math.nan])),
        "markov": lambda: solve_markov(scenario(), rng.choice([None, None, 1, 0, -1, 10**6])).to_json_dict(scenario()),
        "simulate": lambda: simulate(scenario(), rng.choice([2, 5, 0, -1, 10**9]), rng.choice([0, 1, -1])).to_json_dict(),
        "serving": lambda: serving_availability(instances=rng.choice([4, 0, -1, 10**9]),
                                                devices_per_instance=rng.choice([8, 0, 10**9]),
                                                faults="catalog:llama3-54day", goodput_per_instance_rps=a,
                                                target=rng.choice([1.0, 0.9, 2.0, math.nan]),
                                                replications=rng.choice([0, 0, 3, -1]), seed=0),
    }
    name = rng.choice(sorted(cases))
    return f"avail.{name}(a={a!r}, b={b!r})", cases[name]


# (generator, weight): the cheap parsers most, the simulations fewer (they take milliseconds to a second)
GENERATORS = [(_plan_case, 25), (_parsers_case, 35), (_hf_case, 20), (_validate_plan_case, 8), (_avail_case, 6),
              (_training_case, 4), (_serving_case, 2)]


def run_case(thunk, limit_s: float = LIMIT_S):
    """('ok', result) / ('error', WindtunnelError) / ('timeout', None) / ('crash', traceback text)."""
    from windtunnel.specs.errors import InternalError, WindtunnelError

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        return "ok", thunk()
    except InternalError:
        return "crash", traceback.format_exc()
    except WindtunnelError as exc:
        return "error", exc
    except CaseTimeout:
        return "timeout", None
    except Exception:  # noqa: BLE001 - any other class is what this test looks for
        return "crash", traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_random_api_inputs_give_a_result_or_one_clear_error():
    rng = random.Random(SEED)
    generators, weights = zip(*GENERATORS, strict=True)
    start = time.perf_counter()
    failures: list[str] = []
    counts = {"ok": 0, "error": 0}
    for _ in range(COUNT):
        label, thunk = rng.choices(generators, weights)[0](rng)
        kind, value = run_case(thunk)
        if kind in counts:
            counts[kind] += 1
        if kind == "ok":
            bad = _finite_problems(value)
            if bad:
                failures.append(f"non-finite result {bad[:3]}: {label}")
        elif kind == "error" and len(str(value)) > 2000:
            failures.append(f"error message of {len(str(value))} characters: {label}")
        elif kind in ("timeout", "crash"):
            tail = "" if value is None else value.strip().splitlines()[-1][:300]
            failures.append(f"{kind}: {label}\n    {tail}")
    total = time.perf_counter() - start
    print(f"API fuzz: seed {SEED}, {COUNT} cases, {total:.1f} s ({counts['ok']} results, {counts['error']} clear "
          f"errors), {len(failures)} failures")
    assert not failures, f"{len(failures)} of {COUNT} (seed {SEED}):\n" + "\n".join(failures[:40])

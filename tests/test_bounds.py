"""Bounded work (issue 20 item 2): inputs whose cost explodes are one clear error naming the field and the limit,
refused before the work starts (each check here returns in well under a second)."""

from __future__ import annotations

import json
import time

import pytest

from windtunnel.specs.bounds import MAX_CONFIG_BYTES, MAX_EXACT_MICRO_BATCHES, MAX_MICRO_BATCHES
from windtunnel.specs.errors import WindtunnelError


def _fast_error(fn, *needles: str) -> str:
    start = time.perf_counter()
    with pytest.raises(WindtunnelError) as info:
        fn()
    assert time.perf_counter() - start < 5.0
    message = str(info.value)
    for needle in needles:
        assert needle in message, message
    assert len(message) < 1000, message
    return message


@pytest.mark.parametrize("global_batch", [8 * (MAX_MICRO_BATCHES + 1), 10**18, 2**64])
def test_micro_batches_per_step_are_bounded(global_batch):
    from windtunnel.api import simulate_training

    _fast_error(lambda: simulate_training("llama3-8b", "h100-sxm", 8, seq_len=2048, global_batch=global_batch,
                                          plan="tp=1"), "global_batch")


def test_exact_play_is_bounded_tighter():
    from windtunnel.api import simulate_training

    _fast_error(lambda: simulate_training("llama3-8b", "h100-sxm", 8, seq_len=2048, plan="tp=1", exact=True,
                                          global_batch=8 * (MAX_EXACT_MICRO_BATCHES + 1)), "--exact", "steady")


def test_serving_replicas_and_requests_are_bounded():
    from windtunnel.infer.deployment import parse_deployment
    from windtunnel.infer.traffic import parse_traffic

    _fast_error(lambda: parse_deployment("mixed:tp=1,replicas=1e9"), "replicas", "100,000")
    _fast_error(lambda: parse_traffic("poisson:rate=2,input=10,output=10,requests=1e12"), "requests")
    _fast_error(lambda: parse_traffic("poisson:rate=1e308,input=10,output=10"), "rate")
    _fast_error(lambda: parse_traffic("poisson:rate=2,input=fixed(inf),output=10"), "input", "finite")


def test_markov_devices_and_simulation_work_are_bounded():
    from windtunnel.avail.scenario import make_scenario
    from windtunnel.avail.sim import simulate

    _fast_error(lambda: make_scenario(10**9, "catalog:llama3-54day", step_time_s=10.0, horizon_s=86400.0), "devices")
    scenario = make_scenario(16384, "catalog:llama3-54day", step_time_s=10.0, horizon_s=365 * 86400.0)
    _fast_error(lambda: simulate(scenario, 10**9), "replications")
    _fast_error(lambda: simulate(scenario, 100_000), "replications", "horizon")  # about 3e8 failures


def test_a_checkpoint_interval_beyond_the_horizon_is_refused():
    from windtunnel.avail.scenario import make_scenario

    _fast_error(lambda: make_scenario(1024, "catalog:llama3-54day", "restart-from-checkpoint,checkpoint_every=5y",
                                      step_time_s=10.0, horizon_s=86400.0), "checkpoint-every", "horizon")


def test_oversized_files_are_refused_before_reading(tmp_path):
    from windtunnel.specs.model import load_model

    path = tmp_path / "config.json"
    with path.open("wb") as handle:  # sparse: no 64 MiB written
        handle.truncate(MAX_CONFIG_BYTES + 1)
    _fast_error(lambda: load_model(str(path)), "bytes", f"{MAX_CONFIG_BYTES:,}")


def test_hf_counts_that_overflow_are_one_clear_error(tmp_path):
    from windtunnel.specs.model import load_model

    config = {"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 2**64,
              "vocab_size": 32000}
    path = tmp_path / "big.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    _fast_error(lambda: load_model(str(path)), "num_hidden_layers", "10,000")


def test_echoed_inputs_are_cut():
    from windtunnel.specs.plan import parse_plan

    message = _fast_error(lambda: parse_plan("tp=1," + "x" * 100_000), "characters")
    assert len(message) < 1000


def test_long_names_are_unknown_names_not_os_errors():
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.specs.model import load_model

    _fast_error(lambda: load_model("x" * 5000 + ".json"), "Unknown model")
    _fast_error(lambda: load_hardware("x" * 5000 + ".yaml", 8), "Unknown hardware")
    _fast_error(lambda: load_model("a\x00b.json"), "Unknown model")

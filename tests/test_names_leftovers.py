"""Issue 18 item 5 leftovers: Ray without a cluster, vpp with 1F1B, an early-checked --baseline, sliding
windows stated, case-insensitive names with did-you-mean for plan keys and profiles."""

from __future__ import annotations

import json

import pytest

from conftest import assert_one_clear_error
from windtunnel.avail.faults import load_faults
from windtunnel.avail.policy import parse_policy
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.plan import parse_plan, validate_plan

SMALL = ["--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--global-batch", "16"]


def test_vpp_with_1f1b_is_a_plan_error():
    from windtunnel.specs.model import load_model

    plan = parse_plan("tp=1,pp=2,vpp=2,schedule=1f1b")
    with pytest.raises(WindtunnelError) as info:
        validate_plan(plan, load_model("llama3-8b"), 8, 4096, 16)
    assert info.value.field == "schedule" and "interleaved" in str(info.value)


def test_vpp_with_1f1b_cli(cli):
    proc = cli("train", "simulate", *SMALL, "--plan", "tp=1,pp=2,vpp=2,schedule=1f1b")
    line = assert_one_clear_error(proc, "schedule", "1f1b", "vpp")
    assert "deadlock" not in line


def test_ray_without_cluster_is_one_error(monkeypatch):
    """ray.init failing to find a cluster (a stand-in ray module: no test depends on a cluster being absent)."""
    import sys
    import types

    from typer.testing import CliRunner

    from windtunnel.cli.app import app

    def init(**kwargs):
        raise ConnectionError("Could not find any running Ray instance.")

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init, remote=lambda f: f)
    monkeypatch.setitem(sys.modules, "ray", fake)
    result = CliRunner().invoke(app, ["train", "search", *SMALL, "--backend", "ray", "--address", "auto"])
    assert isinstance(result.exception, WindtunnelError), result.output
    text = str(result.exception)
    assert "'backend'" in text and "no Ray cluster" in text and "--backend local" in text and "\n" not in text


def test_unknown_backend(cli):
    proc = cli("train", "search", *SMALL, "--backend", "dask")
    assert_one_clear_error(proc, "backend", "local, ray")


def test_baseline_checked_before_search(cli):
    proc = cli("train", "search", *SMALL, "--baseline", "tp=3")
    assert_one_clear_error(proc, "baseline", "tp=3")
    assert "screen:" not in proc.stderr and "refine:" not in proc.stderr  # nothing was searched


def test_baseline_from_a_search_json(cli, tmp_path):
    first = cli("train", "search", *SMALL, "--top", "2", "--refine", "4", "--json")
    assert first.returncode == 0, first.stderr
    path = tmp_path / "search.json"
    path.write_text(first.stdout)
    again = cli("train", "search", *SMALL, "--top", "2", "--refine", "4", "--json", "--baseline", str(path))
    assert again.returncode == 0, again.stderr
    best = json.loads(first.stdout)["plans"][0]["plan"]
    assert json.loads(again.stdout)["baseline"]["plan"] == best


def test_plan_keys_case_insensitive_and_suggested():
    assert parse_plan("TP=2,Recompute=FULL").recompute == "full"
    with pytest.raises(WindtunnelError) as info:
        parse_plan("tp=2,pipline=2")
    assert "did you mean 'pipeline'" in str(info.value)
    with pytest.raises(WindtunnelError) as info:
        parse_plan("tp=2,recompte=full")
    assert "did you mean 'recompute'" in str(info.value)


def test_fault_profiles_and_policies_case_insensitive():
    assert load_faults("catalog:Llama3-54Day").id == "llama3-54day"
    assert load_faults("LLAMA3_54DAY").id == "llama3-54day"
    with pytest.raises(WindtunnelError) as info:
        load_faults("catalog:llama3-54")
    assert "did you mean 'llama3-54day'" in str(info.value)
    assert parse_policy("Hot-Spare").kind == "hot-spare"
    with pytest.raises(WindtunnelError) as info:
        parse_policy("hot-spar")
    assert "did you mean 'hot-spare'" in str(info.value)
    with pytest.raises(WindtunnelError) as info:
        parse_policy("hot-spare,restar=10min")
    assert "did you mean 'restart'" in str(info.value)


def test_missing_calibration_profile_suggests_a_file(cli, tmp_path):
    (tmp_path / "h100-cluster.yaml").write_text("windtunnel_profile: 1\n")
    proc = cli("train", "simulate", *SMALL, "--profile", str(tmp_path / "H100-Cluster.yaml"))
    assert_one_clear_error(proc, "profile", "did you mean 'h100-cluster.yaml'")


def test_sliding_window_is_modelled_and_stated(tmp_path):
    from windtunnel.api import simulate_training
    from windtunnel.specs.model import model_from_hf_config

    config = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
              "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
              "num_key_value_heads": 8, "vocab_size": 32000, "sliding_window": 4096, "hidden_act": "silu",
              "max_position_embeddings": 32768}
    windowed = model_from_hf_config(config, "mistral-7b")
    full = model_from_hf_config({**config, "sliding_window": None}, "mistral-7b-full")
    assert windowed.attention_window == 4096
    fast = simulate_training(windowed, "h100-sxm", 8, seq_len=16384, global_batch=8, plan="tp=1")
    slow = simulate_training(full, "h100-sxm", 8, seq_len=16384, global_batch=8, plan="tp=1")
    assert fast.step_time_s < 0.95 * slow.step_time_s  # attention over 4k keys, not 16k
    assert any("sliding_window = 4096" in line for line in fast.assumptions)
    assert not any("sliding" in line for line in slow.assumptions)

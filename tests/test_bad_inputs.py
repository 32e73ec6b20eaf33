"""Badly shaped user files (Hugging Face configs, cluster YAML) are one clear error, never a traceback (issue 20)."""

from __future__ import annotations

import json

import pytest

from conftest import assert_one_clear_error

GOOD = {"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 4, "vocab_size": 32000}
CONFIGS = {
    "zero_heads": ({**GOOD, "num_attention_heads": 0}, "num_attention_heads"),
    "top_level_list": ([1, 2], "JSON object"),
    "string_width": ({**GOOD, "hidden_size": "big"}, "hidden_size"),
    "fractional_layers": ({**GOOD, "num_hidden_layers": 2.5}, "num_hidden_layers"),
    "mla_missing_rope": ({**GOOD, "model_type": "deepseek_v3", "kv_lora_rank": 512}, "qk_rope_head_dim"),
}
CLUSTERS = {
    "empty_clusters": ("clusters: {}\n", "'clusters'"),
    "null_clusters": ("clusters: null\n", "'clusters'"),
    "top_level_list": ("- a\n- b\n", "mapping"),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_bad_hf_config_is_one_clear_error(cli, tmp_path, name):
    config, needle = CONFIGS[name]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    proc = cli("train", "simulate", "--model", str(path), "--hardware", "h100-sxm", "--devices", "8",
               "--seq-len", "2048", "--global-batch", "8", "--plan", "tp=1")
    assert_one_clear_error(proc, needle)


def test_deeply_nested_json_is_one_clear_error(cli, tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    proc = cli("train", "simulate", "--model", str(path), "--hardware", "h100-sxm", "--devices", "8",
               "--seq-len", "2048", "--global-batch", "8", "--plan", "tp=1")
    assert_one_clear_error(proc, "nested too deeply")


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_badly_shaped_cluster_yaml_is_one_clear_error(cli, tmp_path, name):
    text, needle = CLUSTERS[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    proc = cli("train", "simulate", "--model", "llama3-8b", "--hardware", str(path), "--devices", "8",
               "--seq-len", "2048", "--global-batch", "8", "--plan", "tp=1")
    assert_one_clear_error(proc, needle)


@pytest.mark.parametrize("extra,needle", [
    (["--model", "mixtral-8x7b", "--plan", "ep=8", "--moe-imbalance", "inf"], "moe_imbalance"),
    (["--model", "mixtral-8x7b", "--plan", "ep=8", "--moe-imbalance", "9"], "between 1"),
    (["--model", "llama3-8b", "--plan", "tp=1,mtp=100000000000000000000"], "'mtp'"),
])
def test_out_of_range_numbers_are_one_clear_error(cli, extra, needle):
    proc = cli("train", "simulate", "--hardware", "h100-sxm", "--devices", "8", "--seq-len", "2048",
               "--global-batch", "8", *extra)
    assert_one_clear_error(proc, needle)


def test_checkpoint_interval_survives_a_checkpoint_longer_than_the_mtbf():
    """Daly's exponential model overflowed (math range error) when the checkpoint cost dwarfs the MTBF; the
    optimum there is the MTBF itself (maximising tau exp(-tau / M))."""
    from windtunnel.avail.formulas import daly_interval_s, exact_interval_s

    assert exact_interval_s(3600.0, 1.0) == pytest.approx(1.0, rel=1e-3)
    assert daly_interval_s(3600.0, 1.0) == 1.0
    assert exact_interval_s(60.0, 3 * 3600.0) == pytest.approx(daly_interval_s(60.0, 3 * 3600.0), rel=0.01)


@pytest.mark.parametrize("args,needle", [
    (["markov", "--devices", "1000000000", "--step-time", "10s"], "'devices'"),
    (["simulate", "--devices", "1024", "--step-time", "10s", "--horizon", "1e308s"], "'horizon'"),
    (["simulate", "--devices", "1024", "--step-time", "10s", "--seed", "-1"], "'seed'"),
])
def test_availability_inputs_out_of_range_are_one_clear_error(cli, args, needle):
    assert_one_clear_error(cli("avail", *args), needle)

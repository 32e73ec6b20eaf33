"""Model-family traits a training CSV row cannot state (validation.training.MODEL_FAMILIES): one table, one
matching rule (the name without case and punctuation starts with the family key)."""

from __future__ import annotations

from windtunnel.validation.training import MODEL_FAMILIES, _row_model, model_family

BASE = {"id": "T1", "arch": "dense", "layers": "2", "hidden": "1024", "ffn_hidden": "2816", "heads": "8",
        "kv_heads": "8", "head_dim": "128"}


def test_family_rule_ignores_case_and_punctuation():
    assert model_family("GPT OSS 120B") is MODEL_FAMILIES["gptoss"]
    assert model_family("Qwen3_30B_a3B") is model_family("qwen3-235b-a22b") is MODEL_FAMILIES["qwen3"]
    assert model_family("Nemotron-340B") is MODEL_FAMILIES["nemotron"]
    assert model_family("Qwen2.5-32B") == {} and model_family("Boss-7B") == {}  # prefix only, not anywhere


def test_family_traits_fill_what_the_row_leaves_out():
    notes: list[str] = []
    qwen3 = _row_model({**BASE, "model": "Qwen3-8B", "vocab": "151936"}, notes)
    assert qwen3.qk_norm and not _row_model({**BASE, "model": "Qwen2-7B", "vocab": "151936"}, []).qk_norm
    nemotron = _row_model({**BASE, "model": "Nemotron-8B", "vocab": ""}, notes)
    assert nemotron.vocab == MODEL_FAMILIES["nemotron"]["vocab"]
    assert _row_model({**BASE, "model": "Nemotron-8B", "vocab": "1000"}, []).vocab == 1000  # a stated column wins
    oss = _row_model({**BASE, "model": "GPT OSS 20B", "vocab": "201088"}, notes)
    assert oss.attention_window == 128 and 0 < oss.windowed_layer_fraction < 1

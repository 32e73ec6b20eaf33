"""Hugging Face config.json loading (fixtures in tests/data/hf, copied from the published configs)."""

from __future__ import annotations

import json

import pytest

from conftest import DATA
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.model import load_model, model_from_hf_config

HF = DATA / "hf"
FILES = sorted(HF.glob("*.json"))


def test_fixtures_present():
    """The fixture folder holds the configs the README lists."""
    assert {p.stem for p in FILES} >= {"llama3-8b", "qwen2.5-7b", "qwen3-8b", "qwen3-30b-a3b", "mixtral-8x7b",
                                       "deepseek-v2-lite", "deepseek-v3"}


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_fixture_loads(path):
    """Every config loads into a ModelSpec whose shape echoes the config's own fields."""
    config = json.loads(path.read_text())
    m = load_model(str(path))
    assert m.layers == config["num_hidden_layers"]
    assert m.hidden == config["hidden_size"]
    assert m.heads == config["num_attention_heads"]
    assert m.vocab == config["vocab_size"]
    assert m.kv_heads == (config.get("num_key_value_heads") or config["num_attention_heads"])
    assert m.total_params() > m.active_params() * (1 - 1e-12) > 0


def test_deepseek_v3_shape():
    """DeepSeek-V3: MLA, 256 routed experts top-8, 1 shared, 3 leading dense layers, ~671B total / ~37B active."""
    m = load_model(str(HF / "deepseek-v3.json"))
    assert m.mla is not None
    assert (m.mla.q_lora_rank, m.mla.kv_lora_rank, m.mla.qk_nope_head_dim, m.mla.qk_rope_head_dim,
            m.mla.v_head_dim) == (1536, 512, 128, 64, 128)
    assert (m.moe.experts, m.moe.topk, m.moe.shared_experts, m.moe.dense_layers) == (256, 8, 1, 3)
    assert m.moe_layers == 58 and m.dense_layers == 3
    assert m.total_params() == pytest.approx(671e9, rel=0.02)
    assert m.active_params() == pytest.approx(37e9, rel=0.05)


def test_deepseek_v2_lite_has_no_q_lora():
    """DeepSeek-V2-Lite: q_lora_rank null -> full-rank query projection; 64 experts top-6, 2 shared."""
    m = load_model(str(HF / "deepseek-v2-lite.json"))
    assert m.mla is not None and m.mla.q_lora_rank is None
    assert (m.moe.experts, m.moe.topk, m.moe.shared_experts, m.moe.dense_layers) == (64, 6, 2, 1)
    assert m.total_params() == pytest.approx(15.7e9, rel=0.03)


@pytest.mark.parametrize("stem,total,tol", [
    ("qwen3-30b-a3b", 30.5e9, 0.03),
    ("mixtral-8x7b", 46.7e9, 0.02),
    ("llama3-8b", 8.03e9, 0.01),
    ("qwen3-8b", 8.19e9, 0.02),
    ("qwen2.5-7b", 7.62e9, 0.02),
])
def test_total_params_match_published(stem, total, tol):
    """Total parameters within tolerance of the model cards."""
    assert load_model(str(HF / f"{stem}.json")).total_params() == pytest.approx(total, rel=tol)


@pytest.mark.parametrize("stem", ["deepseek-v3", "llama3-8b", "mixtral-8x7b", "qwen3-30b-a3b"])
def test_hf_config_agrees_with_catalog(stem):
    """The HF config and the catalog YAML of the same model give the same parameter counts."""
    hf = load_model(str(HF / f"{stem}.json"))
    cat = load_model(stem)
    assert hf.total_params() == cat.total_params()
    assert hf.active_params() == cat.active_params()


def test_qwen_details():
    """Qwen2.5 has QKV bias and a sliding window switched off; Qwen3 gives head_dim explicitly."""
    q25 = load_model(str(HF / "qwen2.5-7b.json"))
    assert q25.qkv_bias is True and q25.attention_window is None
    q3 = load_model(str(HF / "qwen3-8b.json"))
    assert q3.head_dim == 128 and q3.qkv_bias is False
    moe = load_model(str(HF / "qwen3-30b-a3b.json"))
    assert (moe.moe.experts, moe.moe.topk, moe.moe.ffn_hidden) == (128, 8, 768)


def test_unsupported_model_type(tmp_path):
    """An unsupported model_type is a WindtunnelError naming 'model_type' (not a KeyError)."""
    config = json.loads((HF / "llama3-8b.json").read_text())
    config["model_type"] = "gpt2"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(WindtunnelError, match="model_type") as info:
        load_model(str(path))
    assert info.value.field == "model_type"
    with pytest.raises(WindtunnelError, match="model_type"):
        model_from_hf_config({"model_type": "bert"})


def test_missing_required_key_and_bad_json(tmp_path):
    """A config without num_hidden_layers, or malformed JSON, is a clear WindtunnelError."""
    config = json.loads((HF / "llama3-8b.json").read_text())
    del config["num_hidden_layers"]
    with pytest.raises(WindtunnelError, match="num_hidden_layers"):
        model_from_hf_config(config)
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "llama", ')
    with pytest.raises(WindtunnelError, match="JSON"):
        load_model(str(bad))


def test_config_directory_loads(tmp_path):
    """A directory holding config.json loads too (as `--model path/to/dir`)."""
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text((HF / "mixtral-8x7b.json").read_text())
    m = load_model(str(folder))
    assert m.id == "my-model" and m.moe.experts == 8


def test_gpt_oss_config_matches_catalog():
    """A GPT-OSS config.json (the fields of openai/gpt-oss-120b's, as cited in the catalog) loads
    with its alternating windows, expert biases and GLU clamp, and agrees with the catalog model."""
    config = {
        "model_type": "gpt_oss", "num_hidden_layers": 36, "hidden_size": 2880, "intermediate_size": 2880,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 201088,
        "num_local_experts": 128, "num_experts_per_tok": 4, "max_position_embeddings": 131072,
        "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 18,
        "attention_bias": True, "tie_word_embeddings": False, "swiglu_limit": 7.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096},
    }
    hf = model_from_hf_config(config, "gpt-oss-120b")
    cat = load_model("gpt-oss-120b")
    assert hf.total_params() == cat.total_params() and hf.active_params() == cat.active_params()
    assert (hf.attention_window, hf.windowed_layer_fraction) == (128, 0.5)
    assert hf.moe.expert_bias and hf.moe.activation_clamp == 7.0 and hf.moe.dense_layers == 0
    assert hf.rope_scaling == cat.rope_scaling == "yarn"


def test_yarn_rope_scaling_only_outside_latent_attention():
    # DeepSeek-V3's config scales RoPE with YaRN too, but its latent attention keeps its own fused rotary path.
    deepseek = load_model(str(HF / "deepseek-v3.json"))
    assert deepseek.mla is not None and deepseek.rope_scaling == "none"
    assert load_model(str(HF / "llama3-8b.json")).rope_scaling == "none"


def test_qwen3_has_per_head_qk_norm_in_its_layer_graph():
    """Qwen3 configs load with QK-Norm; the layer then normalises queries and keys before the rotary
    embedding (not part of Megatron's 'layernorm' recompute module, which re-runs the layer norms)."""
    from windtunnel.graph.transformer import Sharding, layer_forward
    from windtunnel.train.layers import module_ops

    qwen = load_model(str(HF / "qwen3-8b.json"))
    assert qwen.qk_norm and not load_model(str(HF / "llama3-8b.json")).qk_norm
    graph = layer_forward(qwen, Sharding(seq_len=4096), moe=False)
    names = [op.name for op in graph.ops]
    assert names.index("qkv_proj") < names.index("qk_norms") < names.index("rope")
    assert names.index("qk_norms") not in module_ops(graph, "layernorm")

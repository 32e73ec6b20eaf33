"""Model shapes: transformer (dense, MoE, MLA) specifications from the catalog, YAML or HF config.json.

All sizes are counts (layers, features, heads, tokens); parameter counts are in parameters.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

from windtunnel.specs.bounds import shown
from windtunnel.specs.errors import WindtunnelError, choices_text, did_you_mean
from windtunnel.specs.validation import build
from windtunnel.specs.yamlio import catalog_dir, exists, read_json, read_yaml

# Upper bounds of a model's shape (a few times the largest models published): past them the counts stop being a
# model and products of them overflow 64-bit integers.
MAX_LAYERS = 10_000
MAX_WIDTH = 1 << 20  # hidden and FFN widths
MAX_HEADS = 1 << 16  # heads, head dims, experts, ranks
MAX_VOCAB = 1 << 24
MAX_POSITIONS = 1 << 31


class MoESpec(BaseModel):
    """Mixture-of-experts feed-forward: routed experts (top-k per token) plus always-on shared experts."""

    model_config = ConfigDict(extra="forbid")
    experts: PositiveInt = Field(le=MAX_HEADS)
    shared_experts: NonNegativeInt = Field(default=0, le=MAX_HEADS)
    topk: PositiveInt = Field(le=MAX_HEADS)
    ffn_hidden: PositiveInt = Field(le=MAX_WIDTH)
    shared_ffn_hidden: PositiveInt | None = Field(default=None, le=MAX_WIDTH)
    dense_layers: NonNegativeInt = Field(default=0, le=MAX_LAYERS)
    # Routed experts whose projections carry biases (GPT-OSS), and the limit a clamped GLU clips
    # its gate and linear inputs to before the activation (GPT-OSS's swiglu_limit, 7.0).
    expert_bias: bool = False
    activation_clamp: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.topk > self.experts:
            raise ValueError(f"moe.topk ({self.topk}) cannot exceed moe.experts ({self.experts})")
        return self


class MLASpec(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank compressed queries and keys/values."""

    model_config = ConfigDict(extra="forbid")
    q_lora_rank: PositiveInt | None = Field(default=None, le=MAX_WIDTH)
    kv_lora_rank: PositiveInt = Field(le=MAX_WIDTH)
    qk_nope_head_dim: PositiveInt = Field(le=MAX_HEADS)
    qk_rope_head_dim: PositiveInt = Field(le=MAX_HEADS)
    v_head_dim: PositiveInt = Field(le=MAX_HEADS)


class ModelSpec(BaseModel):
    """A decoder-only transformer's shape."""

    model_config = ConfigDict(extra="forbid")
    id: str
    name: str = ""
    layers: PositiveInt = Field(le=MAX_LAYERS)
    hidden: PositiveInt = Field(le=MAX_WIDTH)
    ffn_hidden: PositiveInt = Field(le=MAX_WIDTH)
    heads: PositiveInt = Field(le=MAX_HEADS)
    kv_heads: PositiveInt | None = Field(default=None, le=MAX_HEADS)
    head_dim: PositiveInt | None = Field(default=None, le=MAX_HEADS)
    vocab: PositiveInt = Field(default=51200, le=MAX_VOCAB)
    activation: Literal["swiglu", "gelu"] = "swiglu"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    tied_embeddings: bool = False
    qkv_bias: bool = False
    # Every projection carries a bias (GPT-2 / GPT-3 blocks, Megatron-LM GPT's add_bias_linear default).
    # The adds ride in GEMM epilogues and the fused bias-GeLU / bias-dropout-add kernels, so they cost no
    # operator; they count as small parameter tensors (DeepSpeed ZeRO-3's persistent parameters).
    linear_bias: bool = False
    # RMSNorm of each head's query and key before the rotary embedding (Qwen3's QK-Norm).
    qk_norm: bool = False
    # Where positions enter: rope (rotary embedding of queries and keys in every layer: Llama, Qwen,
    # DeepSeek, GPT-OSS), learned (an absolute position table added to the token embedding once:
    # GPT-2/GPT-3, Megatron-LM GPT's learned_absolute default, MPT's benchmark models) or alibi (a
    # per-head bias inside the attention kernel: BLOOM). Only rope costs an operator in each layer.
    position_embedding: Literal["rope", "learned", "alibi"] = "rope"
    # A rotary embedding scaled at run time: 'yarn' (GPT-OSS; Megatron position_embedding_type 'yarn', whose
    # cos and sin carry YaRN's attention factor). Frameworks whose fused RoPE kernel takes plain RoPE only run it
    # as eager ops (stack kernels.rope 'fused_unscaled'). Multi-head latent attention has its own fused path, so
    # DeepSeek's YaRN is not this. 'none': plain RoPE, or a scaling folded into the frequencies at build time
    # (Llama 3.1's), which costs nothing per step.
    rope_scaling: Literal["none", "yarn"] = "none"
    max_seq_len: PositiveInt | None = Field(default=None, le=MAX_POSITIONS)
    attention_window: PositiveInt | None = Field(default=None, le=MAX_POSITIONS)
    windowed_layer_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    # Multi-token prediction modules after the last layer (DeepSeek-V3: 1; Hugging Face
    # num_nextn_predict_layers): each has its own transformer layer of the last layer's kind, a
    # projection of [hidden; embedded next token] back to the hidden width, and shares the
    # embedding and output layer. Their parameters are not in total_params (published counts
    # leave them out).
    mtp_layers: NonNegativeInt = Field(default=0, le=MAX_LAYERS)
    published_params_b: dict[str, float] | None = None
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _fill(self) -> ModelSpec:
        if self.kv_heads is None:
            self.kv_heads = self.heads
        if self.head_dim is None:
            if self.hidden % self.heads:
                raise ValueError(f"head_dim not given and hidden ({self.hidden}) is not divisible by heads ({self.heads})")
            self.head_dim = self.hidden // self.heads
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.moe is not None and self.moe.dense_layers > self.layers:
            raise ValueError(f"moe.dense_layers ({self.moe.dense_layers}) exceeds layers ({self.layers})")
        return self

    # ---- derived counts (parameters) -------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def moe_layers(self) -> int:
        """Layers whose feed-forward is a mixture of experts."""
        return 0 if self.moe is None else self.layers - self.moe.dense_layers

    @property
    def dense_layers(self) -> int:
        """Layers whose feed-forward is a dense MLP."""
        return self.layers - self.moe_layers

    def attention_params(self) -> int:
        """Parameters of one attention block (projections only; norms counted separately)."""
        h = self.hidden
        if self.mla is not None:
            m = self.mla
            qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
            if m.q_lora_rank:
                q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * self.heads * qk_head
            else:
                q = h * self.heads * qk_head
            kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
            kv += m.kv_lora_rank * self.heads * (m.qk_nope_head_dim + m.v_head_dim)
            out = self.heads * m.v_head_dim * h
            return q + kv + out
        q = h * self.heads * self.head_dim
        kv = 2 * h * self.kv_heads * self.head_dim
        out = self.heads * self.head_dim * h
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        qk_norm = 2 * self.head_dim if self.qk_norm else 0
        return q + kv + out + bias + qk_norm

    def mlp_params(self, width: int) -> int:
        """Parameters of one dense MLP of intermediate ``width``."""
        mats = 3 if self.activation == "swiglu" else 2
        return mats * self.hidden * width

    def expert_params(self) -> int:
        """Parameters of one routed expert (with its biases where the experts carry them)."""
        if not self.moe:
            return 0
        biases = 0
        if self.moe.expert_bias:
            up_width = 2 * self.moe.ffn_hidden if self.activation == "swiglu" else self.moe.ffn_hidden
            biases = up_width + self.hidden
        return self.mlp_params(self.moe.ffn_hidden) + biases

    def shared_expert_params(self) -> int:
        """Parameters of all shared experts of one MoE layer."""
        if not self.moe or not self.moe.shared_experts:
            return 0
        width = self.moe.shared_ffn_hidden or self.moe.ffn_hidden
        return self.moe.shared_experts * self.mlp_params(width)

    def mtp_params(self) -> int:
        """Parameters of one multi-token-prediction module (shared embedding and output layer excluded)."""
        h = self.hidden
        layer = self.attention_params() + 2 * h
        if self.moe is not None and self.moe_layers:
            layer += self.moe.experts * self.expert_params() + self.shared_expert_params() + h * self.moe.experts
        else:
            layer += self.mlp_params(self.ffn_hidden)
        return layer + 2 * h * h + 3 * h  # projection; norms of the hidden state, the embedding and the output

    def embedding_params(self) -> int:
        """Input embedding plus (untied) output head."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    def total_params(self) -> int:
        """All parameters (parameters)."""
        norms = 2 * self.hidden * self.layers + self.hidden
        total = self.embedding_params() + norms + self.layers * self.attention_params()
        total += self.dense_layers * self.mlp_params(self.ffn_hidden)
        if self.moe:
            per_layer = self.moe.experts * self.expert_params() + self.shared_expert_params() + self.hidden * self.moe.experts
            total += self.moe_layers * per_layer
        return total

    def active_params(self) -> int:
        """Parameters touched per token (MoE: top-k routed plus shared experts)."""
        if not self.moe:
            return self.total_params()
        inactive = self.moe_layers * (self.moe.experts - self.moe.topk) * self.expert_params()
        return self.total_params() - inactive


# ---- loaders ----------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _catalog_models() -> dict[str, dict]:
    models = {}
    for path in sorted(catalog_dir("models").glob("*.yaml")):
        doc = read_yaml(path) or {}
        models[doc.get("id", path.stem)] = doc
    return models


def model_names() -> list[str]:
    """Ids of the catalog's models."""
    return sorted(_catalog_models())


_HF_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v2", "deepseek_v3",
                "gpt_oss")


# Integer fields of a Hugging Face config the loader reads, and those of them that may be 0.
_HF_COUNTS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size", "intermediate_size",
              "num_key_value_heads", "head_dim", "moe_intermediate_size", "n_routed_experts", "num_experts",
              "num_local_experts", "num_experts_per_tok", "n_shared_experts", "first_k_dense_replace", "q_lora_rank",
              "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "sliding_window",
              "max_position_embeddings", "num_nextn_predict_layers", "shared_expert_intermediate_size")
_HF_MAY_BE_ZERO = ("n_shared_experts", "first_k_dense_replace", "q_lora_rank", "num_nextn_predict_layers",
                   "sliding_window", "shared_expert_intermediate_size")
_HF_MLA = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_HF_MAX = {"num_hidden_layers": MAX_LAYERS, "num_nextn_predict_layers": MAX_LAYERS, "first_k_dense_replace": MAX_LAYERS,
           "hidden_size": MAX_WIDTH, "intermediate_size": MAX_WIDTH, "moe_intermediate_size": MAX_WIDTH,
           "shared_expert_intermediate_size": MAX_WIDTH, "q_lora_rank": MAX_WIDTH, "kv_lora_rank": MAX_WIDTH,
           "vocab_size": MAX_VOCAB, "max_position_embeddings": MAX_POSITIONS, "sliding_window": MAX_POSITIONS}
# Fields a family's branch reads without a default (DeepSeek's expert fields only when it has routed experts).
_HF_REQUIRED = {"mixtral": ("num_local_experts", "num_experts_per_tok"),
                "gpt_oss": ("num_local_experts", "num_experts_per_tok"),
                "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
                "qwen2_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size")}


def _checked_counts(config: dict, family: str) -> dict:
    """The config with its integer fields checked: whole numbers (an integral float is accepted), positive (or
    zero where that means 'none'); a bad one is one clear error naming it."""
    out = dict(config)
    for key in _HF_COUNTS:
        value = config.get(key)
        if value is None:
            continue
        whole = isinstance(value, int) and not isinstance(value, bool)
        if not whole and isinstance(value, float) and value.is_integer():
            value, whole = int(value), True
        lowest = 0 if key in _HF_MAY_BE_ZERO else 1
        highest = _HF_MAX.get(key, MAX_HEADS)
        if not whole or not lowest <= value <= highest:
            raise WindtunnelError(f"Hugging Face config field '{key}' is {shown(value)}; it must be a whole number "
                                  f"from {lowest} to {highest:,}.", field=key)
        out[key] = value
    for key in _HF_REQUIRED.get(family, ()):
        if key not in config or config[key] is None:
            raise WindtunnelError(f"Hugging Face config (model_type '{family}') lacks required field '{key}'.",
                                  field=key)
    for key in ("swiglu_limit", "rope_theta"):
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            raise WindtunnelError(f"Hugging Face config field '{key}' is {shown(value)}; it must be a positive "
                                  "finite number.", field=key)
    for key in ("layer_types", "mlp_only_layers"):
        value = config.get(key)
        if value is not None and not (isinstance(value, list) and len(value) <= MAX_LAYERS):
            raise WindtunnelError(f"Hugging Face config field '{key}' is {shown(value)}; it must be a list (one entry "
                                  "per layer).", field=key)
    step = config.get("decoder_sparse_step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise WindtunnelError(f"Hugging Face config field 'decoder_sparse_step' is {shown(step)}; it must be a whole "
                              "number.", field="decoder_sparse_step")
    if family in ("deepseek_v2", "deepseek_v3"):
        missing = [key for key in _HF_MLA if config.get(key) is None]
        if missing:
            raise WindtunnelError(f"Hugging Face config (model_type '{family}', multi-head latent attention) lacks "
                                  f"required field(s) {', '.join(missing)}.", field=missing[0])
    return out


def model_from_hf_config(config: dict, model_id: str = "hf-model") -> ModelSpec:
    """Build a ModelSpec from a Hugging Face ``config.json`` (Llama, Qwen2/3, Qwen3-MoE, Mixtral, DeepSeek-V2/V3,
    GPT-OSS)."""
    if not isinstance(config, dict):
        raise WindtunnelError(f"A Hugging Face config.json must be a JSON object of fields, got a {type(config).__name__}.",
                              field="config")
    family = str(config.get("model_type", "")).lower()
    if family not in _HF_FAMILIES:
        raise WindtunnelError(
            f"Hugging Face config has model_type '{family}' (field 'model_type'), which is not supported; "
            f"supported families: {', '.join(_HF_FAMILIES)}.",
            field="model_type",
        )
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size"):
        if config.get(key) is None:
            raise WindtunnelError(f"Hugging Face config lacks required field '{key}' for model_type '{family}'.", field=key)
    config = _checked_counts(config, family)
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    data: dict = {
        "id": model_id,
        "name": model_id,
        "layers": int(config["num_hidden_layers"]),
        "hidden": hidden,
        "ffn_hidden": int(config.get("intermediate_size") or 4 * hidden),
        "heads": heads,
        "kv_heads": int(config.get("num_key_value_heads") or heads),
        "head_dim": int(config.get("head_dim") or hidden // heads),
        "vocab": int(config["vocab_size"]),
        "activation": "swiglu",
        "norm": "rmsnorm",
        "tied_embeddings": bool(config.get("tie_word_embeddings", False)),
        "qkv_bias": family in ("qwen2", "qwen2_moe") or bool(config.get("attention_bias", False)),
        # Qwen3 (dense and MoE) normalises each head's query and key (q_norm / k_norm weights).
        "qk_norm": family in ("qwen3", "qwen3_moe"),
        "max_seq_len": config.get("max_position_embeddings"),
        "sources": {"shape": f"Hugging Face config.json ({family})"},
    }
    window = config.get("sliding_window")
    if window and config.get("use_sliding_window", family in ("mistral", "mixtral")):
        data["attention_window"] = int(window)
        data["windowed_layer_fraction"] = 1.0
    layer_types = config.get("layer_types")
    if family == "gpt_oss" and window and layer_types:
        # GPT-OSS alternates sliding-window and full-attention layers (layer_types).
        data["attention_window"] = int(window)
        data["windowed_layer_fraction"] = sum(kind == "sliding_attention" for kind in layer_types) / len(layer_types)
    scaling = config.get("rope_scaling")
    if isinstance(scaling, dict) and (scaling.get("rope_type") or scaling.get("type")) == "yarn" \
            and family not in ("deepseek_v2", "deepseek_v3"):  # MLA's rotary embedding has its own fused path
        data["rope_scaling"] = "yarn"
    if family == "gpt_oss":
        # Every layer is a mixture of experts; the experts' projections carry biases and their GLU
        # input is clipped to swiglu_limit.
        limit = config.get("swiglu_limit")
        data["moe"] = {
            "experts": int(config["num_local_experts"]),
            "topk": int(config["num_experts_per_tok"]),
            "ffn_hidden": data["ffn_hidden"],
            "expert_bias": True,
            "activation_clamp": float(limit) if limit else None,
        }
    elif family == "mixtral":
        data["moe"] = {
            "experts": int(config["num_local_experts"]),
            "topk": int(config["num_experts_per_tok"]),
            "ffn_hidden": data["ffn_hidden"],
        }
    elif family in ("qwen3_moe", "qwen2_moe"):
        shared = int(config.get("shared_expert_intermediate_size") or 0)
        sparse_step = int(config.get("decoder_sparse_step", 1) or 1)
        if sparse_step != 1 or config.get("mlp_only_layers"):
            raise WindtunnelError(
                "Hugging Face config uses decoder_sparse_step/mlp_only_layers (interleaved dense layers), which is "
                "not supported yet; only leading dense layers are (field 'decoder_sparse_step', valid: 1)."
            )
        data["moe"] = {
            "experts": int(config["num_experts"]),
            "topk": int(config["num_experts_per_tok"]),
            "ffn_hidden": int(config["moe_intermediate_size"]),
            "shared_experts": 1 if shared else 0,
            "shared_ffn_hidden": shared or None,
        }
    elif family in ("deepseek_v2", "deepseek_v3"):
        routed = config.get("n_routed_experts")
        if routed:
            for key in ("num_experts_per_tok", "moe_intermediate_size"):
                if config.get(key) is None:
                    raise WindtunnelError(f"Hugging Face config (model_type '{family}' with n_routed_experts) lacks "
                                          f"required field '{key}'.", field=key)
            shared = int(config.get("n_shared_experts") or 0)
            data["moe"] = {
                "experts": int(routed),
                "topk": int(config["num_experts_per_tok"]),
                "ffn_hidden": int(config["moe_intermediate_size"]),
                "shared_experts": shared,
                "shared_ffn_hidden": int(config["moe_intermediate_size"]) if shared else None,
                "dense_layers": int(config.get("first_k_dense_replace") or 0),
            }
        data["mtp_layers"] = int(config.get("num_nextn_predict_layers") or 0)
        data["mla"] = {
            "q_lora_rank": config.get("q_lora_rank"),
            "kv_lora_rank": int(config["kv_lora_rank"]),
            "qk_nope_head_dim": int(config["qk_nope_head_dim"]),
            "qk_rope_head_dim": int(config["qk_rope_head_dim"]),
            "v_head_dim": int(config["v_head_dim"]),
        }
        data["head_dim"] = int(config["qk_nope_head_dim"]) + int(config["qk_rope_head_dim"])
    return build(ModelSpec, data, f"Model from Hugging Face config '{model_id}'")


def load_model(name_or_path: str) -> ModelSpec:
    """Resolve ``--model``: a catalog id, a model YAML file, or a Hugging Face ``config.json``."""
    catalog = _catalog_models()
    if name_or_path in catalog:
        return build(ModelSpec, catalog[name_or_path], f"Catalog model '{name_or_path}'")
    path = Path(name_or_path)
    if exists(path, "dir") and exists(path / "config.json"):
        path = path / "config.json"
    if path.suffix == ".json" and exists(path):
        return model_from_hf_config(read_json(path) or {}, model_id=path.parent.name if path.name == "config.json" else path.stem)
    if path.suffix in (".yaml", ".yml") and exists(path):
        doc = read_yaml(path) or {}
        if isinstance(doc, dict) and "layer" in doc:
            raise WindtunnelError(
                f"'{path}' is an operator-DAG model; load it with windtunnel.load_dag or pass it to simulate_training."
            )
        return build(ModelSpec, {"id": path.stem, **doc} if isinstance(doc, dict) else doc, f"Model file '{path}'")
    raise WindtunnelError(
        f"Unknown model '{name_or_path}' (field 'model'){did_you_mean(name_or_path, catalog)}; give a catalog model "
        f"({choices_text(catalog)}), a model YAML file or a Hugging Face config.json.",
        field="model",
    )

"""Where positions enter the model: rotary in every layer, or a learned table / ALiBi that costs no layer op."""

from __future__ import annotations

from windtunnel.graph.transformer import Sharding, embedding_forward, layer_forward
from windtunnel.specs.model import load_model
from windtunnel.validation import training as validation


def _names(graph) -> set[str]:
    return {op.name for op in graph.ops}


def test_only_rotary_models_run_a_rope_op_per_layer():
    llama, gpt3 = load_model("llama3-8b"), load_model("gpt3-175b")
    assert gpt3.position_embedding == "learned" and llama.position_embedding == "rope"
    shard = Sharding(seq_len=2048)
    assert "rope" in _names(layer_forward(llama, shard, moe=False))
    assert "rope" not in _names(layer_forward(gpt3, shard, moe=False))
    alibi = llama.model_copy(update={"position_embedding": "alibi"})
    assert "rope" not in _names(layer_forward(alibi, shard, moe=False))
    # The learned table is read once, at the embedding.
    learned_model = llama.model_copy(update={"position_embedding": "learned"})
    emb_learned = next(op for op in embedding_forward(learned_model, shard).ops if op.name == "embedding").bytes_moved
    emb_rope = next(op for op in embedding_forward(llama, shard).ops if op.name == "embedding").bytes_moved
    assert emb_learned == 1.5 * emb_rope  # three passes over the tokens' rows instead of two


def test_validation_rows_infer_positions_and_a_column_overrides():
    rows = validation.read_rows("validation/training_runs.csv")
    gpt = next(r for r in rows if r["id"] == "1")  # GPT-3 style: plain 4h FFN
    model = validation.build_job(gpt)[0].model
    assert model.position_embedding == "learned" and model.activation == "gelu"
    stated = dict(gpt, position_embedding="rope", activation="swiglu", norm="rmsnorm")
    model = validation.build_job(stated)[0].model
    assert (model.position_embedding, model.activation, model.norm) == ("rope", "swiglu", "rmsnorm")
    bad = validation.validate_rows([dict(gpt, position_embedding="rotary")])[0]
    assert bad.predicted is None and "position_embedding" in bad.status and "rope, learned, alibi" in bad.status

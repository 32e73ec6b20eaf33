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


def test_matmul_lookup_is_a_one_hot_gemm_with_a_weight_gradient_only():
    """Praxis's lookup_style 'matmul' (the paxml stack): one-hot x table GEMMs for the token and learned
    position tables, 16-bit under FP8, no model FLOPs, and a backward of weight gradients alone."""
    from windtunnel.graph.ops import backward_of
    from windtunnel.specs.stack import load_stack

    gpt = load_model("gpt3-175b")
    shard = Sharding(seq_len=2048, micro_batch=2, tp=2, embedding_matmul=True, precision="fp8")
    forward = embedding_forward(gpt, shard)
    gemms = {op.name: op for op in forward.ops if op.kind == "gemm"}
    assert set(gemms) == {"embedding", "position_embedding"}
    tokens = 2 * 2048
    assert gemms["embedding"].flops == 2.0 * tokens * (gpt.vocab // 2) * gpt.hidden  # vocab-parallel under TP
    assert gemms["position_embedding"].flops == 2.0 * tokens * 2048 * gpt.hidden
    assert all(op.precision == "bf16" and not op.model_flops for op in gemms.values())
    backward = backward_of(forward)
    names = {op.name for op in backward.ops if op.kind == "gemm"}
    assert names == {"embedding.wgrad", "position_embedding.wgrad"}  # the ids have no gradient
    assert all(op.weight_grad for op in backward.ops if op.kind == "gemm")
    # A rotary model has no position table: the token lookup alone.
    llama = load_model("llama3-8b")
    assert [op.name for op in embedding_forward(llama, shard).ops if op.kind == "gemm"] == ["embedding"]
    # The gather is the default; the paxml stack (PaxML GPT configs) asks for the matmul.
    assert load_stack("jax").kernels.embedding_lookup == "gather"
    assert load_stack("paxml").kernels.embedding_lookup == "matmul"


def test_paxml_stack_pays_for_its_matmul_lookup():
    from windtunnel.api import simulate_training

    common = dict(model="gpt3-175b", hardware="h100-sxm", devices=128, seq_len=2048, global_batch=256,
                  plan="tp=1,pp=1,mbs=2,zero=3,recompute=full")
    jax, pax = (simulate_training(**common, framework=f) for f in ("jax", "paxml"))
    assert pax.step_time_s > jax.step_time_s
    assert pax.mfu < jax.mfu  # the one-hot GEMMs are not model FLOPs


def test_embedding_lookup_is_a_plan_field_with_the_stack_as_default():
    from windtunnel.specs.plan import parse_plan
    from windtunnel.specs.stack import load_stack, with_stack_defaults

    pax, jax = load_stack("paxml"), load_stack("jax")
    assert with_stack_defaults(parse_plan("tp=1"), pax).embedding_lookup == "matmul"
    assert with_stack_defaults(parse_plan("tp=1"), jax).embedding_lookup == "gather"
    # MaxText's GPU recipes pass use_iota_embed=true: the plan says so and wins over the stack.
    stated = with_stack_defaults(parse_plan("tp=1,embedding_lookup=matmul"), jax)
    assert stated.embedding_lookup == "matmul" and "embedding_lookup=matmul" in stated.to_string()
    assert with_stack_defaults(parse_plan("embedding_lookup=gather"), pax).embedding_lookup == "gather"


def test_bad_embedding_lookup_is_one_clear_error(cli):
    proc = cli("train", "simulate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8",
               "--seq-len", "4096", "--global-batch", "8", "--plan", "mbs=1,embedding_lookup=onehot",
               "--framework", "jax")
    assert proc.returncode != 0
    assert "embedding_lookup" in proc.stderr and "onehot" in proc.stderr and "matmul" in proc.stderr
    assert "Traceback" not in proc.stderr

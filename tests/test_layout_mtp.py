"""Pipeline layouts (Megatron's --pipeline-model-parallel-layout) and multi-token prediction (MTP)."""

import pytest

from windtunnel.api import simulate_training
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.layout import expand_layout, stage_modules
from windtunnel.specs.model import load_model, model_from_hf_config
from windtunnel.specs.plan import parse_plan
from windtunnel.train.flops import model_flops_per_token

DSV3 = dict(seq_len=4096, global_batch=512, moe_imbalance=1.0)
DSV3_PLAN = "tp=1,pp=16,ep=8,mbs=1,precision=fp8,recompute=selective,dispatcher=alltoall"


def test_expand_layout_repeats_symbols_and_groups():
    assert expand_layout("Et*2|(t|)*2tmL") == ["Ett", "t", "t", "tmL"]
    assert expand_layout("E, t | t*3 |L") == ["Et", "ttt", "L"]  # commas and spaces are cosmetic
    assert expand_layout("Et||tL") == ["Et", "", "tL"]  # empty stages are allowed


def test_stage_modules_follow_the_layout_and_default_split():
    model = load_model("deepseek-v3")
    stages = stage_modules(model, "Et*4|(t*4|)*14tmL", 16, 1)
    assert stages[0] == ["embedding"] + ["dense"] * 3 + ["moe"]
    assert stages[-1] == ["moe", "mtp_embedding", "mtp_proj", "moe", "mtp_head", "head"]
    assert sum(kind in ("dense", "moe") for stage in stages for kind in stage) == model.layers + 1
    default = stage_modules(model, "", 16, 0)
    assert default[0][0] == "embedding" and default[-1][-1] == "head"
    assert sum(len(stage) for stage in default) == model.layers + 2


@pytest.mark.parametrize(("layout", "needle"), [
    ("Et*4|(t*4|)*14tmL", "stages"),          # 16 stages for an 8-stage plan
    ("Et*3|(t*4|)*6tmL", "transformer layers"),
    ("Et*8|(t*8|)*6t*5L", "MTP modules"),
    ("t*8|(t*8|)*6t*5EmL", "embedding"),
    ("Et*8|(t*8|)*6t*4mLt", "loss"),
    ("Et*8|(t*8|)*6t*4mt", "loss"),
    ("Et*8|(t*8|)*6t*4mtL", "after every transformer layer"),
    ("Et*8|(t*8|)*6t*5(mL", "never closed"),
    ("Et*8|(t*8|)*6t*5)mL", "unmatched"),
    ("Et*8|(t*8|)*6t*5mX", "not a layout symbol"),
])
def test_bad_layouts_name_the_field(layout, needle):
    with pytest.raises(WindtunnelError) as error:
        simulate_training("deepseek-v3", "b200", 64, plan=f"tp=1,pp=8,ep=8,mtp=1,layout={layout}", **DSV3)
    assert error.value.field == "layout"
    assert needle in str(error.value)


def test_layout_round_trips_through_plan_text():
    plan = parse_plan("pp=16,mtp=1,pipeline_model_parallel_layout=Et*4|(t*4|)*14 t m L")
    assert plan.layout == "Et*4|(t*4|)*14tmL" and plan.mtp == 1
    again = parse_plan(plan.to_string())
    assert (again.layout, again.mtp, again.pp) == (plan.layout, plan.mtp, plan.pp)


def test_mtp_adds_work_on_the_last_stage_and_a_balanced_layout_recovers_it():
    without = simulate_training("deepseek-v3", "b200", 256, plan=DSV3_PLAN + ",mtp=0", **DSV3)
    even = simulate_training("deepseek-v3", "b200", 256, plan=DSV3_PLAN + ",mtp=1", **DSV3)
    balanced = simulate_training("deepseek-v3", "b200", 256, plan=DSV3_PLAN + ",mtp=1,layout=Et*4|(t*4|)*14tmL", **DSV3)
    # The even split leaves three layers plus the MTP layer and two output layers on the last stage.
    assert even.step_time_s > balanced.step_time_s > 0
    assert even.step_time_s > without.step_time_s
    # MTP is training work: the model FLOPs per step grow by its layer, projection and output layer.
    assert even.model_flops_per_step > without.model_flops_per_step
    assert balanced.model_flops_per_step == pytest.approx(even.model_flops_per_step)


def test_model_default_mtp_is_used_unless_the_plan_overrides_it():
    model = load_model("deepseek-v3")
    assert model.mtp_layers == 1
    default = simulate_training("deepseek-v3", "b200", 256, plan=DSV3_PLAN, **DSV3)
    explicit = simulate_training("deepseek-v3", "b200", 256, plan=DSV3_PLAN + ",mtp=1", **DSV3)
    assert default.step_time_s == explicit.step_time_s
    assert any("multi-token-prediction" in line for line in default.assumptions)


def test_mtp_flops_match_the_closed_form():
    model = load_model("deepseek-v3")
    base = model_flops_per_token(model, 4096)
    with_mtp = model_flops_per_token(model, 4096, mtp=1)
    h = model.hidden
    layer = model.attention_params() + model.moe.topk * model.expert_params() + model.shared_expert_params() \
        + h * model.moe.experts
    attention = 2.0 * model.heads * (192 + 128) * 2048  # one causal layer at 4,096 tokens
    assert with_mtp - base == pytest.approx(3.0 * (2.0 * (2 * h * h + layer + model.vocab * h) + attention))
    # DeepSeek-V3 report: the MTP module is 14B parameters with the shared embedding and head.
    assert 12e9 < model.mtp_params() + 2 * model.vocab * h < 15e9


def test_hf_config_reads_num_nextn_predict_layers():
    config = {"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 512,
              "moe_intermediate_size": 64, "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
              "first_k_dense_replace": 1, "num_attention_heads": 4, "q_lora_rank": 64, "kv_lora_rank": 32,
              "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, "vocab_size": 1000,
              "num_nextn_predict_layers": 1}
    assert model_from_hf_config(config).mtp_layers == 1
    config.pop("num_nextn_predict_layers")
    assert model_from_hf_config(config).mtp_layers == 0


def test_an_unbalanced_layout_is_slower_than_the_even_split():
    kwargs = dict(seq_len=4096, global_batch=64)
    even = simulate_training("llama3-8b", "h100-sxm", 8, plan="tp=1,pp=2,mbs=1", **kwargs)
    same = simulate_training("llama3-8b", "h100-sxm", 8, plan="tp=1,pp=2,mbs=1,layout=Et*16|t*16L", **kwargs)
    skewed = simulate_training("llama3-8b", "h100-sxm", 8, plan="tp=1,pp=2,mbs=1,layout=Et*24|t*8L", **kwargs)
    assert same.step_time_s == pytest.approx(even.step_time_s)
    assert skewed.step_time_s > even.step_time_s
    assert skewed.peak_memory_bytes > even.peak_memory_bytes

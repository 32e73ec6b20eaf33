"""MoE kernel paths and FP8 attention: where each dispatcher reorders tokens (alltoall, deepep, hybridep), the
fused MXFP8 grouped MLP (expert_gemm=fused_mlp), fp8_attention, and train search --fixed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import assert_one_clear_error
from windtunnel.cost.compute import gemm_time
from windtunnel.cost.efficiency import efficiency_for
from windtunnel.graph.ops import backward_of
from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_chip, load_hardware
from windtunnel.specs.model import load_model
from windtunnel.specs.plan import parse_plan
from windtunnel.train.step import TrainingJob, simulate

MX = "tp=1,pp=1,ep=8,mbs=2,recompute=none,precision=fp8,fp8_recipe=mx"
PERMUTATION = {"permute", "sort_by_expert", "unsort_by_expert", "unpermute"}


def _job(plan: str, chip: str = "gb200") -> TrainingJob:
    return TrainingJob(model=load_model("qwen3-30b-a3b"), cluster=load_hardware(chip, 8), plan=parse_plan(plan),
                       seq_len=4096, global_batch=64)


def _moe_ops(**shard) -> dict:
    graph = layer_forward(load_model("qwen3-30b-a3b"), Sharding(ep=8, micro_batch=2, seq_len=4096, **shard), moe=True)
    return {op.name: op for op in graph.ops}


def test_each_dispatcher_reorders_tokens_where_megatron_does():
    alltoall = _moe_ops(dedup_dispatch=False)
    deepep = _moe_ops(dedup_dispatch=True)
    hybridep = _moe_ops(dedup_dispatch=True, permute_in_dispatch=True)
    # All-to-all: permute before sending, regroup on arrival, undo both (four passes over the tokens).
    assert all(alltoall[name].bytes_moved > 0 for name in PERMUTATION)
    # Flex dispatcher (DeepEP, HybridEP): the tokens leave unpermuted and are reordered on arrival only.
    assert deepep["permute"].bytes_moved == 0 and "unpermute" not in deepep
    assert deepep["sort_by_expert"].bytes_moved == alltoall["sort_by_expert"].bytes_moved > 0
    assert deepep["unsort_by_expert"].bytes_moved > 0
    # HybridEP with the reordering fused into its kernels: no pass of its own.
    assert hybridep["permute"].bytes_moved == 0 and not {"sort_by_expert", "unsort_by_expert", "unpermute"} & set(hybridep)
    # The preprocessing (routing map, token counts) and its host wait stay on every path.
    assert all(ops["permute"].host_sync and ops["permute"].host_ops == 15.0 for ops in (alltoall, deepep, hybridep))
    # Deduplicating dispatchers send each token once per rank; the collectives are the same for both.
    assert deepep["dispatch"].fanout == hybridep["dispatch"].fanout == 8 and alltoall["dispatch"].fanout == 1
    for name in ("dispatch", "combine"):
        assert deepep[name].bytes_moved == hybridep[name].bytes_moved
    # Without expert parallelism nothing is dispatched, so the dispatcher changes nothing.
    alone = [layer_forward(load_model("qwen3-30b-a3b"), Sharding(ep=1, micro_batch=2, seq_len=4096, **flags), moe=True)
             for flags in ({}, {"dedup_dispatch": True, "permute_in_dispatch": True})]
    assert [op.bytes_moved for op in alone[0].ops] == [op.bytes_moved for op in alone[1].ops]


def test_fewer_reordering_passes_make_a_faster_step():
    alltoall, deepep = simulate(_job(MX + ",dispatcher=alltoall")), simulate(_job(MX + ",dispatcher=deepep"))
    hybridep = simulate(_job(MX + ",dispatcher=hybridep"))
    assert hybridep.step_time_s < deepep.step_time_s < alltoall.step_time_s
    assert "permutation into expert order fused" in " ".join(hybridep.assumptions)


def test_fused_mlp_folds_the_activation_and_its_quantisation_into_the_gemms():
    grouped, fused = _moe_ops(precision="fp8"), _moe_ops(precision="fp8", fused_expert_mlp=True)
    assert grouped["experts.act"].bytes_moved > 0 and fused["experts.act"].bytes_moved == 0
    assert fused["experts.act"].saved_bytes == grouped["experts.act"].saved_bytes  # its input is still kept
    up, down = fused["experts.up_proj"], fused["experts.down_proj"]
    assert up.library_calls == down.library_calls == 0 and grouped["experts.up_proj"].library_calls == 16
    assert down.quantized_in == ("fwd",) and up.quantized_in == ("bwd",)
    backward = {op.name: op for op in backward_of(layer_forward(
        load_model("qwen3-30b-a3b"), Sharding(ep=8, micro_batch=2, seq_len=4096, precision="fp8",
                                              fused_expert_mlp=True), moe=True)).ops}
    assert backward["experts.act.bwd"].bytes_moved == 0
    assert backward["experts.up_proj.dgrad"].quantized_in == ("bwd",) == backward["experts.up_proj.wgrad"].quantized_in


def test_an_operand_that_arrives_quantised_skips_the_cast_kernel():
    chip = load_chip("gb200")
    eff = efficiency_for(chip, {}, fp8_recipe="mx")
    cast, no_cast = gemm_time(4096, 2048, 768, "fp8", chip, eff, count=16), gemm_time(
        4096, 2048, 768, "fp8", chip, eff, count=16, cast_input=False)
    assert no_cast < cast
    assert cast - no_cast == pytest.approx(16 * 3.0 * 4096 * 768 / (chip.hbm_bandwidth * eff.memory_bandwidth)
                                           + eff.kernel_overhead_s)
    # 16-bit GEMMs have no cast either way.
    assert gemm_time(4096, 2048, 768, "bf16", chip, eff, cast_input=False) == gemm_time(4096, 2048, 768, "bf16", chip, eff)


def test_fused_mlp_speeds_the_step_and_round_trips():
    grouped, fused = simulate(_job(MX)), simulate(_job(MX + ",expert_gemm=fused_mlp"))
    assert fused.step_time_s < grouped.step_time_s
    plan = parse_plan(MX + ",expert_gemm=fused_mlp,dispatcher=hybridep")
    again = parse_plan(plan.to_string())
    assert (again.expert_gemm, again.dispatcher) == ("fused_mlp", "hybridep")


@pytest.mark.parametrize("plan", ["tp=1,pp=1,ep=8,precision=bf16,expert_gemm=fused_mlp",
                                  "tp=1,pp=1,ep=8,precision=fp8,expert_gemm=fused_mlp"])
def test_fused_mlp_needs_mxfp8(plan):
    with pytest.raises(WindtunnelError) as err:
        simulate(_job(plan))
    assert err.value.field == "expert_gemm" and "fp8_recipe=mx" in str(err.value)


def test_fused_mlp_on_hopper_is_refused_by_the_mx_recipe():
    with pytest.raises(WindtunnelError) as err:
        simulate(_job(MX + ",expert_gemm=fused_mlp", chip="h100-sxm"))
    assert err.value.field == "fp8_recipe" and "h100-sxm" in str(err.value)


def test_cli_errors_are_one_clear_paragraph(cli):
    base = ("train", "simulate", "--model", "qwen3-30b-a3b", "--hardware", "gb200", "--devices", "8",
            "--global-batch", "64", "--seq-len", "4096")
    assert_one_clear_error(cli(*base, "--plan", "tp=1,pp=1,ep=8,expert_gemm=fused_mlp"), "expert_gemm", "fp8_recipe=mx")
    assert_one_clear_error(cli(*base, "--plan", "tp=1,pp=1,ep=8,dispatcher=hybrid"), "dispatcher", "hybridep")


def test_fused_mlp_clamps_and_adds_biases_in_its_epilogue():
    model = load_model("gpt-oss-120b")

    def names(fused: bool) -> set[str]:
        shard = Sharding(ep=8, micro_batch=1, seq_len=4096, precision="fp8", fused_expert_mlp=fused)
        return {op.name for op in layer_forward(model, shard, moe=True).ops}

    assert {"experts.act_clamp", "experts.bias"} <= names(False)
    assert not {"experts.act_clamp", "experts.bias"} & names(True)


def test_a_kernel_path_no_row_runs_is_an_extrapolation():
    from windtunnel.api import simulate_training

    plan = MX + ",dispatcher=hybridep,expert_gemm=fused_mlp"
    fused = simulate_training("qwen3-30b-a3b", "gb200", 8, plan=plan, seq_len=4096, global_batch=64)
    assert fused.extrapolation["extrapolating"]
    # The fused grouped MLP is validated (the 26.06 rows' recipes run it); HybridEP with its fused permutation is not.
    assert any("plan dispatcher=hybridep:" in reason for reason in fused.extrapolation["reasons"])
    assert not any("expert_gemm" in reason for reason in fused.extrapolation["reasons"])
    plain = simulate_training("qwen3-30b-a3b", "gb200", 8, plan=MX + ",dispatcher=deepep", seq_len=4096, global_batch=64)
    assert not any("kernel path" in reason for reason in plain.extrapolation["reasons"])


def test_fp8_attention_runs_the_attention_matmuls_at_the_fp8_peak():
    plan = "tp=1,pp=1,ep=8,mbs=2,recompute=none,precision=fp8"
    graph = layer_forward(load_model("qwen3-30b-a3b"), Sharding(ep=8, micro_batch=2, seq_len=4096, precision="fp8",
                                                                fp8_attention=True), moe=True)
    assert {op.precision for op in graph.ops if op.kind == "attention"} == {"fp8"}
    assert {op.precision for op in backward_of(graph).ops if op.kind == "attention"} == {"fp8"}
    for chip in ("h100-sxm", "gb200"):
        job = _job(plan, chip=chip)
        base, fast = simulate(job), simulate(_job(plan + ",fp8_attention=true", chip=chip))
        assert fast.step_time_s < base.step_time_s
        assert "fp8_attention=true" in fast.plan and parse_plan(fast.plan).fp8_attention


def test_fp8_attention_gains_at_most_the_peak_ratio_times_the_efficiency_share():
    from windtunnel.cost.compute import attention_time
    from windtunnel.graph.ops import Op

    chip = load_chip("h100-sxm")
    eff = efficiency_for(chip, {})
    op = Op("core_attention", "attention", flops=4e12, shape=(64, 4096, 4096, 128), kernel="flash")
    sixteen, eight = attention_time(op, chip, eff), attention_time(replace(op, precision="fp8"), chip, eff)
    ratio = chip.peak("fp8") / chip.peak("bf16") * eff.attention_fp8_ratio
    assert eight < sixteen and sixteen / eight <= ratio + 1e-9


def test_fp8_attention_needs_fp8(cli):
    with pytest.raises(WindtunnelError) as err:
        simulate(_job("tp=1,pp=1,ep=8,fp8_attention=true"))
    assert err.value.field == "fp8_attention" and "precision=fp8" in str(err.value)
    assert_one_clear_error(cli("train", "simulate", "--model", "qwen3-30b-a3b", "--hardware", "gb200", "--devices", "8",
                               "--global-batch", "64", "--seq-len", "4096", "--plan", "tp=1,pp=1,ep=8,fp8_attention=true"),
                           "fp8_attention", "precision=fp8")


def test_search_runs_every_plan_on_the_fixed_kernel_paths(cli):
    import json

    from windtunnel.api import search_training
    from windtunnel.train.search import screen_plan
    from windtunnel.train.space import SearchSpace

    found = search_training("qwen3-30b-a3b", "gb200", 8, seq_len=4096, global_batch=64, precision="fp8",
                            fp8_recipe="mx", fixed="expert_gemm=fused_mlp,fp8_attention=true", top=3, refine=4,
                            pins={"tp": [1], "pp": [1], "ep": [8], "cp": [1]})
    assert found.fixed == "expert_gemm=fused_mlp,fp8_attention=true"
    assert found.plans and all("expert_gemm=fused_mlp" in p["plan"] and "fp8_attention=true" in p["plan"]
                               for p in found.plans)
    plain = search_training("qwen3-30b-a3b", "gb200", 8, seq_len=4096, global_batch=64, precision="fp8",
                            fp8_recipe="mx", top=3, refine=4, pins={"tp": [1], "pp": [1], "ep": [8], "cp": [1]})
    assert plain.fixed is None and found.best["tokens_per_s"] > plain.best["tokens_per_s"]
    # The screen of one plan keeps the plan's own kernel paths.
    space = SearchSpace(load_model("qwen3-30b-a3b"), load_hardware("gb200", 8), 4096, 64, precision="fp8",
                        fp8_recipe="mx")
    plan = parse_plan(found.best["plan"])
    assert screen_plan(space, plan) < screen_plan(space, plan.model_copy(
        update={"expert_gemm": "grouped", "fp8_attention": False}))
    # Searches with and without fixed paths never share a resume file.
    fixed = SearchSpace(load_model("qwen3-30b-a3b"), load_hardware("gb200", 8), 4096, 64, precision="fp8",
                        fp8_recipe="mx", fixed="fp8_attention=true")
    assert fixed.fingerprint() != space.fingerprint()
    # The CLI takes it and reports it under the JSON key 'fixed'.
    proc = cli("train", "search", "--model", "qwen3-30b-a3b", "--hardware", "gb200", "--devices", "8",
               "--global-batch", "64", "--seq-len", "4096", "--precision", "fp8", "--fp8-recipe", "mx",
               "--fixed", "fp8_attention=true", "--pin", "tp=1", "--pin", "pp=1", "--pin", "ep=8", "--top", "2",
               "--refine", "2", "--workers", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["fixed"] == "fp8_attention=true"


@pytest.mark.parametrize(("fixed", "words"), [("tp=2", ("fixed", "tp", "expert_gemm")),
                                               ("expert_gemm=fused_mlp", ("expert_gemm", "fp8_recipe=mx")),
                                               ("fp8_attention=maybe", ("fp8_attention", "maybe"))])
def test_search_fixed_errors_are_one_clear_paragraph(cli, fixed, words):
    proc = cli("train", "search", "--model", "qwen3-30b-a3b", "--hardware", "gb200", "--devices", "8",
               "--global-batch", "64", "--seq-len", "4096", "--fixed", fixed)
    assert_one_clear_error(proc, *words)

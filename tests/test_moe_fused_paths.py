"""MoE kernels that fuse memory passes away: HybridEP's permutation inside its dispatch and combine
(dispatcher=hybridep) and the fused MXFP8 grouped MLP (expert_gemm=fused_mlp)."""

from __future__ import annotations

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


def test_hybridep_drops_the_reordering_its_fused_kernels_do():
    separate = _moe_ops(dedup_dispatch=True)
    fused = _moe_ops(dedup_dispatch=True, permute_in_dispatch=True)
    assert all(separate[name].bytes_moved > 0 for name in PERMUTATION)
    # The arrival-side regrouping by expert and its undoing run inside HybridEP's dispatch and combine kernels.
    assert not {"sort_by_expert", "unsort_by_expert"} & set(fused)
    # The preprocessing (routing map, token counts) and its host wait stay.
    assert fused["permute"].host_sync and fused["permute"].host_ops == 15.0
    # The collectives are the same deduplicated dispatch and combine.
    for name in ("dispatch", "combine"):
        assert (fused[name].bytes_moved, fused[name].fanout) == (separate[name].bytes_moved, separate[name].fanout)
    # Without expert parallelism nothing is dispatched, so nothing changes.
    alone = layer_forward(load_model("qwen3-30b-a3b"), Sharding(ep=1, micro_batch=2, seq_len=4096,
                                                                permute_in_dispatch=True), moe=True)
    assert {op.name for op in alone.ops} == {op.name for op in layer_forward(
        load_model("qwen3-30b-a3b"), Sharding(ep=1, micro_batch=2, seq_len=4096), moe=True).ops}


def test_hybridep_is_faster_than_deepep_by_the_passes_it_fuses():
    deepep, hybridep = simulate(_job(MX + ",dispatcher=deepep")), simulate(_job(MX + ",dispatcher=hybridep"))
    assert hybridep.step_time_s < deepep.step_time_s
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

"""GPT-OSS's expert path as Megatron-Core runs it: a clamped GLU and per-expert biases outside the
fused kernels (extra memory passes, a host sync, extra saved activations)."""

from __future__ import annotations

import pytest

from windtunnel import load_model, simulate_training
from windtunnel.graph.ops import backward_of
from windtunnel.graph.transformer import ACT_BYTES, Sharding, layer_forward
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.model import ModelSpec
from windtunnel.train.layers import recompute_graph, saved_activation_bytes


def _plain(model: ModelSpec) -> ModelSpec:
    """The same model without the clamp and the expert biases."""
    moe = model.moe.model_copy(update={"expert_bias": False, "activation_clamp": None})
    return model.model_copy(update={"moe": moe})


def _layer(model: ModelSpec):
    return layer_forward(model, Sharding(ep=8, seq_len=4096, micro_batch=1), moe=True)


def _ops(graph):
    return {op.name: op for op in graph.ops}


def test_catalog_gpt_oss_has_clamped_glu_and_expert_biases():
    moe = load_model("gpt-oss-120b").moe
    assert moe.expert_bias and moe.activation_clamp == 7.0
    assert load_model("qwen3-30b-a3b").moe.activation_clamp is None


def test_expert_biases_count_as_parameters():
    oss = load_model("gpt-oss-120b")
    plain = _plain(oss)
    up_width = 2 * oss.moe.ffn_hidden
    assert oss.expert_params() - plain.expert_params() == up_width + oss.hidden
    # Still the published size: the biases are ~0.03% of it.
    assert oss.total_params() / 1e9 == pytest.approx(oss.published_params_b["total"], rel=0.02)


def test_clamp_and_bias_add_memory_passes_a_sync_and_saved_bytes():
    oss = load_model("gpt-oss-120b")
    clamped, plain = _ops(_layer(oss)), _ops(_layer(_plain(oss)))
    assert "experts.act_clamp" not in plain and "experts.bias" not in plain
    assert not plain["experts.act"].host_sync
    clamp, bias, act = clamped["experts.act_clamp"], clamped["experts.bias"], clamped["experts.act"]
    up = clamped["experts.up_proj"]
    up_elements = up.shape[0] * up.shape[1] * up.count
    out_elements = up.shape[0] * oss.hidden * up.count
    # Two clamps (each half read and written) and a concatenation (the whole read and written).
    assert clamp.bytes_moved == pytest.approx(4 * ACT_BYTES * up_elements)
    # The unclipped projection output stays alive for the clamps' backward.
    assert clamp.saved_bytes == pytest.approx(ACT_BYTES * up_elements)
    assert act.host_sync  # the blocking copy of the offset constant
    # fp32 per-expert bias add, concatenation and cast back: 28 bytes per output element.
    assert bias.bytes_moved == pytest.approx(28 * out_elements)
    # Host work of the Python loop grows with the local experts.
    assert bias.host_ops == 2 * up.count + 5
    graph = _layer(oss)
    backward = _ops(backward_of(graph))
    assert backward["experts.act_clamp.bwd"].bytes_moved == pytest.approx(5 * ACT_BYTES * up_elements)
    assert backward["experts.bias.bwd"].bytes_moved == pytest.approx(40 * out_elements)
    assert not any(op.host_sync for op in backward_of(graph).ops)  # the backward knows every size
    assert saved_activation_bytes(graph, "none") - saved_activation_bytes(_layer(_plain(oss)), "none") == \
        pytest.approx(ACT_BYTES * up_elements)


def test_moe_act_recompute_reruns_the_clamps_and_keeps_their_input():
    graph = _layer(load_model("gpt-oss-120b"))
    rerun = [op.name for op in recompute_graph(graph, "selective[moe_act]").ops]
    assert rerun == ["experts.act_clamp", "experts.act"]
    ops = _ops(graph)
    freed = saved_activation_bytes(graph, "none") - saved_activation_bytes(graph, "selective[moe_act]")
    # The checkpoint keeps the projection output (the clamps' input) and drops the concatenated
    # input of the fused kernel and the down projection's input.
    assert freed == pytest.approx(ops["experts.act"].saved_bytes + ops["experts.down_proj"].saved_bytes)


def test_unfused_expert_path_makes_the_step_slower():
    kwargs = dict(seq_len=4096, global_batch=64, plan="tp=1,pp=1,ep=8,mbs=1,recompute=none", moe_imbalance=1.0)
    oss = load_model("gpt-oss-120b")
    slow = simulate_training(oss, "gb200", 8, **kwargs)
    fast = simulate_training(_plain(oss), "gb200", 8, **kwargs)
    assert slow.step_time_s > fast.step_time_s
    assert slow.breakdown["host_overhead"] >= fast.breakdown["host_overhead"]
    assert slow.peak_memory_bytes > fast.peak_memory_bytes


def test_bad_clamp_is_rejected():
    data = load_model("gpt-oss-120b").model_dump()
    data["moe"]["activation_clamp"] = 0.0
    with pytest.raises((WindtunnelError, ValueError)):
        ModelSpec.model_validate(data)


def test_eager_broadcast_and_strided_traffic_runs_unvectorized():
    """The clamps (strided halves) and the bias loop (broadcast, mixed dtypes) move about half their
    traffic in unvectorized eager kernels, which run at the catalog's fraction of the bandwidth."""
    from dataclasses import replace

    from windtunnel.cost.compute import memory_op_time
    from windtunnel.cost.efficiency import efficiency_for
    from windtunnel.specs.hardware import load_chip

    ops = _ops(_layer(load_model("gpt-oss-120b")))
    assert ops["experts.act_clamp"].unvectorized == pytest.approx(0.5)
    assert ops["experts.bias"].unvectorized == pytest.approx(0.5)
    assert ops["experts.act"].unvectorized == 0.0  # the fused (compiled) activation is vectorized
    backward = _ops(backward_of(_layer(load_model("gpt-oss-120b"))))
    assert backward["experts.bias.bwd"].unvectorized == pytest.approx(0.5)

    chip = load_chip("gb200")
    eff = efficiency_for(chip)
    op = ops["experts.bias"]
    contiguous = memory_op_time(replace(op, unvectorized=0.0), chip, eff) - eff.kernel_overhead_s
    mixed = memory_op_time(op, chip, eff) - eff.kernel_overhead_s
    assert mixed / contiguous == pytest.approx(0.5 + 0.5 / eff.unvectorized_bandwidth)
    assert 0.0 < eff.unvectorized_bandwidth < 1.0

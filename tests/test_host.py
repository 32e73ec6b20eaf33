"""The host (CPU) issue stream: kernels wait for their launch, and MoE token counts make the host wait."""

from __future__ import annotations

import dataclasses

import pytest

from windtunnel import load_hardware, load_model
from windtunnel.cost.efficiency import efficiency_for
from windtunnel.engine.attribution import attribute
from windtunnel.engine.core import Engine
from windtunnel.graph.ops import Op, OpGraph, backward_of
from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.specs.plan import parse_plan
from windtunnel.train.layers import LayerCoster
from windtunnel.train.placement import place_plan
from windtunnel.train.step import TrainingJob, simulate

HOST_OP_S = 20e-6


def _coster(host_op_s: float) -> LayerCoster:
    cluster = load_hardware("h100-sxm", 8)
    eff = dataclasses.replace(efficiency_for(cluster.chip), host_op_s=host_op_s, host_library_call_s=0.0)
    return LayerCoster(cluster, place_plan(parse_plan("tp=1,pp=1"), cluster), eff, "bf16", tp_overlap=False)


def _three_ops(sync: bool) -> OpGraph:
    """A long kernel; a short one after it that reads a device value (if ``sync``); then one whose
    issue takes 50 host ops (1 ms at 20 us)."""
    graph = OpGraph()
    first = graph.add(Op("long", "memory", bytes_moved=4e9))
    second = graph.add(Op("count", "memory", bytes_moved=1e6, deps=(first,), host_sync=sync))
    graph.add(Op("after", "memory", bytes_moved=1e6, deps=(second,), host_ops=50.0))
    return graph


def test_host_runs_ahead_unless_it_must_read_a_device_value():
    coster = _coster(HOST_OP_S)
    long_time, short_time, _ = (coster.op_time(op) for op in _three_ops(False).ops)
    issue = 50 * HOST_OP_S
    ahead = coster.play([_three_ops(False)])
    synced = coster.play([_three_ops(True)])
    # Ahead: every issue hides under the long kernel.
    assert ahead.time == pytest.approx(HOST_OP_S + long_time + 2 * short_time)
    assert ahead.parts["host_overhead"] == pytest.approx(HOST_OP_S)
    # Synced: the host waits for the long kernel before issuing the last one, so the device idles
    # for that issue less the short kernel it still had queued.
    assert synced.time == pytest.approx(HOST_OP_S + long_time + issue + short_time)
    assert synced.parts["host_overhead"] == pytest.approx(HOST_OP_S + issue - short_time)
    assert sum(synced.parts.values()) == pytest.approx(synced.time)


def test_no_host_cost_means_no_host_tasks():
    played = _coster(0.0).play([_three_ops(True)])
    assert "host_overhead" not in played.parts


def test_waiting_for_a_transfer_is_communication_not_host():
    engine = Engine()
    engine.task("issue", "host", 3.0, category="host_overhead")
    engine.task("a2a", "ep", 2.0, category="ep_comm")
    engine.task("gemm", "compute", 1.0, (0, 1), category="compute")
    parts = attribute(engine.run(), primary="compute", others=("ep",), background=("host",))
    # The device idles 3 s: 2 s while the all-to-all runs, 1 s waiting only for the host.
    assert parts == pytest.approx({"ep_comm": 2.0, "host_overhead": 1.0, "compute": 1.0})


def test_backward_never_waits_for_the_device():
    model = load_model("qwen3-30b-a3b")
    forward = layer_forward(model, Sharding(ep=8, micro_batch=1, seq_len=4096), moe=True)
    assert any(op.host_sync for op in forward.ops)
    assert not any(op.host_sync for op in backward_of(forward).ops)


def test_grouped_gemm_issues_one_library_call_per_local_expert():
    model = load_model("qwen3-30b-a3b")
    forward = layer_forward(model, Sharding(ep=8, micro_batch=1, seq_len=4096), moe=True)
    up = next(op for op in forward.ops if op.name == "experts.up_proj")
    assert up.library_calls == model.moe.experts // 8
    assert next(op for op in forward.ops if op.name == "qkv_proj").library_calls == 0


def _moe_step(host_op_s: float | None, mbs: int = 1):
    cluster = load_hardware("b200", 8)
    override = None if host_op_s is None else {"chips": {"b200": {"host": {"op_s": host_op_s}}}}
    job = TrainingJob(model=load_model("qwen3-30b-a3b"), cluster=cluster,
                      plan=parse_plan(f"tp=1,pp=1,ep=8,mbs={mbs},recompute=none,zero=1,precision=fp8"),
                      seq_len=4096, global_batch=64, moe_imbalance=1.0, fitted_override=override)
    return simulate(job)


def test_more_host_cost_never_speeds_up_a_step():
    times = [_moe_step(cost).step_time_s for cost in (1e-6, 13.5e-6, 40e-6, 100e-6)]
    assert times == sorted(times)
    assert times[-1] > times[0]


def test_small_micro_batches_of_many_small_experts_are_host_bound():
    small, large = _moe_step(None, mbs=1), _moe_step(None, mbs=4)
    share = {name: r.breakdown.get("host_overhead", 0.0) / r.step_time_s for name, r in (("small", small), ("large", large))}
    # 16 local experts x 256 tokens each: per-expert library calls outrun the tiny GEMMs.
    assert share["small"] > 0.2
    # Four times the tokens per launch: the host falls behind less often.
    assert share["large"] < share["small"] / 2


def _graphed_step(mode: str):
    cluster = load_hardware("b200", 8)
    job = TrainingJob(model=load_model("qwen3-30b-a3b"), cluster=cluster,
                      plan=parse_plan(f"tp=1,pp=1,ep=8,mbs=1,recompute=none,zero=1,precision=fp8,cuda_graphs={mode}"),
                      seq_len=4096, global_batch=64, moe_imbalance=1.0)
    return simulate(job)


def test_cuda_graphs_cut_host_time_in_order():
    none, modules, full = (_graphed_step(mode) for mode in ("none", "modules", "full"))
    assert none.step_time_s > modules.step_time_s > full.step_time_s
    assert none.breakdown["host_overhead"] > modules.breakdown["host_overhead"]
    assert "host_overhead" not in full.breakdown
    assert any("CUDA-graphed attention" in line for line in modules.assumptions)


def test_module_capture_costs_one_launch_per_region_and_keeps_expert_calls():
    model = load_model("qwen3-30b-a3b")
    eager = layer_forward(model, Sharding(ep=8, seq_len=4096), moe=True)
    graphed = layer_forward(model, Sharding(ep=8, seq_len=4096, cuda_graphs="modules"), moe=True)
    host = {op.name: op.host_ops for op in graphed.ops}
    assert host["attn_norm"] == 1.0 and host["qkv_proj"] == 0.0 and host["core_attention"] == 0.0
    assert host["router"] == 1.0 and host["permute"] == 0.0
    # Token dispatch and the expert GEMMs stay eager (they cannot be captured with dropless routing).
    up = next(op for op in graphed.ops if op.name == "experts.up_proj")
    assert up.library_calls == model.moe.experts // 8
    assert next(op for op in graphed.ops if op.name == "permute").host_sync
    assert sum(op.host_ops for op in graphed.ops) < sum(op.host_ops for op in eager.ops)


@pytest.mark.parametrize("text", ["cuda_graphs=modules", "graphs=full", "cuda-graphs=NONE"])
def test_cuda_graphs_plan_field_parses_and_round_trips(text):
    plan = parse_plan("tp=1,pp=1," + text)
    assert plan.cuda_graphs == text.split("=")[1].lower()
    assert parse_plan(plan.to_string()).to_string() == plan.to_string()


def test_unknown_cuda_graphs_mode_is_a_clear_error(cli):
    from conftest import assert_one_clear_error

    proc = cli("train", "simulate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8",
               "--global-batch", "8", "--plan", "tp=1,pp=1,cuda_graphs=partial")
    assert_one_clear_error(proc, "cuda_graphs", "partial")


def test_routing_bookkeeping_has_no_backward_host_cost():
    model = load_model("qwen3-30b-a3b")
    forward = layer_forward(model, Sharding(ep=8, seq_len=4096), moe=True)
    backward = {op.name: op for op in backward_of(forward).ops}
    permute = next(op for op in forward.ops if op.name == "permute")
    # Counting tokens per expert and copying the counts to the host happen once, in the forward.
    assert backward["permute.bwd"].host_ops < permute.host_ops
    router = next(op for op in forward.ops if op.name == "router")
    assert backward["router.dgrad"].host_ops + backward["router.wgrad"].host_ops == router.backward_host_ops
    # Operators without a stated backward cost keep the forward's.
    assert backward["qkv_proj.dgrad"].host_ops == next(op for op in forward.ops if op.name == "qkv_proj").host_ops


def _host(model_name: str, mode: str, *, moe: bool) -> dict[str, float]:
    graph = layer_forward(load_model(model_name), Sharding(ep=8 if moe else 1, seq_len=4096, cuda_graphs=mode), moe=moe)
    return {op.name: op.host_ops for op in graph.ops}


def test_each_cuda_graph_scope_captures_its_own_region():
    eager = _host("qwen3-30b-a3b", "none", moe=True)
    router_only = _host("qwen3-30b-a3b", "moe_router", moe=True)
    routing = _host("qwen3-30b-a3b", "moe_router+moe_preprocess", moe=True)
    attn = _host("qwen3-30b-a3b", "attn", moe=True)
    # The router alone is one launch; the preprocessing after it stays eager.
    assert router_only["router"] == 1.0 and router_only["permute"] == eager["permute"] > 1.0
    # Router and preprocessing together are one graph, and attention stays eager.
    assert routing["router"] == 1.0 and routing["permute"] == 0.0
    assert routing["qkv_proj"] == eager["qkv_proj"] > 0.0
    # Attention alone: its region is one launch, the routing path stays eager.
    assert attn["attn_norm"] == 1.0 and attn["qkv_proj"] == 0.0 and attn["router"] == eager["router"]
    # All four scopes are what 'modules' captures.
    assert _host("qwen3-30b-a3b", "attn+moe_router+moe_preprocess", moe=True) == _host("qwen3-30b-a3b", "modules", moe=True)
    dense_mlp = _host("llama3-8b", "mlp", moe=False)
    assert dense_mlp["qkv_proj"] == _host("llama3-8b", "none", moe=False)["qkv_proj"] > 0.0
    assert _host("llama3-8b", "attn+mlp", moe=False) == _host("llama3-8b", "modules", moe=False)


def test_captured_routing_still_waits_for_the_token_counts():
    graph = layer_forward(load_model("qwen3-30b-a3b"), Sharding(ep=8, seq_len=4096, cuda_graphs="moe_router+moe_preprocess"),
                          moe=True)
    assert next(op for op in graph.ops if op.name == "permute").host_sync


def test_scoped_graphs_cut_host_time_between_none_and_modules():
    none, routing, modules = (_graphed_step(mode) for mode in ("none", "moe_router+moe_preprocess", "modules"))
    assert none.breakdown["host_overhead"] > routing.breakdown["host_overhead"] > modules.breakdown["host_overhead"]
    assert any("CUDA-graphed scopes moe_router, moe_preprocess" in line for line in routing.assumptions)


@pytest.mark.parametrize(("text", "canonical"), [("moe_preprocess+moe_router+attn", "attn+moe_router+moe_preprocess"),
                                                 ("MLP+attn", "attn+mlp"), ("modules", "modules"),
                                                 ("moe_preprocess+mlp+moe_router+attn", "modules")])
def test_cuda_graph_scopes_parse_in_canonical_order(text, canonical):
    plan = parse_plan("tp=1,pp=1,cuda_graphs=" + text)
    assert plan.cuda_graphs == canonical
    assert parse_plan(plan.to_string()).cuda_graphs == canonical


@pytest.mark.parametrize(("value", "words"), [("moe_preprocess", "needs moe_router"),
                                              ("attn+router", "moe_router, moe_preprocess")])
def test_bad_cuda_graph_scopes_are_one_clear_error(cli, value, words):
    from conftest import assert_one_clear_error

    proc = cli("train", "simulate", "--model", "qwen3-30b-a3b", "--hardware", "b200", "--devices", "8",
               "--global-batch", "8", "--plan", f"tp=1,pp=1,ep=8,cuda_graphs={value}")
    assert_one_clear_error(proc, "cuda_graphs", value)
    assert words in proc.stderr + proc.stdout

"""Framework operators around the kernels (graph.stack_ops): Megatron-Core's sequential expert loop and
PyTorch context_parallel's fp32 merges and gradient rotation, as stack data."""

from __future__ import annotations

import pytest

from windtunnel.api import simulate_training
from windtunnel.graph.ops import backward_of
from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.specs.model import load_model
from windtunnel.specs.plan import parse_plan
from windtunnel.specs.stack import load_stack

SEQ = 32768


def _op(graph, name):
    return next(op for op in graph.ops if op.name == name)


def test_sequential_experts_add_the_loop_traffic_per_expert():
    model = load_model("mixtral-8x7b")
    costs = (3.0, 6.0, 5.0)
    grouped = layer_forward(model, Sharding(ep=2, seq_len=4096), moe=True)
    looped = layer_forward(model, Sharding(ep=2, seq_len=4096, sequential_costs=costs), moe=True)
    assert all(op.name != "expert_loop" for op in grouped.ops)
    loop = _op(looped, "expert_loop")
    local = model.moe.experts // 2
    elements = loop.bytes_moved / (2 * costs[0])  # rows x hidden
    assert loop.backward_bytes == pytest.approx(costs[1] * local * 2 * elements)
    assert loop.host_ops == costs[2] * local and loop.saved_bytes == 0.0
    # the loop sits between the experts and what follows them
    assert _op(looped, "experts.down_proj").name in [looped.ops[d].name for d in loop.deps]
    assert _op(backward_of(looped), "expert_loop.bwd").bytes_moved == pytest.approx(loop.backward_bytes)


def test_expert_gemm_plan_field_defaults_to_the_stack_and_slows_a_looped_moe():
    assert parse_plan("ep=2,expert_gemm=Sequential").expert_gemm == "sequential"
    assert load_stack("mindspeed").kernels.expert_gemm == "grouped"
    kwargs = dict(model="mixtral-8x7b", hardware="ascend-910b", devices=16, seq_len=4096, global_batch=32,
                  framework="mindspeed")
    grouped = simulate_training(plan="tp=8,ep=2,etp=8,mbs=1,sp=true", **kwargs)
    looped = simulate_training(plan="tp=8,ep=2,etp=8,mbs=1,sp=true,expert_gemm=sequential", **kwargs)
    assert "expert_gemm=sequential" in looped.plan and "expert_gemm" not in grouped.plan
    assert looped.step_time_s > grouped.step_time_s


def test_pytorch_cp_merges_in_fp32_and_rotates_fp32_gradients():
    model = load_model("llama3-8b")
    stack = load_stack("torchtitan").comm
    cp = 4
    shard = dict(cp=cp, seq_len=SEQ, context_parallel="allgather")
    fused = layer_forward(model, Sharding(**shard), moe=False)
    merged = layer_forward(model, Sharding(**shard, cp_merge=(stack.cp_merge_bytes, stack.cp_merge_backward_bytes),
                                           cp_grad_bytes=stack.cp_grad_bytes, cp_regather=stack.cp_backward_regather),
                           moe=False)
    assert all(op.name != "cp_merge" for op in fused.ops)
    merge = _op(merged, "cp_merge")
    out_elements = SEQ // cp * model.heads * model.head_dim
    assert merge.bytes_moved == pytest.approx(stack.cp_merge_bytes * (cp - 1) * out_elements)
    assert merge.backward_bytes == pytest.approx(stack.cp_merge_backward_bytes * cp * out_elements)
    # the backward gathers K/V again and rotates the fp32 dK/dV accumulators, one permute per step
    # (tests/test_context_parallel.py times them)
    gather = _op(merged, "cp_kv_allgather")
    backward = backward_of(merged)
    assert _op(backward, "cp_kv_allgather.bwd").bytes_moved == pytest.approx(gather.bytes_moved)
    rotated = sum(op.bytes_moved for op in backward.ops if op.name.startswith("cp_dkv_"))
    assert rotated == pytest.approx(cp * stack.cp_grad_bytes / 2 * gather.bytes_moved / cp)
    # an all-gather CP without them (Llama 3's) reduce-scatters 16-bit gradients instead
    assert _op(backward_of(fused), "cp_kv_allgather.bwd").bytes_moved == pytest.approx(gather.bytes_moved)
    assert not any(op.name.startswith("cp_dkv_") for op in fused.ops)
    # no merge without context parallelism
    single = layer_forward(model, Sharding(seq_len=SEQ, cp_merge=(50.0, 66.0)), moe=False)
    assert all(op.name != "cp_merge" for op in single.ops)


def test_torchtitan_cp_costs_more_than_a_fused_merge():
    kwargs = dict(model="llama3-8b", hardware="h100-sxm", devices=16, seq_len=SEQ, global_batch=4,
                  plan="tp=2,cp=8,mbs=1,sp=true,cp_algo=allgather")
    titan = load_stack("torchtitan")
    fused = titan.model_copy(update={"id": "titan-fused", "comm": titan.comm.model_copy(update={
        "cp_merge_bytes": 0.0, "cp_merge_backward_bytes": 0.0, "cp_grad_bytes": 2.0, "cp_backward_regather": False})})
    assert simulate_training(framework="torchtitan", **kwargs).step_time_s > \
        simulate_training(framework=fused, **kwargs).step_time_s


def test_allgather_index_ops_replace_the_fused_permutation():
    model = load_model("mixtral-8x7b")
    passes = load_stack("mindspeed").comm.allgather_index_passes
    assert passes is not None and load_stack("megatron").comm.allgather_index_passes is None
    shard = dict(tp=4, sp=True, ep=2, etp=4, seq_len=4096, gather_dispatch=True)
    fused = layer_forward(model, Sharding(**shard), moe=True)
    indexed = layer_forward(model, Sharding(**shard, gather_index_passes=passes), moe=True)
    names = {op.name for op in indexed.ops}
    assert "allgather_index_ops" in names and not names & {"sort_by_expert", "unsort_by_expert", "unpermute"}
    assert {"sort_by_expert", "unpermute"} <= {op.name for op in fused.ops}
    op = _op(indexed, "allgather_index_ops")
    tokens = 4096 // 4  # SP tokens of this rank
    gathered_rows = tokens * 2 * 4  # the TP x EP group's tokens
    assert op.backward_bytes > 0 and op.bytes_moved > passes[1] * gathered_rows * model.hidden * 2
    # the allgather dispatcher gathers the group's unrouted tokens over expert TP, not the routed copies
    assert _op(indexed, "expert_tp_gather").bytes_moved == 2 * gathered_rows * model.hidden
    assert _op(indexed, "expert_tp_scatter").bytes_moved == 2 * gathered_rows * model.hidden


def test_moe_recompute_module_reruns_the_moe_layer_and_keeps_its_input():
    from windtunnel.train.layers import module_ops, recompute_graph, saved_activation_bytes

    model = load_model("mixtral-8x7b")
    graph = layer_forward(model, Sharding(tp=2, sp=True, ep=2, seq_len=4096), moe=True)
    names = [op.name for op in graph.ops]
    moe = module_ops(graph, "moe")
    assert moe == set(range(names.index("moe_norm") + 1, names.index("moe_residual")))
    rerun = {op.name for op in recompute_graph(graph, "selective[moe]").ops}
    assert {"router", "experts.up_proj", "experts.down_proj"} <= rerun and "core_attention" not in rerun
    assert saved_activation_bytes(graph, "selective[moe]") < saved_activation_bytes(graph, "none")
    assert parse_plan("ep=2,recompute=selective,recompute_modules=moe").recompute_modules == "moe"
    dense = layer_forward(model, Sharding(seq_len=4096), moe=False)
    assert module_ops(dense, "moe") == set()


def test_stacks_without_a_fused_cp_merge_say_so():
    # MindSpeed's ring merge runs eagerly unless --use-fused-ring-attention-update; Megatron/TE fuses it.
    assert load_stack("mindspeed").comm.cp_merge_bytes > 0 and load_stack("mindspeed").comm.cp_backward_regather
    assert load_stack("torchtitan").comm.cp_grad_bytes == 4.0
    assert load_stack("megatron").comm.cp_merge_bytes == 0.0 and load_stack("megatron").comm.cp_grad_bytes == 2.0


def test_mla_values_padded_to_the_query_head_dim_cost_attention_and_a_copy():
    model = load_model("deepseek-v3")
    plain = layer_forward(model, Sharding(seq_len=4096), moe=False)
    padded = layer_forward(model, Sharding(seq_len=4096, mla_pad_v=True), moe=False)
    a = model.mla
    qk, v = a.qk_nope_head_dim + a.qk_rope_head_dim, a.v_head_dim
    attention = {g: _op(graph, "core_attention").flops for g, graph in (("plain", plain), ("padded", padded))}
    assert attention["padded"] / attention["plain"] == pytest.approx((qk + qk) / (qk + v))
    assert _op(padded, "mla_v_pad").kind == "memory" and all(op.name != "mla_v_pad" for op in plain.ops)
    # the out projection still takes the real value width
    assert _op(padded, "out_proj").shape == _op(plain, "out_proj").shape
    assert load_stack("mindspeed").kernels.mla_pad_v and not load_stack("megatron").kernels.mla_pad_v


def test_expert_all_to_all_carries_the_busiest_ranks_tokens():
    # The dispatch all-to-all ends when the busiest EP rank has received its tokens, the combine when it
    # has sent them back: both grow with the imbalance, as the expert GEMMs do.
    from windtunnel.cost.collectives import collective_time
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.train.placement import place_plan

    model = load_model("mixtral-8x7b")
    graphs = {imb: layer_forward(model, Sharding(ep=4, seq_len=4096, moe_imbalance=imb), moe=True) for imb in (1.0, 1.5)}
    for name in ("dispatch", "combine"):
        balanced, skewed = (_op(graphs[imb], name).bytes_moved for imb in (1.0, 1.5))
        assert skewed == pytest.approx(1.5 * balanced)
    assert _op(graphs[1.0], "dispatch").bytes_moved == 2 * 4096 * model.moe.topk * model.hidden
    cluster = load_hardware("ascend-910b", 8)
    group = place_plan(parse_plan("ep=4,dp=2"), cluster).group("ep")
    from windtunnel.cost.efficiency import efficiency_for

    eff = efficiency_for(cluster.chip)
    times = [collective_time("all_to_all", _op(graphs[imb], "dispatch").bytes_moved, group, cluster, eff)
             for imb in (1.0, 1.5)]
    assert times[1] > 1.4 * times[0]


def test_shared_experts_after_the_combine_hide_no_dispatch():
    # MindSpeed-LLM runs the shared experts after the unpermutation; Megatron's overlapped shared expert
    # (the default stack data) runs them beside the dispatch.
    assert load_stack("mindspeed").comm.shared_expert_overlap is False
    assert load_stack("megatron").comm.shared_expert_overlap is True
    model = load_model("deepseek-v3")
    shard = dict(ep=8, seq_len=4096, gather_dispatch=True)
    beside = layer_forward(model, Sharding(**shard), moe=True)
    after = layer_forward(model, Sharding(**shard, shared_overlap=False), moe=True)
    names = [op.name for op in after.ops]
    up = _op(after, "shared_experts.up_proj")
    # they wait for the routed output (the unpermutation after the combine); beside it they wait for the norm only
    assert up.deps == (names.index("unpermute"),) and names.index("combine") < names.index("unpermute")
    assert _op(beside, "shared_experts.up_proj").deps == (names.index("moe_norm"),)
    kwargs = dict(model="deepseek-v3", hardware="ascend-910b", plan="tp=1,pp=8,ep=8,dispatcher=allgather",
                  seq_len=4096, global_batch=64, devices=256)
    serial = load_stack("mindspeed")
    overlapped = serial.model_copy(update={"id": "mindspeed-overlap",
                                           "comm": serial.comm.model_copy(update={"shared_expert_overlap": True})})
    assert simulate_training(framework=serial, **kwargs).step_time_s > \
        simulate_training(framework=overlapped, **kwargs).step_time_s


def test_unfused_gradient_accumulation_adds_each_weights_gradient_every_micro_batch():
    # --no-gradient-accumulation-fusion: Megatron's DDP hook adds every weight's 16-bit gradient to its fp32
    # main gradient each micro-batch (2 + 2 x 4 bytes per weight); MoE layers carry many weights per token.
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.train.step import TrainingJob, _StepBuilder

    assert load_stack("mindspeed").kernels.grad_accum_fusion == "none"
    assert load_stack("megatron").kernels.grad_accum_fusion == "all"
    assert parse_plan("gradient_accumulation_fusion=Experts").grad_accum_fusion == "experts"
    model, cluster = load_model("mixtral-8x7b"), load_hardware("ascend-910b", 16)

    def builder(fusion):
        plan = parse_plan(f"tp=2,pp=2,ep=4,grad_accum_fusion={fusion}")
        return _StepBuilder(TrainingJob(model=model, cluster=cluster, plan=plan, seq_len=4096, global_batch=32,
                                        framework="mindspeed"))

    adds = {}
    for fusion in ("all", "experts", "none"):
        b = builder(fusion)
        ops = [op for g in b.backward_graphs("moe", "none") for op in g.ops if op.name == "main_grad_add"]
        adds[fusion] = ops[0].bytes_moved if ops else 0.0
        dense, expert = b.layer_params("moe")
    assert adds["all"] == 0.0
    assert adds["experts"] == pytest.approx(10.0 * dense)
    assert adds["none"] == pytest.approx(10.0 * (dense + expert)) and expert > 5 * dense
    kwargs = dict(model="mixtral-8x7b", hardware="ascend-910b", devices=16, seq_len=4096, global_batch=32,
                  framework="mindspeed")
    assert simulate_training(plan="tp=2,pp=2,ep=4,grad_accum_fusion=none", **kwargs).step_time_s > \
        simulate_training(plan="tp=2,pp=2,ep=4,grad_accum_fusion=all", **kwargs).step_time_s


def test_expert_imbalance_needs_expert_parallel_ranks_to_wait_for():
    """With ep=1 every rank runs every expert on all its tokens (TP-sharded), so no rank waits for a busier one:
    the load-imbalance factor changes nothing; with ep > 1 the busiest expert rank sets the step."""
    from windtunnel.api import simulate_training

    def step(plan: str, imbalance: float) -> float:
        return simulate_training("mixtral-8x7b", "h100-sxm", 16, seq_len=4096, global_batch=64, plan=plan,
                                 moe_imbalance=imbalance).step_time_s

    assert step("tp=8,ep=1", 1.0) == step("tp=8,ep=1", 1.5)
    assert step("tp=2,ep=8", 1.5) > step("tp=2,ep=8", 1.0)

"""Context-parallel algorithms (stack comm.context_parallel): ring P2P, all-gather KV, Ulysses all-to-all."""

from __future__ import annotations

import pytest

from windtunnel.api import simulate_training
from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.model import load_model
from windtunnel.specs.stack import load_stack

SEQ, CP = 32768, 4


def _graph(algo: str, cp: int = CP):
    model = load_model("llama3-8b")
    shard = Sharding(tp=1, cp=cp, micro_batch=1, seq_len=SEQ, context_parallel=algo)
    return model, layer_forward(model, shard, moe=False)


def _ops(graph, *kinds):
    return [op for op in graph.ops if op.kind in kinds]


def test_each_algorithm_moves_what_it_should():
    model, ring = _graph("ring")
    _, gather = _graph("allgather")
    _, ulysses = _graph("ulysses")
    kv_block = 2 * SEQ // CP * model.kv_heads * 2 * model.head_dim  # bytes: one rank's K and V
    assert [(op.name, op.bytes_moved) for op in _ops(ring, "send_recv")] == [("cp_kv_ring", kv_block * (CP - 1))]
    assert [(op.name, op.bytes_moved) for op in _ops(gather, "all_gather")] == [("cp_kv_allgather", kv_block * CP)]
    a2a = {op.name: op.bytes_moved for op in _ops(ulysses, "all_to_all")}
    q_shard = 2 * SEQ // CP * model.heads * model.head_dim
    assert a2a == {"cp_a2a_qkv": pytest.approx(q_shard + kv_block), "cp_a2a_out": pytest.approx(q_shard)}
    # The same attention work per rank whatever the algorithm: this rank's queries against every key.
    flops = [sum(op.flops for op in _ops(g, "attention")) for g in (ring, gather, ulysses)]
    assert flops[1] == pytest.approx(flops[0]) and flops[2] == pytest.approx(flops[0])


def test_ulysses_sends_shared_kv_heads_to_each_rank_that_needs_them():
    model = load_model("llama3-8b")  # 8 KV heads
    cp = 16
    graph = layer_forward(model, Sharding(cp=cp, seq_len=SEQ, context_parallel="ulysses"), moe=False)
    sent = {op.name: op.bytes_moved for op in _ops(graph, "all_to_all")}["cp_a2a_qkv"]
    q_shard = 2 * SEQ // cp * model.heads * model.head_dim
    kv_shard = 2 * SEQ // cp * model.kv_heads * 2 * model.head_dim
    assert sent == pytest.approx(q_shard + kv_shard * cp / model.kv_heads)


def test_ulysses_needs_cp_to_divide_the_heads():
    model = load_model("llama3-8b")  # 32 heads
    with pytest.raises(WindtunnelError) as info:
        layer_forward(model, Sharding(cp=3, seq_len=3 * 4096, context_parallel="ulysses"), moe=False)
    message = str(info.value)
    assert "'cp' is 3" in message and "divide 32" in message and "ring" in message


@pytest.mark.parametrize("algo", ["ring", "allgather", "ulysses"])
def test_a_stack_chooses_the_algorithm_and_the_step_reports_it(algo):
    base = load_stack("megatron")
    stack = base.model_copy(update={"id": f"cp-{algo}",
                                    "comm": base.comm.model_copy(update={"context_parallel": algo})})
    result = simulate_training(model="llama3-8b", hardware="h100-sxm", devices=16, seq_len=SEQ, global_batch=4,
                               plan="tp=2,cp=8,mbs=1,recompute=selective,sp=true", framework=stack)
    assert result.feasible and result.step_time_s > 0
    if algo == "ulysses":  # the all-to-alls sit on the critical path, the ring's transfers hide under attention
        assert result.breakdown.get("cp_comm", 0.0) > 0.0


def test_the_plan_field_overrides_the_stack_and_round_trips():
    from windtunnel.specs.plan import parse_plan

    kwargs = dict(model="llama3-8b", hardware="h100-sxm", devices=16, seq_len=SEQ, global_batch=4)
    ring = simulate_training(plan="tp=2,cp=8,mbs=1,sp=true", **kwargs)
    ulysses = simulate_training(plan="tp=2,cp=8,mbs=1,sp=true,cp_algo=ulysses", **kwargs)
    assert ulysses.step_time_s != ring.step_time_s and "cp_algo=ulysses" in ulysses.plan
    assert "cp_algo" not in ring.plan  # the default algorithm is not spelled out
    assert parse_plan("cp=2,cp_comm_type=ulysses").cp_algo == "ulysses"
    titan = simulate_training(plan="tp=2,cp=8,mbs=1,sp=true", framework="torchtitan", **kwargs)
    assert "cp_algo=allgather" in titan.plan  # the stack's default
    with pytest.raises(WindtunnelError) as info:
        parse_plan("cp=2,cp_algo=zigzag")
    assert "cp_algo" in str(info.value)


# PyTorch's context_parallel (torchtitan): the all-gather rotater's forward, its backward's re-gather and fp32
# dK/dV rotation, overlapped as eager PyTorch waits (at first use) or serialised as a compiled block waits.
TITAN = dict(model="llama3-8b", hardware="h100-hbm2e-500w", devices=16, seq_len=SEQ, global_batch=1)
TITAN_PLAN = "tp=8,cp=2,mbs=1,sp=true,recompute=none,precision=bf16"


def _layer(phase: str, overlap: bool, framework: str = "torchtitan"):
    from windtunnel.insight import training_job
    from windtunnel.train.step import _StepBuilder

    builder = _StepBuilder(training_job(**TITAN, plan=f"{TITAN_PLAN},cp_overlap={str(overlap).lower()}",
                                        framework=framework))
    assert builder.placement.cp.outermost_tier == 1  # the CP pair spans two nodes, as torchtitan's mesh puts it
    graphs = [builder.forward_graphs["dense"]] if phase == "fwd" else builder.backward_graphs("dense", "none")
    return builder.coster.play(graphs)  # the layer's DAG alone (no ZeRO-3 gathers beside it)


def _spans(timeline, stream=None, name=None):
    return [(timeline.start[i], timeline.end[i]) for i in range(len(timeline.names))
            if (stream is None or timeline.streams[i] == stream) and (name is None or timeline.names[i] == name)
            and timeline.end[i] > timeline.start[i]]


def _hidden(span, busy):
    """Seconds of ``span`` during which some compute task runs."""
    return sum(max(0.0, min(span[1], end) - max(span[0], start)) for start, end in busy)


def test_pytorch_cp_backward_regathers_and_rotates_fp32_gradients_every_step():
    from windtunnel.graph.ops import backward_of

    model = load_model("llama3-8b")
    titan = load_stack("torchtitan").comm
    kv_block = 2 * SEQ // CP * model.kv_heads * 2 * model.head_dim
    for overlap in (True, False):
        shard = Sharding(cp=CP, seq_len=SEQ, context_parallel="allgather", cp_overlap=overlap,
                         cp_grad_bytes=titan.cp_grad_bytes, cp_regather=titan.cp_backward_regather)
        graph = layer_forward(model, shard, moe=False)
        backward = backward_of(graph)
        gathers = [op for op in backward.ops if op.name == "cp_kv_allgather.bwd"]
        assert [op.bytes_moved for op in gathers] == [pytest.approx(kv_block * CP)]  # K/V gathered again
        # CP permutes, each of this rank's fp32 dK/dV (4 bytes per element): the last brings its own back
        rotations = [op for op in backward.ops if op.name.startswith("cp_dkv_")]
        assert all(op.kind == "send_recv" for op in rotations)
        assert sum(op.bytes_moved for op in rotations) == pytest.approx(CP * 2 * kv_block)
        assert sum(op.host_ops for op in rotations) == CP
        # forward: one all-gather only; the rotations move nothing there
        assert sum(op.bytes_moved for op in graph.ops if op.stream == "cp") == pytest.approx(kv_block * CP)


def test_compiled_pytorch_cp_stalls_the_attention_for_every_transfer():
    # Traced into a compiled block, each functional collective is waited where it is issued: the local block
    # starts when the all-gather ends, and no CP transfer of the backward runs beside compute.
    forward = _layer("fwd", overlap=False).timeline
    (gather,) = _spans(forward, name="cp_kv_allgather")
    (local,) = _spans(forward, name="core_attention")
    assert local[0] == pytest.approx(gather[1])
    backward = _layer("bwd", overlap=False).timeline
    busy = _spans(backward, stream="compute")
    transfers = _spans(backward, stream="cp")
    assert len(transfers) == 2 and all(_hidden(span, busy) == pytest.approx(0.0, abs=1e-12) for span in transfers)
    # the stalls are what the layer loses against the overlapped play, forward: the whole all-gather (shorter
    # than the local block it runs beside when overlapped)
    eager = _layer("fwd", overlap=True)
    assert _layer("fwd", overlap=False).time - eager.time == pytest.approx(gather[1] - gather[0])


def test_eager_pytorch_cp_hides_all_but_the_last_gradient_rotation():
    forward = _layer("fwd", overlap=True).timeline
    (gather,) = _spans(forward, name="cp_kv_allgather")
    (local,) = _spans(forward, name="core_attention")
    assert local[0] == pytest.approx(gather[0]) and gather[1] < local[1]  # the all-gather runs beside the local block
    backward = _layer("bwd", overlap=True).timeline
    busy = _spans(backward, stream="compute")
    for name in ("cp_kv_allgather.bwd", "cp_dkv_rotate.bwd"):  # beside the local block, beside the ring steps
        (span,) = _spans(backward, name=name)
        assert _hidden(span, busy) == pytest.approx(span[1] - span[0])
    (last,) = _spans(backward, name="cp_dkv_return.bwd")
    assert _hidden(last, busy) == pytest.approx(0.0, abs=1e-12)
    assert _layer("bwd", overlap=False).time > _layer("bwd", overlap=True).time + (last[1] - last[0])


def test_cp_overlap_is_a_plan_field_whose_default_is_the_stack():
    from windtunnel.specs.plan import parse_plan

    assert load_stack("torchtitan").comm.cp_overlap and load_stack("megatron").comm.cp_overlap
    assert not load_stack("torchtitan-compile").comm.cp_overlap  # compiled blocks: traced collectives
    assert not parse_plan("cp=2,cp_overlap=false").cp_overlap and parse_plan("cp=2").cp_overlap
    eager = simulate_training(**TITAN, plan=TITAN_PLAN, framework="torchtitan")
    compiled = simulate_training(**TITAN, plan=TITAN_PLAN, framework="torchtitan-compile")
    stated = simulate_training(**TITAN, plan=TITAN_PLAN + ",cp_overlap=false", framework="torchtitan")
    assert "cp_overlap" not in eager.plan and "cp_overlap=false" in compiled.plan and "cp_overlap=false" in stated.plan
    assert stated.step_time_s > eager.step_time_s
    assert stated.breakdown["cp_comm"] > eager.breakdown.get("cp_comm", 0.0)
    assert parse_plan(parse_plan("cp=2,cp_overlap=false").short()).cp_overlap is False
    assert "cp_overlap" not in parse_plan("cp=1,cp_overlap=false").short()  # no CP, nothing to say


def test_without_overlap_a_ring_waits_for_its_transfer_too():
    model = load_model("llama3-8b")
    graph = layer_forward(model, Sharding(cp=CP, seq_len=SEQ, cp_overlap=False), moe=False)
    names = [op.name for op in graph.ops]
    local = graph.ops[names.index("core_attention")]
    assert names.index("cp_kv_ring") in local.deps
    overlapped = layer_forward(model, Sharding(cp=CP, seq_len=SEQ), moe=False)
    assert names.index("cp_kv_ring") not in overlapped.ops[names.index("core_attention")].deps


def _titan_attention(cp: int, tokens: int = SEQ // CP) -> dict:
    """The attention operators of one torchtitan CP layer holding ``tokens`` queries per rank, by name."""
    titan = load_stack("torchtitan").comm
    shard = Sharding(cp=cp, seq_len=tokens * cp, context_parallel="allgather", cp_overlap=False,
                     cp_grad_bytes=titan.cp_grad_bytes, cp_regather=titan.cp_backward_regather)
    graph = layer_forward(load_model("llama3-8b"), shard, moe=False)
    return {op.name: op for op in _ops(graph, "attention")}


def test_pytorch_cp_costs_each_sdpa_call_at_its_own_key_length():
    # torch's context_parallel calls SDPA per step on one rank's block: the local step is causal over the
    # rank's own keys, each load-balanced ring step sees half a block or a whole one (0.75 of it on average),
    # whatever the CP degree. The kernel's efficiency follows those calls, not the gathered sequence.
    from dataclasses import replace

    from windtunnel.cost.compute import attention_time
    from windtunnel.cost.efficiency import efficiency_for
    from windtunnel.specs.hardware import load_chip

    chip = load_chip("h100-hbm2e-500w")
    eff = efficiency_for(chip)
    tokens = SEQ // CP
    per_flop = {}
    for cp in (2, 8):
        ops = _titan_attention(cp, tokens)
        assert ops["core_attention"].shape[2] == tokens
        assert ops["core_attention_ring"].shape[2] == pytest.approx(0.75 * tokens)
        ring = ops["core_attention_ring"]
        per_flop[cp] = attention_time(ring, chip, eff) / ring.flops
        # costed at the gathered sequence (cp x tokens keys) the same calls would look faster
        gathered = replace(ring, shape=(ring.shape[0], tokens, tokens * cp, *ring.shape[3:]))
        assert attention_time(gathered, chip, eff) < attention_time(ring, chip, eff)
    # the same calls at CP 2 and CP 8: the same time per FLOP (ring steps differ only in number)
    assert per_flop[8] == pytest.approx(per_flop[2], rel=1e-3)


def test_ring_cp_kernels_see_one_block_of_keys_and_allgather_the_sequence():
    """Megatron's ring CP (Transformer Engine's AttnFuncWithCPAndKVP2P) runs one flash call per step on a rank's
    block, load-balanced like torch's: the local step is causal over the rank's own keys, each ring step sees 0.75
    of a block on average. The all-gather CP attends over the gathered prefix in one call, at its length."""
    _, ring = _graph("ring")
    _, gather = _graph("allgather")
    tokens = SEQ // CP
    ops = {op.name: op for op in ring.ops}
    assert ops["core_attention"].shape[2] == tokens
    assert ops["core_attention_ring"].shape[2] == pytest.approx(0.75 * tokens)
    assert {op.name: op.shape[2] for op in gather.ops if op.kind == "attention"}["core_attention"] == SEQ

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

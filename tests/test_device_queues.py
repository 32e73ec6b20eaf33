"""One hardware work queue per device (plan device_connections=1, CUDA_DEVICE_MAX_CONNECTIONS=1): an overlapped
pair's all-to-alls wait behind the kernels issued before them, in Megatron-Core's combined-1F1B issue order."""

from __future__ import annotations

import pytest

from windtunnel.api import simulate_training
from windtunnel.graph.ops import OpGraph, backward_of
from windtunnel.graph.transformer import Sharding, layer_forward
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.model import load_model
from windtunnel.specs.plan import parse_plan
from windtunnel.train.layers import issue_order

QWEN = load_model("qwen3-30b-a3b")
JOB = dict(hardware="h100-sxm", devices=16, seq_len=4096, global_batch=256, framework="megatron-lm")
PLAN = "tp=1,pp=1,ep=16,mbs=1,recompute=selective,recompute_modules=moe_act,dispatcher=alltoall"


def _pair() -> list[OpGraph]:
    forward = layer_forward(QWEN, Sharding(ep=16, seq_len=4096), moe=True)
    return [forward, backward_of(forward)]


def test_issue_order_is_megatrons_and_topological():
    graphs = _pair()
    order = issue_order(graphs)
    assert sorted(order) == sorted((gi, oi) for gi, g in enumerate(graphs) for oi in range(len(g.ops)))
    position = {key: i for i, key in enumerate(order)}
    for gi, graph in enumerate(graphs):
        for oi, op in enumerate(graph.ops):
            assert all(position[(gi, dep)] < position[(gi, oi)] for dep in op.deps)
    name = {(gi, oi): op.name for gi, g in enumerate(graphs) for oi, op in enumerate(g.ops)}
    at = {name[key]: i for i, key in enumerate(order)}
    # TransformerLayerSchedulePlan.run: the backward's combine first, the forward's dispatch after the backward's
    # expert input gradients and before its weight gradients, the backward's dispatch before the forward's experts.
    assert at["combine.bwd"] < at["core_attention"] < at["experts.down_proj.dgrad"] < at["dispatch"]
    assert at["dispatch"] < at["experts.up_proj.wgrad"] < at["dispatch.bwd"] < at["experts.up_proj"] < at["combine"]
    assert at["combine"] < at["core_attention.bwd"]


def test_one_queue_keeps_part_of_the_overlap_gain():
    plain = simulate_training(model=QWEN, plan=PLAN, **JOB).step_time_s
    overlapped = simulate_training(model=QWEN, plan=PLAN + ",ep_overlap=true", **JOB).step_time_s
    queued = simulate_training(model=QWEN, plan=PLAN + ",ep_overlap=true,device_connections=1", **JOB).step_time_s
    assert overlapped < queued < plain


def test_the_step_says_when_the_pair_waits_in_one_queue():
    said = simulate_training(model=QWEN, plan=PLAN + ",ep_overlap=true,device_connections=1", **JOB).assumptions
    assert any("one hardware queue" in line for line in said)
    assert not any("one hardware queue" in line
                   for line in simulate_training(model=QWEN, plan=PLAN + ",ep_overlap=true", **JOB).assumptions)


def test_without_an_overlapped_pair_the_queues_change_nothing():
    assert simulate_training(model=QWEN, plan=PLAN, **JOB).step_time_s == \
        simulate_training(model=QWEN, plan=PLAN + ",device_connections=1", **JOB).step_time_s


def test_plan_field_parses_prints_and_bounds():
    plan = parse_plan("tp=1,cuda_device_max_connections=1")
    assert plan.device_connections == 1 and "device_connections=1" in plan.to_string()
    assert "device_connections" not in parse_plan("tp=1").to_string()
    for bad in ("0", "33", "many"):
        with pytest.raises(WindtunnelError, match="device_connections"):
            parse_plan(f"device_connections={bad}")

"""Hybrid sharded data parallelism (plan field dp_shard): ZeRO/FSDP shards over groups of dp_shard
data-parallel ranks and replicates across the dp/dp_shard groups, whose gradient shards are all-reduced."""

from __future__ import annotations

import pytest

from windtunnel.api import simulate_training
from windtunnel.cost.collectives import collective_time, place_group
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.model import load_model
from windtunnel.specs.plan import parse_plan
from windtunnel.train.placement import place_plan
from windtunnel.train.step import TrainingJob, _StepBuilder

# 64 H100s on 8-GPU nodes, pure data parallelism: dp = 64.
KWARGS = dict(model="llama3-8b", hardware="dgx-h100", devices=64, seq_len=4096, global_batch=128,
              framework="torchtitan")


def _builder(plan: str, devices: int = 64, model: str = "llama3-8b", global_batch: int = 128) -> _StepBuilder:
    job = TrainingJob(load_model(model), load_hardware("dgx-h100", devices), parse_plan(plan), 4096, global_batch,
                      framework="torchtitan")
    return _StepBuilder(job)


def test_dp_shard_parses_from_its_aliases_and_round_trips():
    for text in ("dp_shard=8", "hsdp=8", "data_parallel_shard_degree=8", "dp-shard=8"):
        assert parse_plan("tp=1," + text).dp_shard == 8
    plan = parse_plan("tp=2,zero=3,dp_shard=4")
    assert "dp_shard=4" in plan.to_string() and "dp_shard=4" in plan.short()
    assert parse_plan(plan.to_string()).dp_shard == 4 and parse_plan(plan.short()).dp_shard == 4
    assert "dp_shard" not in parse_plan("tp=2").to_string()  # unset: shard over every dp rank


def test_memory_falls_as_the_sharding_group_grows_to_dp():
    for zero in (1, 2, 3):
        peaks = [simulate_training(plan=f"tp=1,pp=1,mbs=2,zero={zero},dp_shard={s}", **KWARGS).peak_memory_bytes
                 for s in (1, 2, 4, 8, 16, 32, 64)]
        assert all(a > b for a, b in zip(peaks, peaks[1:], strict=False)), (zero, peaks)


def test_states_are_divided_by_the_sharding_group_not_dp():
    full = simulate_training(plan="tp=1,pp=1,mbs=2,zero=3", **KWARGS).memory_breakdown
    hybrid = simulate_training(plan="tp=1,pp=1,mbs=2,zero=3,dp_shard=8", **KWARGS).memory_breakdown
    for part in ("weights", "gradients", "optimizer"):
        assert hybrid[part] == pytest.approx(8 * full[part], rel=1e-9)


def test_a_sharding_group_inside_a_node_puts_its_collectives_on_the_node_tier():
    cluster = load_hardware("dgx-h100", 64)
    placement = place_plan(parse_plan("tp=1,pp=1,dp=64,zero=3,dp_shard=8"), cluster)
    assert placement.dp.size == 8 and placement.dp.outermost_tier == 0
    assert placement.dp_replica.size == 8 and placement.dp_replica.outermost_tier == 1
    described = simulate_training(plan="tp=1,pp=1,mbs=2,zero=3,dp_shard=8", **KWARGS).placement
    assert described["dp"] == "8 ranks on " + cluster.tiers[0].name
    assert described["dp_replica"] == "8 ranks on " + cluster.tiers[1].name
    # The parameter all-gather costs what it costs inside one 8-GPU node, far less than across 8 nodes.
    hybrid, full = _builder("tp=1,pp=1,mbs=2,zero=3,dp_shard=8"), _builder("tp=1,pp=1,mbs=2,zero=3")
    node = _builder("tp=1,pp=1,mbs=2,zero=3", devices=8, global_batch=16)
    dense, expert = hybrid.layer_params("dense")
    gather = hybrid._dp_collective("all_gather", dense, expert, 2.0)
    assert gather == pytest.approx(node._dp_collective("all_gather", dense, expert, 2.0), rel=1e-12)
    assert gather < full._dp_collective("all_gather", dense, expert, 2.0)


def test_gradient_reduction_adds_the_replicas_all_reduce_of_the_shards():
    builder = _builder("tp=1,pp=1,mbs=2,zero=1,dp_shard=8")
    cluster, eff = builder.job.cluster, builder.eff
    dense, _ = builder.layer_params("dense")
    message = dense * 4.0
    inside = collective_time("reduce_scatter", message, place_group("dp", 8, 1, cluster), cluster, eff)
    across = collective_time("all_reduce", message / 8, place_group("r", 8, 8, cluster), cluster, eff)
    assert across > 0 and builder._dp_collective("reduce_scatter", dense, 0.0, 4.0) == pytest.approx(inside + across)
    # Sharding groups of one are plain data parallelism: one all-reduce of the whole buffer over dp.
    ddp, replicated = _builder("tp=1,pp=1,mbs=2,zero=0"), _builder("tp=1,pp=1,mbs=2,zero=1,dp_shard=1")
    assert replicated.dp_bucket_time(dense, 0.0) == pytest.approx(ddp.dp_bucket_time(dense, 0.0), rel=1e-12)


@pytest.mark.parametrize("plan, kwargs", [
    ("tp=1,pp=1,mbs=2,zero=3", {}),
    ("tp=2,pp=2,mbs=1,zero=1", {}),
    ("tp=1,pp=2,vpp=2,mbs=1,zero=2", {}),
    ("tp=1,pp=1,mbs=1,zero=1,ep=8", {"model": "mixtral-8x7b", "framework": "megatron"}),
])
def test_dp_shard_equal_to_dp_reproduces_the_unset_plan_exactly(plan, kwargs):
    args = {**KWARGS, **kwargs}
    base = simulate_training(plan=plan, **args)
    dp = int(dict(item.split("=") for item in base.plan.split(","))["dp"])
    same = simulate_training(plan=plan + f",dp_shard={dp}", **args)
    assert same.step_time_s == base.step_time_s
    assert same.peak_memory_bytes == base.peak_memory_bytes
    assert same.breakdown == base.breakdown and same.memory_breakdown == base.memory_breakdown


@pytest.mark.parametrize("plan, words", [
    ("tp=1,zero=3,dp_shard=3", ["'dp_shard' is 3", "does not divide dp = 64", "1, 2, 4, 8, 16, 32, 64"]),
    ("tp=1,zero=3,dp_shard=128", ["'dp_shard' is 128", "does not divide dp = 64"]),
    ("tp=1,zero=0,dp_shard=8", ["'dp_shard' is 8", "zero is 0", "zero=1, 2 or 3"]),
])
def test_bad_dp_shard_values_are_clear_errors(plan, words):
    with pytest.raises(WindtunnelError) as info:
        simulate_training(plan=plan, **KWARGS)
    assert info.value.field == "dp_shard"
    for word in words:
        assert word in str(info.value)


def test_dp_shard_replicas_must_tile_the_expert_data_parallel_group():
    # Mixtral on 64 GPUs with tp=1, ep=8: expert-DP = 64/8 = 8; 16 replicas (dp_shard=4) cannot tile it.
    with pytest.raises(WindtunnelError) as info:
        simulate_training(plan="tp=1,mbs=1,zero=1,ep=8,dp_shard=4",
                          **{**KWARGS, "model": "mixtral-8x7b", "framework": "megatron"})
    assert info.value.field == "dp_shard" and "expert-data-parallel group" in str(info.value)
    with pytest.raises(WindtunnelError) as info:
        parse_plan("tp=1,dp_shard=-2")
    assert "dp_shard" in str(info.value)


def test_one_copy_of_each_hsdp_shard_writes_the_checkpoint():
    from windtunnel.job.costs import checkpoint_cost

    kw = dict(devices=64, dp=64, zero=3, moments="fp32", storage_bandwidth_bytes_per_s=1e15, host_link_bytes_per_s=5e10)
    full = checkpoint_cost(8_000_000_000, **kw)
    hybrid = checkpoint_cost(8_000_000_000, replicas=parse_plan("dp=64,zero=3,dp_shard=8").dp_replicas, **kw)
    assert full.writer_ranks == 64 and hybrid.writer_ranks == 8
    assert hybrid.async_stall_s == pytest.approx(8 * full.async_stall_s) and hybrid.total_bytes == full.total_bytes


def test_search_refinement_tries_hybrid_sharding_where_the_stack_can():
    """The search's refinement also plays a ZeRO-3 plan sharded inside each node (dp_shard = the node's dp ranks)
    and keeps it when faster; a stack without hybrid sharding (DeepSpeed 0.6.2) keeps full sharding."""
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.specs.model import load_model
    from windtunnel.specs.plan import parse_plan
    from windtunnel.train.space import SearchSpace, refine, shard_groups

    plan = parse_plan("tp=1,pp=1,zero=3,mbs=1,recompute=selective").model_copy(update={"dp": 1024})
    cluster = load_hardware("h100-sxm", 1024)
    assert shard_groups(cluster, plan) == [8]
    assert shard_groups(cluster, plan.model_copy(update={"zero": 1})) == []
    assert shard_groups(cluster, plan.model_copy(update={"dp_shard": 64})) == []
    hybrid = refine(SearchSpace(load_model("llama3-8b"), cluster, 8192, 1024, framework="pytorch-fsdp2"), plan)
    assert "dp_shard=8" in hybrid.plan
    full = simulate_training("llama3-8b", "h100-sxm", 1024, seq_len=8192, global_batch=1024,
                             plan="tp=1,pp=1,zero=3,mbs=1,recompute=selective", framework="pytorch-fsdp2")
    assert hybrid.step_time_s < full.step_time_s
    old = refine(SearchSpace(load_model("llama3-8b"), cluster, 8192, 1024, framework="megatron-deepspeed"), plan)
    assert "dp_shard" not in old.plan

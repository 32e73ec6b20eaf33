"""Parallel groups placed by the tiers they really span, including groups that split domains unevenly."""

from __future__ import annotations

import pytest

from windtunnel.cost.collectives import (
    GroupPlacement,
    Level,
    _tier_bandwidth,
    collective_time,
    place_group,
    tree_all_reduce_time,
)
from windtunnel.cost.efficiency import efficiency_for
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.plan import Plan
from windtunnel.train.placement import place_plan

H100_CLUSTERS = ("dgx-h100", "hgx-h200", "hgx-h800")


def _old_place_group(size: int, stride: int, cluster) -> tuple[tuple[int, int], ...]:
    """The placement before uneven groups were handled (floors members per domain), as (tier, members)."""
    levels, inside = [], 1
    for index, tier in enumerate(cluster.tiers):
        capacity = size if tier.size is None else max(1, min(size, tier.size // stride)) if stride <= tier.size else 1
        capacity = max(capacity, inside)
        if index == len(cluster.tiers) - 1:
            capacity = size
        joined = capacity // inside
        if joined > 1:
            levels.append((index, joined))
        inside = capacity
        if inside >= size:
            break
    return tuple(levels)


def _old_time(kind: str, message: float, size: int, levels, cluster, eff) -> float:
    """The collective times before uneven groups were handled, on (tier, members) levels (a ring of
    ``members`` parties drives ``members - 1`` links of a full-mesh tier; the hierarchy's latency is that of
    one ring over all members, NCCL's multi-node ring)."""

    def ring(members, data, tier, passes):
        chunk = data / members
        steps = passes * (members - 1)
        return (steps * chunk / _tier_bandwidth(cluster, tier, eff, chunk, members)
                + steps * cluster.tiers[tier].latency)

    if kind == "all_to_all":
        worst, inside = 0.0, 1
        for tier, members in levels:
            share = (inside * members - inside) / size
            bandwidth = _tier_bandwidth(cluster, tier, eff, message / size, members)
            worst = max(worst, message * share / bandwidth + (members - 1) * cluster.tiers[tier].latency)
            inside *= members
        return worst
    passes = 2.0 if kind == "all_reduce" else 1.0
    total, data = 0.0, message
    for tier, members in levels:
        total += ring(members, data, tier, passes) - passes * (members - 1) * cluster.tiers[tier].latency
        data /= members
    # A ring over every member: its size - 1 steps each wait for the outermost tier's latency.
    total += passes * (size - 1) * cluster.tiers[levels[-1][0]].latency
    if kind != "all_reduce":
        return total
    outer = levels[-1][0]
    group = GroupPlacement("g", size, 1, (Level(outer, size, 1, size),))
    return min(total, ring(size, message, outer, passes), tree_all_reduce_time(message, group, cluster, eff))


def _evenly(size: int, stride: int, cluster) -> bool:
    span = size * stride
    return all((span % t.size == 0 or t.size % span == 0) and (stride % t.size == 0 or t.size % stride == 0)
               for t in cluster.tiers if t.size is not None)


@pytest.mark.parametrize("cluster_id,devices", [("dgx-h100", 1024), ("gb200-nvl72", 72 * 32),
                                                ("cloudmatrix384", 384 * 8), ("atlas-800t-a2", 512)])
def test_even_groups_are_placed_and_costed_as_before(cluster_id, devices):
    """Groups that divide their domains evenly keep the old levels exactly, and the same collective times."""
    cluster = load_hardware(cluster_id, devices)
    eff = efficiency_for(cluster.chip)
    checked = 0
    for size in (1, 2, 3, 4, 6, 8, 9, 12, 16, 18, 24, 32, 36, 48, 64, 72, 96, 128, 144, 192, 384, 768):
        for stride in (1, 2, 3, 4, 8, 9, 16, 24, 32, 64, 72, 128, 384):
            if size * stride > devices or not _evenly(size, stride, cluster):
                continue
            group = place_group("g", size, stride, cluster)
            old = _old_place_group(size, stride, cluster)
            assert [(level.tier, level.joined) for level in group.levels] == list(old), (size, stride)
            assert group.even
            for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
                if size > 1:
                    expected = _old_time(kind, 3e8, size, old, cluster, eff)
                    assert collective_time(kind, 3e8, group, cluster, eff) == pytest.approx(expected, rel=1e-9)
            checked += 1
    assert checked > 40


def test_twelve_ranks_on_eight_gpu_nodes_span_scale_out():
    """12 consecutive ranks on 8-GPU nodes are 8 + 4 (or 4 + 8) per node: the group crosses scale-out, its
    busiest member (one of the 4) sends 8/12 of its buffer over its NIC, several times the NVLink-only cost."""
    cluster = load_hardware("h100-sxm", 24)
    eff = efficiency_for(cluster.chip)
    group = place_group("ep", 12, 1, cluster)
    assert group.levels == (Level(0, 8, 1, 8), Level(1, 2, 4, 12))
    assert group.outermost_tier == 1 and not group.even
    message = 4096 * 8 * 7168 * 2.0
    nvlink_only = collective_time("all_to_all", message, GroupPlacement("ep", 12, 1, (Level(0, 12, 1, 12),)),
                                  cluster, eff)
    a2a = collective_time("all_to_all", message, group, cluster, eff)
    assert a2a > 5 * nvlink_only
    nic = _tier_bandwidth(cluster, 1, eff, message / 12)
    assert a2a == pytest.approx(message * 8 / 12 / nic + cluster.tiers[1].latency, rel=1e-9)
    described = place_plan(Plan(tp=1, dp=24, ep=12), cluster).describe(cluster)
    assert described["ep"] == "12 ranks on scale-out (4-8 per node)"


def test_uneven_hierarchical_phases_are_bounded_by_the_bottleneck():
    """8 + 4 members: the NVLink phase is the 8-member domain's ring; the scale-out phase moves what the
    4-member domain lacks, 1/4 - 1/12 = 1/6 of the buffer per member; a flat ring is used when cheaper."""
    cluster = load_hardware("h100-sxm", 24)
    eff = efficiency_for(cluster.chip)
    group = place_group("dp", 12, 1, cluster)
    message = 1e9
    inner = 7 / 8 * message / _tier_bandwidth(cluster, 0, eff, message / 8)
    outer = message / 6 / _tier_bandwidth(cluster, 1, eff, message / 6)
    latency = 11 * cluster.tiers[1].latency  # one ring over the 12 members, each step waiting for the network hop
    assert collective_time("all_gather", message, group, cluster, eff) == pytest.approx(inner + outer + latency,
                                                                                         rel=1e-9)
    # 8 + 1: the lone member must receive 8/9 of the buffer either way; one flat ring beats the hierarchy.
    lone = place_group("dp", 9, 1, load_hardware("h100-sxm", 9))
    assert lone.levels[-1] == Level(1, 2, 1, 9)
    flat = 8 / 9 * message / _tier_bandwidth(cluster, 1, eff, message / 9) + 8 * cluster.tiers[1].latency
    assert collective_time("reduce_scatter", message, lone, cluster, eff) == pytest.approx(flat, rel=1e-9)


def test_672_data_parallel_ranks_of_910c_span_scale_out():
    """A CloudMatrix384 supernode holds 384 NPUs, so 672 DP ranks cannot share one (they were reported
    "on ub-supernode"); the job is spread 336 + 336 over two supernodes."""
    cluster = load_hardware("cloudmatrix384", 672)
    assert cluster.job_domain_sizes() == [336, 672]
    placement = place_plan(Plan(tp=1, dp=672), cluster)
    assert placement.dp.levels[-1] == Level(1, 2, 336, 672)
    assert placement.describe(cluster)["dp"] == "672 ranks on scale-out"
    chip_default = load_hardware("ascend-910c", 672)
    assert place_plan(Plan(tp=1, dp=672), chip_default).describe(chip_default)["dp"] == "672 ranks on scale-out"


def test_job_spreads_evenly_over_the_fewest_domains():
    """256 GPUs on NVL72 racks run as 4 x 64 (block scheduling); 20 on 8-GPU nodes fill 8 + 8 + 4."""
    assert load_hardware("gb200", 256).job_domain_sizes() == [64, 256]
    assert load_hardware("gb200", 64).job_domain_sizes() == [64, 64]
    assert load_hardware("h100-sxm", 20).job_domain_sizes() == [8, 20]
    assert load_hardware("h100-sxm", 12).job_domain_sizes() == [6, 12]
    assert load_hardware("h100-sxm", 1024).job_domain_sizes() == [8, 1024]


def test_pipeline_hops_use_the_outermost_tier_the_stages_span():
    """PP=4 stages of 4 GPUs on 8-GPU nodes: the hop from stage 1 to 2 leaves the node; PP=4 over four
    64-GPU racks crosses racks; PP=2 stages of 4 GPUs share a node."""
    h100 = load_hardware("h100-sxm", 16)
    assert place_plan(Plan(tp=4, pp=4, dp=1), h100).pp_tier == 1
    assert place_plan(Plan(tp=4, pp=2, dp=1), load_hardware("h100-sxm", 8)).pp_tier == 0
    gb200 = load_hardware("gb200", 256)
    assert place_plan(Plan(tp=1, pp=4, dp=64, ep=64), gb200).pp_tier == 1
    assert place_plan(Plan(tp=1, pp=1, dp=64, ep=64), load_hardware("gb200", 64)).describe(
        load_hardware("gb200", 64))["ep"] == "64 ranks on nvl72"


@pytest.mark.parametrize("cluster_id", H100_CLUSTERS)
@pytest.mark.parametrize("kind", ["all_to_all", "all_gather"])
def test_time_does_not_drop_across_the_node_boundary(cluster_id, kind):
    """On 8-GPU nodes, a group that fills whole nodes costs no less than any smaller such group, and no group
    crossing the node boundary (9..64 ranks, even or not) is cheaper than the 8 ranks inside one node. (Over
    all sizes the bottleneck is not monotone: in 8 + 4 a member of the 4 pushes 8/12 of its buffer through
    its NIC, more than the 8/16 of an even 16.)"""
    cluster = load_hardware(cluster_id, 64)
    eff = efficiency_for(cluster.chip)
    message = 4096 * 8 * 7168 * 2.0

    def time(size):
        return collective_time(kind, message, place_group("g", size, 1, cluster), cluster, eff)

    filling = [time(size) for size in (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)]
    assert filling == sorted(filling)
    inside = time(8)
    assert all(time(size) >= inside for size in range(9, 65))

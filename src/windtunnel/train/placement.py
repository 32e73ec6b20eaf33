"""Placement of a plan's parallel groups on the topology tiers (Megatron order).

Dense layers order ranks TP (innermost), CP, DP, PP (outermost). Expert layers regroup the
TP x CP x DP ranks of one pipeline stage as expert-TP (innermost), EP, expert-DP, as Megatron-Core
does, so small EP groups stay inside a node.

Hybrid sharded data parallelism (``plan.dp_shard``) splits each data-parallel group in two: the
sharding group (dp_shard x CP ranks, innermost: the ranks that gather parameters and reduce-scatter
gradients) and the replica group (dp/dp_shard ranks, one per sharding group, outermost: they
all-reduce their gradient shards). Without it the replica groups have one member and move nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from windtunnel.cost.collectives import GroupPlacement, collective_time, place_group
from windtunnel.cost.efficiency import Efficiency
from windtunnel.specs.hardware import Cluster
from windtunnel.specs.plan import Plan


@dataclass(frozen=True)
class Placement:
    """Every parallel group of one rank, placed on the cluster."""

    tp: GroupPlacement
    cp: GroupPlacement
    ep: GroupPlacement
    dp: GroupPlacement          # dense-parameter sharding group (DP x CP ranks; dp_shard x CP with HSDP)
    expert_dp: GroupPlacement   # expert-parameter sharding group
    pp_tier: int                # tier crossed by pipeline send/recv
    # HSDP replica groups: the same shard on each sharding group (size 1 without hybrid sharding).
    dp_replica: GroupPlacement = GroupPlacement("dp_replica", 1, 1, ())
    expert_dp_replica: GroupPlacement = GroupPlacement("expert_dp_replica", 1, 1, ())

    @property
    def dp_active(self) -> bool:
        """Whether any data-parallel group (sharding or replica, dense or expert) has a peer to talk to."""
        return any(g.size > 1 for g in (self.dp, self.expert_dp, self.dp_replica, self.expert_dp_replica))

    @property
    def dp_outermost_tier(self) -> int:
        """The outermost tier any data-parallel transfer crosses (0 when none has a peer)."""
        return max((g.outermost_tier for g in (self.dp, self.expert_dp, self.dp_replica, self.expert_dp_replica)
                    if g.size > 1), default=0)

    def group(self, name: str) -> GroupPlacement:
        return getattr(self, name)

    def describe(self, cluster: Cluster) -> dict[str, str]:
        """Human-readable outermost tier each group spans, for assumptions and reports; a group split
        unevenly says how many of its members share a domain one level in (e.g. "12 ranks on scale-out
        (4-8 per node)")."""
        out = {}
        names = ("tp", "cp", "ep", "dp", "expert_dp") if self.ep.size > 1 else ("tp", "cp", "dp")
        names += ("dp_replica", "expert_dp_replica") if self.ep.size > 1 else ("dp_replica",)
        for name in names:
            group = self.group(name)
            if group.size > 1:
                out[name] = f"{group.size} ranks on " + cluster.tiers[group.outermost_tier].name
                if not group.even and len(group.levels) > 1:
                    inner, outer = group.levels[-2:]
                    out[name] += f" ({outer.inside}-{inner.reach} per {cluster.tiers[inner.tier].name})"
        out["pp"] = cluster.tiers[self.pp_tier].name
        return out


def strides(plan: Plan) -> dict[str, int]:
    """Device stride of each parallel dimension under the plan's rank order (innermost first)."""
    sizes = {"tp": plan.tp, "cp": plan.cp, "dp": plan.dp, "pp": plan.pp}
    out, stride = {}, 1
    for name in plan.order.split("-"):
        out[name] = stride
        stride *= sizes[name]
    return out


def place_plan(plan: Plan, cluster: Cluster) -> Placement:
    """Place the plan's groups; ``plan.dp`` must already be filled in."""
    tp, cp, dp, ep, etp = plan.tp, plan.cp, plan.dp, plan.ep, plan.etp
    expert_dp = max(1, tp * cp * dp // (ep * etp))
    # HSDP: dp/dp_shard replicas of each sharding group (validate_plan checked that they tile dp and expert-dp).
    replicas = plan.dp_replicas
    stride = strides(plan)
    # Expert layers regroup the stage's TP x CP x DP ranks: EP is innermost unless TP is not.
    ep_stride = etp if stride["tp"] == 1 else stride["tp"]
    # The sharding group takes the innermost dp_shard ranks of the DP dimension (with CP's, as FSDP
    # flattens dp_shard x cp); the replicas are dp_shard DP ranks apart. When CP is outside DP
    # (order tp-dp-cp-pp) the dp_shard x CP ranks are not one strided block; they are placed as one
    # block at the smaller stride (an approximation: it may put fewer of them across nodes).
    shard_stride = min(stride["dp"], stride["cp"]) if cp > 1 else stride["dp"]
    return Placement(
        tp=place_group("tp", tp, stride["tp"], cluster),
        cp=place_group("cp", cp, stride["cp"], cluster),
        ep=place_group("ep", ep, ep_stride, cluster),
        dp=place_group("dp", dp // replicas * cp, shard_stride, cluster),
        expert_dp=place_group("expert_dp", expert_dp // replicas, ep_stride * ep, cluster),
        # The slowest stage-to-stage hop bounds the pipeline: the outermost tier the PP group spans.
        pp_tier=place_group("pp", plan.pp, stride["pp"], cluster).outermost_tier,
        dp_replica=place_group("dp_replica", replicas, stride["dp"] * (dp // replicas), cluster),
        expert_dp_replica=place_group("expert_dp_replica", replicas,
                                      ep_stride * ep * (expert_dp // replicas), cluster),
    )


def dp_collective_time(kind: str, dense_bytes: float, expert_bytes: float, placement: Placement, cluster: Cluster,
                       eff: Efficiency) -> float:
    """Seconds for one collective over the parameters' data-parallel sharding groups, the buffers being the
    full (unsharded) ``dense_bytes`` and ``expert_bytes`` of one device. A reduce-scatter also pays the HSDP
    replicas' all-reduce of the shards; an all-gather stays inside the sharding group (every replica holds
    the same shards)."""
    time = (collective_time(kind, dense_bytes, placement.dp, cluster, eff)
            + collective_time(kind, expert_bytes, placement.expert_dp, cluster, eff))
    if kind == "reduce_scatter":
        # HSDP: each rank's reduced shard (1/size of the buffer) is then all-reduced across the replicas
        # of its sharding group, on the same stream (FSDP HYBRID_SHARD); nothing without hybrid sharding.
        time += (collective_time("all_reduce", dense_bytes / placement.dp.size, placement.dp_replica, cluster, eff)
                 + collective_time("all_reduce", expert_bytes / placement.expert_dp.size, placement.expert_dp_replica,
                                   cluster, eff))
    return time

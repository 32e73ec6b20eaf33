"""Placement of a plan's parallel groups on the topology tiers (Megatron order).

Dense layers order ranks TP (innermost), CP, DP, PP (outermost). Expert layers regroup the
TP x CP x DP ranks of one pipeline stage as expert-TP (innermost), EP, expert-DP, as Megatron-Core
does, so small EP groups stay inside a node.
"""

from __future__ import annotations

from dataclasses import dataclass

from windtunnel.cost.collectives import GroupPlacement, place_group
from windtunnel.specs.hardware import Cluster
from windtunnel.specs.plan import Plan


@dataclass(frozen=True)
class Placement:
    """Every parallel group of one rank, placed on the cluster."""

    tp: GroupPlacement
    cp: GroupPlacement
    ep: GroupPlacement
    dp: GroupPlacement          # dense-parameter gradient group (DP x CP ranks)
    expert_dp: GroupPlacement   # expert-parameter gradient group
    pp_tier: int                # tier crossed by pipeline send/recv

    def group(self, name: str) -> GroupPlacement:
        return getattr(self, name)

    def describe(self, cluster: Cluster) -> dict[str, str]:
        """Human-readable outermost tier each group spans, for assumptions and reports; a group split
        unevenly says how many of its members share a domain one level in (e.g. "12 ranks on scale-out
        (4-8 per node)")."""
        out = {}
        names = ("tp", "cp", "ep", "dp", "expert_dp") if self.ep.size > 1 else ("tp", "cp", "dp")
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
    stride = strides(plan)
    # Expert layers regroup the stage's TP x CP x DP ranks: EP is innermost unless TP is not.
    ep_stride = etp if stride["tp"] == 1 else stride["tp"]
    return Placement(
        tp=place_group("tp", tp, stride["tp"], cluster),
        cp=place_group("cp", cp, stride["cp"], cluster),
        ep=place_group("ep", ep, ep_stride, cluster),
        dp=place_group("dp", dp * cp, min(stride["dp"], stride["cp"]) if cp > 1 else stride["dp"], cluster),
        expert_dp=place_group("expert_dp", expert_dp, ep_stride * ep, cluster),
        # The slowest stage-to-stage hop bounds the pipeline: the outermost tier the PP group spans.
        pp_tier=place_group("pp", plan.pp, stride["pp"], cluster).outermost_tier,
    )

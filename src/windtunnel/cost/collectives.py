"""Collective communication on a tiered topology: latency plus bandwidth, ring and hierarchical.

A parallel group is described by how many of its members share each tier's domain
(:class:`GroupPlacement`). A collective then runs hierarchically: reduce-scatter inside the
innermost domain, the same on the shrunken data one tier up, and so on, then the mirror
all-gather (the usual NCCL/HCCL tree of rings). Each phase is a ring over the phase's members
with ``members - 1`` latency-bearing steps. Bandwidths are per device per direction (bytes/s),
message sizes are the full buffer (bytes), times are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from windtunnel.cost.efficiency import Efficiency
from windtunnel.specs.hardware import Cluster


@dataclass(frozen=True)
class GroupPlacement:
    """A parallel group's shape on the topology.

    size: members in the group. levels: for each tier (innermost first), how many members of one
    domain of the previous level share a domain of this tier (their product is ``size``).
    """

    name: str
    size: int
    stride: int
    levels: tuple[tuple[int, int], ...]  # (tier index, members joined at this tier)

    @property
    def outermost_tier(self) -> int:
        return max((tier for tier, members in self.levels if members > 1), default=0)


def place_group(name: str, size: int, stride: int, cluster: Cluster) -> GroupPlacement:
    """Place a group of ``size`` members spaced ``stride`` devices apart on the cluster's tiers."""
    levels = []
    inside = 1
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
    return GroupPlacement(name=name, size=size, stride=stride, levels=tuple(levels))


def _tier_bandwidth(cluster: Cluster, tier: int, eff: Efficiency, message_bytes: float) -> float:
    base = cluster.tiers[tier].bandwidth * (eff.scale_up if tier == 0 else eff.scale_out)
    # Small messages do not fill the pipe (protocol overhead, chunking): a saturating curve.
    return base * message_bytes / (message_bytes + eff.half_message_bytes)


def _ring(members: int, message_bytes: float, cluster: Cluster, tier: int, eff: Efficiency, passes: float) -> float:
    """One ring phase: ``passes`` x (members-1)/members of the message over the tier, plus step latencies."""
    if members <= 1 or message_bytes <= 0:
        return 0.0
    chunk = message_bytes / members
    bandwidth = _tier_bandwidth(cluster, tier, eff, chunk)
    steps = passes * (members - 1)
    return steps * chunk / bandwidth + steps * cluster.tiers[tier].latency


def distinct_remote_domains(domains: int, copies: int) -> float:
    """Expected number of other domains a token's ``copies`` (uniformly routed) land in."""
    if domains <= 1:
        return 0.0
    return (domains - 1) * (1.0 - (1.0 - 1.0 / domains) ** copies)


def collective_time(kind: str, message_bytes: float, group: GroupPlacement, cluster: Cluster, eff: Efficiency,
                    *, fanout: int = 1) -> float:
    """Seconds for one collective of ``message_bytes`` (the full, unsharded buffer) over ``group``.

    For an all-to-all whose message holds ``fanout`` copies of each token (MoE dispatch/combine), a
    deduplicating dispatcher (DeepEP-style) sends a token across an outer tier once per remote
    domain it reaches and fans the copies out over the inner links.
    """
    if group.size <= 1 or message_bytes <= 0:
        return 0.0
    if kind in ("all_reduce", "all_gather", "reduce_scatter"):
        return min(algorithm(message_bytes) for algorithm in reduction_algorithms(kind, group, cluster, eff))
    if kind == "all_to_all":
        # Each member sends (size-1)/size of its buffer; what goes to peers beyond a tier's domain
        # crosses that tier's links. Tiers run concurrently (NVLink and NICs are separate), so the
        # slowest tier bounds the time.
        worst = 0.0
        inside = 1
        for tier, members in group.levels:
            reach = inside * members
            share = (reach - inside) / group.size
            if fanout > 1:
                # A deduplicating dispatcher sends a token across this tier once per distinct remote
                # sub-domain (a rank on the innermost tier, a node beyond it), not once per copy.
                share = distinct_remote_domains(members, fanout) / fanout * (reach / group.size)
            data = message_bytes * share
            bandwidth = _tier_bandwidth(cluster, tier, eff, message_bytes / group.size)
            worst = max(worst, data / bandwidth + (members - 1) * cluster.tiers[tier].latency)
            inside = reach
        return worst
    if kind == "send_recv":
        tier = group.outermost_tier
        bandwidth = _tier_bandwidth(cluster, tier, eff, message_bytes)
        return message_bytes / bandwidth + cluster.tiers[tier].latency
    raise ValueError(f"unknown collective '{kind}'")


def reduction_algorithms(kind: str, group: GroupPlacement, cluster: Cluster, eff: Efficiency) -> list:
    """The algorithms NCCL/HCCL may pick for a reduction collective, each as ``f(message_bytes) -> s``.

    All-gather and reduce-scatter run hierarchically (rings inside each tier's domains, data shrinking
    outwards). All-reduce may also run as one flat ring over the slowest tier or as a double binary
    tree; the fastest is used. Each is affine in the message size, which the vectorised search screen
    relies on.
    """
    passes = 2.0 if kind == "all_reduce" else 1.0

    def hierarchical(message_bytes: float) -> float:
        total, data = 0.0, message_bytes
        for tier, members in group.levels:
            total += _ring(members, data, cluster, tier, eff, passes)
            data /= members
        return total

    if kind != "all_reduce" or not group.levels:
        return [hierarchical]

    def flat(message_bytes: float) -> float:
        return _ring(group.size, message_bytes, cluster, group.outermost_tier, eff, passes)

    def tree(message_bytes: float) -> float:
        return tree_all_reduce_time(message_bytes, group, cluster, eff)

    return [hierarchical, flat, tree]


def affine_pieces(kind: str, group: GroupPlacement, cluster: Cluster, eff: Efficiency) -> list[tuple[float, float]]:
    """(intercept s, slope s/byte) of each algorithm: time(M) = min over pieces of a + b*M for M > 0."""
    if group.size <= 1:
        return [(0.0, 0.0)]
    low, high = 1.0e6, 1.0e9
    pieces = []
    for algorithm in reduction_algorithms(kind, group, cluster, eff):
        t_low, t_high = algorithm(low), algorithm(high)
        slope = (t_high - t_low) / (high - low)
        pieces.append((t_low - slope * low, slope))
    return pieces


def tree_all_reduce_time(message_bytes: float, group: GroupPlacement, cluster: Cluster, eff: Efficiency) -> float:
    """Double-binary-tree all-reduce: a reduce up and a broadcast down two trees, pipelined in chunks.

    Latency grows with log2(size) instead of size; every byte crosses the slowest tier's links
    twice (up and down), at the tree bandwidth derating of the efficiency profile.
    """
    import math

    if group.size <= 1 or message_bytes <= 0:
        return 0.0
    tier = group.outermost_tier
    bandwidth = _tier_bandwidth(cluster, tier, eff, message_bytes) * eff.tree_bandwidth_factor
    depth = math.ceil(math.log2(group.size))
    return 2.0 * message_bytes / bandwidth + 2.0 * depth * cluster.tiers[tier].latency


def p2p_time(message_bytes: float, tier: int, cluster: Cluster, eff: Efficiency) -> float:
    """Seconds for a point-to-point transfer over ``tier``."""
    if message_bytes <= 0:
        return 0.0
    return message_bytes / _tier_bandwidth(cluster, tier, eff, message_bytes) + cluster.tiers[tier].latency

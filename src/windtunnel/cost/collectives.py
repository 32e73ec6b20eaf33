"""Collective communication on a tiered topology: latency plus bandwidth, ring and hierarchical.

A parallel group is described by the tiers its members span (:class:`GroupPlacement`, one
:class:`Level` per tier crossed). A collective then runs hierarchically: reduce-scatter inside the
innermost domain, the same on the shrunken data one tier up, and so on, then the mirror all-gather
(the usual NCCL/HCCL tree of rings); or as one flat ring, or (all-reduce) a double binary tree.
Bandwidths are per device per direction (bytes/s), message sizes are the full buffer (bytes), times
are seconds.

Groups need not divide their domains evenly (12 ranks on 8-GPU nodes: 8 + 4). A phase then costs
what its busiest member moves, since the collective ends when that member is done: a member of a
small domain sends and receives through few links whatever its domain lacks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from windtunnel.cost.efficiency import Efficiency
from windtunnel.specs.hardware import Cluster


class Level(NamedTuple):
    """One tier a group crosses, with the member counts that bound its phase.

    tier: the tier's index. joined: the most domains of the level below (single members at the first
    level) that one domain of this tier brings together (the parties of this tier's ring). inside: the
    fewest members sharing one domain of the level below, among those joined to others here (1 at the
    first level). reach: the most members sharing one domain of this tier. A group that divides its
    domains evenly has reach == inside * joined; otherwise the counts are the bottleneck's.
    """

    tier: int
    joined: int
    inside: int
    reach: int


@dataclass(frozen=True)
class GroupPlacement:
    """A parallel group's shape on the topology.

    size: members in the group; stride: ranks between consecutive members. levels: each tier the group
    crosses, innermost first (the product of ``joined`` is ``size`` when the group divides its domains
    evenly, more otherwise).
    """

    name: str
    size: int
    stride: int
    levels: tuple[Level, ...]

    @property
    def outermost_tier(self) -> int:
        return self.levels[-1].tier if self.levels else 0

    @property
    def even(self) -> bool:
        """Whether every domain the group touches holds the same number of its members."""
        return all(level.inside * level.joined == level.reach for level in self.levels)


def place_group(name: str, size: int, stride: int, cluster: Cluster) -> GroupPlacement:
    """Place a group of ``size`` members spaced ``stride`` ranks apart on the cluster's tiers.

    Ranks number the job's devices consecutively, domain by domain (:meth:`Cluster.job_domain_sizes`),
    and the job holds one such group at every rank offset: ranks ``b, b+stride, ...`` for each
    ``b = i + j*size*stride``, ``i < stride``. Every group is examined (the pattern repeats, so one period
    suffices) and each tier's counts are the extremes over all of them: 12 ranks with stride 1 on 8-GPU
    nodes are 8 + 4 or 4 + 8 per node, so the scale-out level joins 2 nodes with at least 4 members each.
    """
    return GroupPlacement(name=name, size=size, stride=stride,
                          levels=_levels(size, stride, tuple(cluster.job_domain_sizes()), cluster.devices))


@lru_cache(maxsize=4096)
def _levels(size: int, stride: int, domain_sizes: tuple[int, ...], devices: int) -> tuple[Level, ...]:
    if size <= 1:
        return ()
    span = size * stride
    ranks = min(math.lcm(span, *domain_sizes[:-1]), max(span, devices // span * span))
    # One row per group, its members' ranks ascending.
    members = np.arange(ranks).reshape(-1, size, stride).swapaxes(1, 2).reshape(-1, size)
    rows = np.arange(len(members))[:, None]
    levels = []
    below_domain, below_count = members, np.ones_like(members)
    for index, domain_size in enumerate(domain_sizes):
        outermost = index == len(domain_sizes) - 1
        domain = np.zeros_like(members) if outermost else members // domain_size
        relative = domain - domain[:, :1]
        _, which, counts = np.unique(rows * (relative.max() + 1) + relative, return_inverse=True, return_counts=True)
        which = which.reshape(members.shape)
        count = counts[which]  # members of its group sharing each member's domain
        joins = count > below_count
        if joins.any():
            # A domain of the level below starts where the member's sub-domain or domain changes.
            starts = np.ones(members.shape, dtype=bool)
            starts[:, 1:] = (below_domain[:, 1:] != below_domain[:, :-1]) | (domain[:, 1:] != domain[:, :-1])
            joined = np.bincount(which.ravel(), weights=starts.ravel())
            levels.append(Level(index, int(joined.max()), int(below_count[joins].min()), int(count[joins].max())))
        below_domain, below_count = domain, count
    return tuple(levels)


def tier_bandwidth(cluster: Cluster, tier: int, eff: Efficiency, parties: int = 0) -> float:
    """Bytes/s per direction one device sustains on ``tier`` for large messages exchanged among ``parties``
    devices of its domain (0: as many as the domain holds). On a switched tier any group gets the device's
    whole bandwidth; on a full mesh a device reaches each peer over its own link, so ``parties`` devices
    use ``parties - 1`` of the domain's ``size - 1`` links (HCCS: 8 NPUs, 7 links; a 4-rank group gets 3/7)."""
    spec = cluster.tiers[tier]
    base = spec.bandwidth * (eff.scale_up if tier == 0 else eff.scale_out)
    if spec.topology == "mesh" and parties and spec.size and spec.size > 1:
        base *= min(1.0, (parties - 1) / (spec.size - 1))
    return base


def _tier_bandwidth(cluster: Cluster, tier: int, eff: Efficiency, message_bytes: float, parties: int = 0) -> float:
    base = tier_bandwidth(cluster, tier, eff, parties)
    # Small messages do not fill the pipe (protocol overhead, chunking): a saturating curve.
    return base * message_bytes / (message_bytes + eff.half_message_bytes)


def _phase(level: Level, message_bytes: float, cluster: Cluster, eff: Efficiency, passes: float,
           latency: bool = True) -> float:
    """One ring phase over ``level``'s tier, ``passes`` times (2 for an all-reduce), in seconds.

    Entering the phase a member holds 1/inside of the ``message_bytes`` buffer and leaves it holding
    1/reach, so it moves passes x (1/inside - 1/reach) x message bytes over the tier's links (evenly:
    (joined-1)/joined of its 1/inside), in passes x (joined - 1) latency-bearing steps. With uneven domains
    the counts are the bottleneck's (the largest inner domain, the smallest one joined outwards).
    """
    steps = passes * (level.joined - 1)
    if steps <= 0 or message_bytes <= 0:
        return 0.0
    data = passes * message_bytes * (1.0 / level.inside - 1.0 / level.reach)
    bandwidth = _tier_bandwidth(cluster, level.tier, eff, data / steps, level.joined)
    return data / bandwidth + (steps * cluster.tiers[level.tier].latency if latency else 0.0)


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
        # A member sends (size-1)/size of its buffer; what goes to peers beyond its domain of the level below
        # but inside its domain of this tier crosses this tier's links: (reach - inside)/size of the buffer
        # for the busiest member (the one in the smallest domain). Tiers run concurrently (NVLink and NICs
        # are separate), so the slowest tier bounds the time.
        worst = 0.0
        for level in group.levels:
            share = (level.reach - level.inside) / group.size
            if fanout > 1:
                # A deduplicating dispatcher sends a token across this tier once per distinct remote
                # sub-domain (a rank on the innermost tier, a node beyond it), not once per copy.
                share = distinct_remote_domains(level.joined, fanout) / fanout * (level.reach / group.size)
            bandwidth = _tier_bandwidth(cluster, level.tier, eff, message_bytes / group.size, level.joined)
            latency = (level.joined - 1) * cluster.tiers[level.tier].latency
            worst = max(worst, message_bytes * share / bandwidth + latency)
        return worst
    if kind == "send_recv":
        return p2p_time(message_bytes, group.outermost_tier, cluster, eff)
    raise ValueError(f"unknown collective '{kind}'")


def reduction_algorithms(kind: str, group: GroupPlacement, cluster: Cluster, eff: Efficiency) -> list:
    """The algorithms NCCL/HCCL may pick for a reduction collective, each as ``f(message_bytes) -> s``.

    Each runs hierarchically (a ring phase per tier crossed, data shrinking outwards) or as one flat ring
    whose every step crosses the slowest tier (NCCL's multi-node ring; cheaper than the hierarchy when
    domains are uneven, e.g. 8 + 1 members). All-reduce may also run as a double binary tree. The
    fastest is used. Each is affine in the message size, which the vectorised search screen relies on.
    """
    passes = 2.0 if kind == "all_reduce" else 1.0

    def hierarchical(message_bytes: float) -> float:
        # NCCL runs a multi-node reduce-scatter / all-gather as rings over every member, one channel per NIC
        # rail, so each tier carries what the hierarchy says, but a ring step waits for its slowest hop: the
        # ring's size - 1 steps each take the outermost tier's latency.
        if message_bytes <= 0:
            return 0.0
        moved = sum(_phase(level, message_bytes, cluster, eff, passes, latency=False) for level in group.levels)
        return moved + passes * (group.size - 1) * cluster.tiers[group.outermost_tier].latency

    def flat(message_bytes: float) -> float:
        ring = Level(group.outermost_tier, group.size, 1, group.size)
        return _phase(ring, message_bytes, cluster, eff, passes)

    if not group.levels:
        return [hierarchical]
    if kind != "all_reduce":
        return [hierarchical, flat]

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
    if group.size <= 1 or message_bytes <= 0:
        return 0.0
    tier = group.outermost_tier
    # A tree edge is one link on a full mesh (parties 2).
    bandwidth = _tier_bandwidth(cluster, tier, eff, message_bytes, 2) * eff.tree_bandwidth_factor
    depth = math.ceil(math.log2(group.size))
    return 2.0 * message_bytes / bandwidth + 2.0 * depth * cluster.tiers[tier].latency


def p2p_time(message_bytes: float, tier: int, cluster: Cluster, eff: Efficiency) -> float:
    """Seconds for a point-to-point transfer over ``tier``."""
    if message_bytes <= 0:
        return 0.0
    return message_bytes / _tier_bandwidth(cluster, tier, eff, message_bytes, 2) + cluster.tiers[tier].latency

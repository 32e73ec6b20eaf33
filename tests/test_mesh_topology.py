"""Full-mesh tiers (HCCS in an 8-NPU Atlas 800T A2 node): a group drives only the links to its peers."""

from __future__ import annotations

import pytest

from windtunnel.cost.collectives import collective_time, p2p_time, place_group, tier_bandwidth
from windtunnel.cost.efficiency import efficiency_for
from windtunnel.specs.hardware import load_hardware

MESSAGE = 512 * 2**20  # bytes: large enough that latency and the small-message curve do not matter


def _atlas(devices: int = 8):
    cluster = load_hardware("atlas-800t-a2", devices)
    return cluster, efficiency_for(cluster.chip)


def test_mesh_bandwidth_grows_with_the_parties_and_switched_tiers_do_not_care():
    cluster, eff = _atlas()
    assert cluster.tiers[0].topology == "mesh"
    full = tier_bandwidth(cluster, 0, eff)
    assert tier_bandwidth(cluster, 0, eff, parties=8) == pytest.approx(full)
    assert tier_bandwidth(cluster, 0, eff, parties=4) == pytest.approx(full * 3 / 7)
    assert tier_bandwidth(cluster, 0, eff, parties=2) == pytest.approx(full / 7)
    dgx = load_hardware("dgx-h100", 8)
    assert dgx.tiers[0].topology == "switched"
    h100 = efficiency_for(dgx.chip)
    assert tier_bandwidth(dgx, 0, h100, parties=2) == tier_bandwidth(dgx, 0, h100)


@pytest.mark.parametrize("kind", ["all_reduce", "reduce_scatter", "all_gather", "all_to_all"])
def test_a_four_rank_group_on_the_mesh_is_slower_per_byte_than_the_whole_node(kind):
    """Bus bandwidth: the 8-rank ring moves 7/8 of the buffer over 7 links, the 4-rank one 3/4 over 3."""
    cluster, eff = _atlas()
    eight = collective_time(kind, MESSAGE, place_group("g", 8, 1, cluster), cluster, eff)
    four = collective_time(kind, MESSAGE, place_group("g", 4, 1, cluster), cluster, eff)
    assert four / eight == pytest.approx((3 / 4 / 3) / (7 / 8 / 7), rel=0.05)
    dgx = load_hardware("dgx-h100", 8)
    h100 = efficiency_for(dgx.chip)
    four_switched = collective_time(kind, MESSAGE, place_group("g", 4, 1, dgx), dgx, h100)
    eight_switched = collective_time(kind, MESSAGE, place_group("g", 8, 1, dgx), dgx, h100)
    assert four_switched < eight_switched  # on NVSwitch a smaller group moves less at the same bandwidth


def test_point_to_point_on_the_mesh_uses_one_link():
    cluster, eff = _atlas()
    assert p2p_time(MESSAGE, 0, cluster, eff) == pytest.approx(MESSAGE / (tier_bandwidth(cluster, 0, eff) / 7), rel=0.01)

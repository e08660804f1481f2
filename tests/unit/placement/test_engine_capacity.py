"""The capacity model on hand-computed cases (docs/design.md "Capacity model").

Fabric ``two_spines``: 4 hosts x 8 GPUs per leaf, 400 Gbps per GPU, leaves 2:1.
  leaf downlink = 32 GPUs x 400 = 12800 Gbps, C_leaf = 12800 / 2 = 6400 Gbps
  spine downlink = 64 x 400 = 25600 Gbps, C_spine = 25600 / 1 = 25600 Gbps
  8 GPUs per pod: b = 8 x 400 = 3200 Gbps
"""

from __future__ import annotations

import math

import pytest
from placement_builders import FabricBuilder

from fabricsched import ids
from fabricsched.placement import capacity, patience
from fabricsched.topology import fabric

L1 = (0, ids.DomainName("l1"))
L2 = (0, ids.DomainName("l2"))
S1 = (1, ids.DomainName("s1"))


def hosts(*spec: tuple[str, int]) -> list[ids.NodeName]:
    """("l1", 2) -> two ranks, one on each of l1-h0 and l1-h1."""
    return [ids.NodeName(f"{leaf}-h{i}") for leaf, n in spec for i in range(n)]


def test_demand_of_a_gang_split_over_two_leaves(two_spines: fabric.Fabric) -> None:
    # 8 pods, 4 per leaf: D = n b (P-n)/(P-1) = 4 x 3200 x 4 / 7 = 7314.29 Gbps per leaf;
    # the spine holds all 8 pods: no demand on it.
    demand = capacity.gang_demand(two_spines, hosts(("l1", 4), ("l2", 4)), 8)
    assert demand == pytest.approx({L1: 4 * 3200 * 4 / 7, L2: 4 * 3200 * 4 / 7})


def test_slowdown_of_a_gang_split_over_two_leaves(two_spines: fabric.Fabric) -> None:
    # rho_leaf = 7314.29 / 6400 = 8/7
    assert capacity.comm_slowdown(two_spines, hosts(("l1", 4), ("l2", 4)), 8) == pytest.approx(8 / 7)


def test_slowdown_across_spines_is_the_worst_domain(two_spines: fabric.Fabric) -> None:
    # 12 pods, 4 on each of l1, l2, l3: leaf D = 4 x 3200 x 8/11 = 9309.09, / 6400 = 16/11;
    # spine s1 holds 8: D = 8 x 3200 x 4/11 = 9309.09, / 25600 = 0.36 (not the worst).
    ranks = hosts(("l1", 4), ("l2", 4), ("l3", 4))
    demand = capacity.gang_demand(two_spines, ranks, 8)
    assert demand[S1] == pytest.approx(8 * 3200 * 4 / 11)
    assert capacity.comm_slowdown(two_spines, ranks, 8) == pytest.approx(16 / 11)


def test_running_traffic_adds_to_the_gang_s_own_demand(two_spines: fabric.Fabric) -> None:
    # Another gang of 2 pods, one on l1 and one on l3: D = 1 x 3200 x 1/1 = 3200 on l1, l3, s1, s2.
    traffic = capacity.Traffic()
    traffic.add(two_spines, hosts(("l1", 1)) + hosts(("l3", 1)), 8)
    assert traffic.load[L1] == pytest.approx(3200)
    # Ours on l1+l2: l1 = (3200 + 7314.29) / 6400 = 1/2 + 8/7
    assert capacity.comm_slowdown(two_spines, hosts(("l1", 4), ("l2", 4)), 8, traffic) == pytest.approx(
        0.5 + 8 / 7)


def test_traffic_add_then_remove_leaves_nothing(two_spines: fabric.Fabric) -> None:
    traffic = capacity.Traffic()
    ranks = hosts(("l1", 3), ("l2", 2), ("l3", 2))
    traffic.add(two_spines, ranks, 4)
    copy = traffic.copy()
    traffic.remove(two_spines, ranks, 4)
    assert traffic.load == {}
    assert copy.load, "a copy does not follow the original"


def test_a_degraded_uplink_shrinks_capacity() -> None:
    # l1 uplinks at 0.5: C = 6400 x 0.5 = 3200; D = 7314.29 -> 16/7.
    fab = FabricBuilder().spine("s1").leaf("l1").leaf("l2").degrade("leaf", "l1", 0.5).build()
    ranks = hosts(("l1", 4), ("l2", 4))
    assert capacity.comm_slowdown(fab, ranks, 8) == pytest.approx(16 / 7)
    assert capacity.on_degraded_path(fab, ranks)


def test_a_degraded_host_slows_a_multi_host_gang_by_one_over_its_health() -> None:
    fab = FabricBuilder().spine("s1").leaf("l1").degrade_host("l1-h1", 0.4).build()
    ranks = hosts(("l1", 3))  # inside one leaf: no uplink, only the host term 1 / 0.4
    assert capacity.comm_slowdown(fab, ranks, 8) == pytest.approx(2.5)
    assert capacity.on_degraded_path(fab, ranks)


def test_one_host_gang_has_slowdown_one_even_on_a_degraded_host() -> None:
    fab = FabricBuilder().spine("s1").leaf("l1").degrade_host("l1-h0", 0.4).build()
    ranks = [ids.NodeName("l1-h0")] * 2
    assert capacity.gang_demand(fab, ranks, 4) == {}
    assert capacity.comm_slowdown(fab, ranks, 4) == 1.0
    assert not capacity.on_degraded_path(fab, ranks)


def test_a_gang_inside_a_leaf_with_degraded_uplinks_is_not_on_a_degraded_path() -> None:
    fab = FabricBuilder().spine("s1").leaf("l1").leaf("l2").degrade("leaf", "l1", 0.25).build()
    ranks = hosts(("l1", 4))
    assert not capacity.on_degraded_path(fab, ranks)
    assert capacity.comm_slowdown(fab, ranks, 8) == 1.0


@pytest.mark.parametrize(
    "builder",
    [
        pytest.param(FabricBuilder().spine("s1").leaf("l1").leaf("l2").down("leaf", "l1"),
                     id="a partially spanned leaf whose uplinks are down"),
        pytest.param(FabricBuilder().spine("s1").leaf("l1").leaf("l2").down_host("l1-h0"),
                     id="a down host in a multi-host gang"),
    ],
)
def test_down_element_on_the_path_makes_slowdown_infinite(builder: FabricBuilder) -> None:
    assert math.isinf(capacity.comm_slowdown(builder.build(), hosts(("l1", 4), ("l2", 4)), 8))


def test_health_blind_capacity_ignores_degradation_but_not_down() -> None:
    fab = (FabricBuilder().spine("s1").leaf("l1").leaf("l2")
           .degrade("leaf", "l1", 0.5).down("leaf", "l2").build())
    assert capacity.uplink_capacity_gbps(fab, L1, health_aware=False) == pytest.approx(6400)
    assert capacity.uplink_capacity_gbps(fab, L1) == pytest.approx(3200)
    assert capacity.uplink_capacity_gbps(fab, L2, health_aware=False) == 0


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param(4, 1.0, id="a gang that fits one leaf has floor 1"),
        pytest.param(8, 8 / 7, id="a gang of two whole leaves has floor 8 over 7"),
        pytest.param(17, math.inf, id="a gang larger than the fabric has no floor"),
    ],
)
def test_floor_slowdown_ignores_health(pods: int, expected: float) -> None:
    fab = (FabricBuilder().spine("s1").leaf("l1").leaf("l2").spine("s2").leaf("l3").leaf("l4")
           .degrade("leaf", "l1", 0.1).degrade_host("l2-h0", 0.1).build())
    assert patience.floor_slowdown(fab, pods, 8) == pytest.approx(expected)

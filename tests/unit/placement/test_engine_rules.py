"""The placement rules of docs/design.md, one by one (rules 1, 2 and 4, required tiers, NoFit)."""

from __future__ import annotations

import math

import pytest
from placement_builders import FabricBuilder, all_free, gang, per_host

from fabricsched import ids
from fabricsched.placement import capacity, placing, request, snapshot
from fabricsched.topology import fabric

BLIND = request.PlacementOptions(health_aware=False)


def plan_of(result: request.Plan | request.NoFit) -> request.Plan:
    assert isinstance(result, request.Plan), result
    return result


def leaves_of(fab: fabric.Fabric, plan: request.Plan) -> set[str]:
    return {fab.hosts[n].path[0] for n in plan.ranks}


# --- Rule 1: no degraded element on the path when a healthy placement exists -------------------------

def test_gang_avoids_a_leaf_with_degraded_uplinks_when_it_spans_leaves() -> None:
    # 6 pods need two leaves; s1 = l1 (degraded uplinks) + l2, s2 = l3 + l4.
    fab = (FabricBuilder().spine("s1").leaf("l1").leaf("l2").spine("s2").leaf("l3").leaf("l4")
           .degrade("leaf", "l1").build())
    plan = plan_of(placing.place(snapshot.build(fab), all_free(fab), gang(6)))
    assert leaves_of(fab, plan) == {"l3", "l4"}
    assert not plan.degraded_path
    assert "avoided leaf l1: uplinks degraded" in plan.reasons


def test_gang_that_fits_a_leaf_with_degraded_uplinks_may_use_it() -> None:
    # Its traffic never leaves the leaf, so the uplinks are not on its path.
    fab = FabricBuilder().spine("s1").leaf("l1").leaf("l2").degrade("leaf", "l1", 0.1).build()
    free = all_free(fab, {"l2-h0": 8})  # best fit would pick l1 anyway: l2 has less room, l1 is whole
    plan = plan_of(placing.place(snapshot.build(fab), free, gang(4)))
    assert leaves_of(fab, plan) == {"l1"}
    assert plan.reasons == ("fits leaf l1",)
    assert not plan.degraded_path and plan.comm_slowdown == 1.0


def test_gang_avoids_a_degraded_host_inside_a_leaf() -> None:
    fab = FabricBuilder().spine("s1").leaf("l1", hosts=5).leaf("l2", hosts=5).degrade_host("l1-h2").build()
    plan = plan_of(placing.place(snapshot.build(fab), all_free(fab), gang(4)))
    assert "l1-h2" not in plan.ranks
    assert not plan.degraded_path


def test_rule_one_outranks_rule_two_healthy_spine_beats_degraded_leaf() -> None:
    # Only l1 holds 4 pods alone, but one of its hosts is degraded: two leaves, all healthy, win.
    fab = (FabricBuilder().spine("s1").leaf("l1", hosts=4).leaf("l2", hosts=2).leaf("l3", hosts=2)
           .degrade_host("l1-h0").build())
    plan = plan_of(placing.place(snapshot.build(fab), all_free(fab), gang(4)))
    assert plan.tier == 1
    assert "l1-h0" not in plan.ranks
    assert not plan.degraded_path
    assert "a lower tier (leaf) would hold it only across degraded elements" in plan.reasons
    assert "avoided host l1-h0: link degraded" in plan.reasons


def test_no_healthy_placement_places_now_on_lowest_slowdown_and_says_so() -> None:
    # One leaf of two hosts, one at half capacity: the gang needs both.
    fab = FabricBuilder(tiers=[("leaf", 2.0)]).leaf("l1", hosts=2).degrade_host("l1-h1", 0.5).build()
    plan = plan_of(placing.place(snapshot.build(fab), all_free(fab), gang(2)))
    assert plan.degraded_path
    assert plan.comm_slowdown == pytest.approx(2.0)
    assert plan.reasons[0] == (
        "no healthy placement: placed on lowest comm_slowdown 2.00 (host l1-h1 link degraded)")


def test_fallback_prefers_a_slightly_degraded_uplink_to_a_badly_degraded_host() -> None:
    # Whole leaves hold 4 pods only with a degraded host (1/0.5 = 2, 1/0.25 = 4). Spanning both
    # leaves avoids the hosts but crosses uplinks at 0.9: 2 pods per leaf,
    # D = 2 x 3200 x 2/3 = 4266.7 Gbps over C = 6400 x 0.9 = 5760: rho 0.74 -> slowdown 1.
    fab = (FabricBuilder(tiers=[("leaf", 2.0)]).leaf("l1").leaf("l2")
           .degrade_host("l1-h0", 0.5).degrade_host("l2-h0", 0.25)
           .degrade("leaf", "l1", 0.9).degrade("leaf", "l2", 0.9).build())
    plan = plan_of(placing.place(snapshot.build(fab), all_free(fab), gang(4)))
    assert plan.comm_slowdown == pytest.approx(1.0)
    assert plan.degraded_path
    assert not {"l1-h0", "l2-h0"} & set(plan.ranks)
    assert plan.reasons[0].startswith("no healthy placement: placed on lowest comm_slowdown 1.00")


@pytest.mark.parametrize(
    ("builder", "pods"),
    [
        pytest.param(FabricBuilder(tiers=[("leaf", 2.0)]).leaf("l1").down_host("l1-h3"), 4,
                     id="a leaf whose only room for the gang includes a down host"),
        pytest.param(FabricBuilder().spine("s1").leaf("l1").leaf("l2").down("leaf", "l2"), 6,
                     id="two leaves, one with its uplinks down"),
    ],
)
@pytest.mark.parametrize("options", [request.PlacementOptions(), BLIND], ids=["health-aware", "health-blind"])
def test_never_a_down_element_for_a_multi_host_gang(
    builder: FabricBuilder, pods: int, options: request.PlacementOptions
) -> None:
    fab = builder.build()
    result = placing.place(snapshot.build(fab), all_free(fab), gang(pods), options=options)
    assert isinstance(result, request.NoFit)
    assert not result.unresolvable, "down elements recover: the gang may fit later"
    assert result.reason.endswith("(it would fit only on down elements)")


def test_health_blind_uses_degraded_elements_like_healthy_ones() -> None:
    fab = (FabricBuilder().spine("s1").leaf("l1").leaf("l2").spine("s2").leaf("l3").leaf("l4")
           .degrade("leaf", "l1").build())
    plan = plan_of(placing.place(snapshot.build(fab), all_free(fab), gang(6), options=BLIND))
    assert "l1" in leaves_of(fab, plan)
    assert plan.degraded_path, "the plan reports the true path health even when blind"


# --- Rule 2: lowest tier first, fewest domains, lowest slowdown, best fit ----------------------------

@pytest.mark.parametrize(
    ("pods", "tier", "leaves", "why"),
    [
        pytest.param(4, 0, 1, "fits leaf l1", id="a gang that fits one leaf goes in one leaf"),
        pytest.param(7, 1, 2, "fits 2 leaves under spine s1",
                     id="otherwise the fewest leaves under one spine"),
        pytest.param(10, 2, 3, "spans 2 spines", id="otherwise it spans spines"),
    ],
)
def test_lowest_tier_first(two_spines: fabric.Fabric, pods: int, tier: int, leaves: int, why: str) -> None:
    plan = plan_of(placing.place(snapshot.build(two_spines), all_free(two_spines), gang(pods)))
    assert plan.tier == tier
    assert len(leaves_of(two_spines, plan)) == leaves
    assert plan.reasons[0] == why


def test_best_fit_takes_the_leaf_with_least_room_left() -> None:
    fab = FabricBuilder().spine("s1").leaf("l1", hosts=8).leaf("l2", hosts=5).leaf("l3", hosts=6).build()
    plan = plan_of(placing.place(snapshot.build(fab), all_free(fab), gang(5)))
    assert leaves_of(fab, plan) == {"l2"}


def test_best_fit_inside_a_spine_fills_the_largest_leaf_and_the_tightest_rest() -> None:
    # 9 pods: l1 holds 6 whole; the other 3 go to l3 (exactly 3 left), not l2 (5 left).
    fab = FabricBuilder().spine("s1").leaf("l1", hosts=6).leaf("l2", hosts=5).leaf("l3", hosts=3).build()
    plan = plan_of(placing.place(snapshot.build(fab), all_free(fab), gang(9)))
    assert leaves_of(fab, plan) == {"l1", "l3"}


def test_quiet_uplinks_win_between_spines_at_the_same_tier(two_spines: fabric.Fabric) -> None:
    traffic = capacity.Traffic()
    busy = [ids.NodeName("l1-h0"), ids.NodeName("l3-h0")]  # loads l1, l3 and both spines alike
    traffic.add(two_spines, busy, 8)
    traffic.add(two_spines, [ids.NodeName("l1-h1"), ids.NodeName("l2-h1")], 8)  # and s1's leaves more
    free = all_free(two_spines, {"l1-h0": 8, "l3-h0": 8, "l1-h1": 8, "l2-h1": 8})
    plan = plan_of(placing.place(snapshot.build(two_spines), free, gang(5), traffic))
    assert leaves_of(two_spines, plan) == {"l3", "l4"}
    expected = capacity.comm_slowdown(two_spines, plan.ranks, 8, traffic)
    assert plan.comm_slowdown == pytest.approx(expected)


def test_fewest_domains_beats_lower_slowdown() -> None:
    # s1 holds the gang in 2 leaves (loaded uplinks), s2 needs 3 quiet leaves: 2 leaves win.
    fab = (FabricBuilder().spine("s1").leaf("l1").leaf("l2")
           .spine("s2").leaf("l3", hosts=2).leaf("l4", hosts=2).leaf("l5", hosts=2).build())
    traffic = capacity.Traffic()
    traffic.add(fab, [ids.NodeName("l1-h0"), ids.NodeName("l3-h0")], 1)
    plan = plan_of(placing.place(snapshot.build(fab), all_free(fab), gang(6), traffic))
    assert leaves_of(fab, plan) == {"l1", "l2"}


def test_a_preferred_tier_that_cannot_hold_the_gang_is_noted(two_spines: fabric.Fabric) -> None:
    plan = plan_of(placing.place(snapshot.build(two_spines), all_free(two_spines), gang(6, tier=0)))
    assert plan.tier == 1
    assert "preferred tier leaf: no single leaf holds it now" in plan.reasons


def test_three_tiers_fewest_spines_under_one_core() -> None:
    fab = (FabricBuilder(tiers=[("leaf", 2.0), ("spine", 2.0), ("core", 1.0)])
           .core("c1").spine("s1").leaf("l1").leaf("l2").spine("s2").leaf("l3")
           .core("c2").spine("s3").leaf("l4").build())
    plan = plan_of(placing.place(snapshot.build(fab), all_free(fab), gang(10)))
    assert plan.tier == 2
    assert plan.domains[2] == ("c1",)
    assert plan.reasons[0] == "fits 2 spines under core c1"


def test_a_fabric_without_tiers_still_places_gangs() -> None:
    fab = FabricBuilder(tiers=[]).host("a").host("b").build()
    plan = plan_of(placing.place(snapshot.build(fab), all_free(fab), gang(2)))
    assert sorted(plan.ranks) == ["a", "b"]
    assert plan.tier == 0


# --- Rule 4: ranks follow the fabric ------------------------------------------------------------------

def test_consecutive_ranks_share_a_host_then_a_leaf_then_a_spine(two_spines: fabric.Fabric) -> None:
    free = all_free(two_spines, {"l1-h0": 4, "l3-h2": 4})  # 4-GPU pods: two per host
    plan = plan_of(placing.place(snapshot.build(two_spines), free, gang(20, gpus=4)))
    for depth in (lambda n: n, lambda n: two_spines.hosts[n].path[0], lambda n: two_spines.hosts[n].path[1]):
        keys = [depth(n) for n in plan.ranks]
        runs = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
        assert len(runs) == len(set(runs)), f"ranks interleave: {keys}"


# --- Required tier and NoFit ----------------------------------------------------------------------------

def test_required_tier_places_inside_one_domain_of_it(two_spines: fabric.Fabric) -> None:
    snap = snapshot.build(two_spines)
    plan = plan_of(placing.place(snap, all_free(two_spines), gang(7, tier=1, required=True)))
    assert len(plan.domains[1]) == 1


def test_required_tier_still_prefers_one_host() -> None:
    fab = FabricBuilder().spine("s1").leaf("l1", hosts=2).build()
    plan = plan_of(placing.place(snapshot.build(fab), all_free(fab), gang(2, gpus=4, tier=0, required=True)))
    assert plan.tier is None and len(set(plan.ranks)) == 1


def test_required_tier_busy_now_is_a_nofit_that_may_resolve(two_spines: fabric.Fabric) -> None:
    free = all_free(two_spines, {f"l{i}-h0": 8 for i in range(1, 5)})
    result = placing.place(snapshot.build(two_spines), free, gang(4, tier=0, required=True))
    assert isinstance(result, request.NoFit) and not result.unresolvable
    assert result.reason == (
        "required tier leaf: no leaf has room for 4 pods of 8 GPUs now (most: l1 with room for 3)")


def test_required_tier_that_no_domain_could_ever_hold_is_unresolvable(two_spines: fabric.Fabric) -> None:
    result = placing.place(snapshot.build(two_spines), all_free(two_spines), gang(5, tier=0, required=True))
    assert isinstance(result, request.NoFit) and result.unresolvable
    assert result.reason == (
        "required tier leaf: no leaf could ever hold 5 pods of 8 GPUs (largest, l1, holds 4 when empty)")


@pytest.mark.parametrize(
    ("pods", "gpus", "reason"),
    [
        pytest.param(17, 8, "the fabric could never hold 17 pods of 8 GPUs (room for 16 when empty)",
                     id="more pods than the empty fabric holds"),
        pytest.param(1, 16, "no host has 16 GPUs (largest: 8)", id="a pod larger than any host"),
    ],
)
def test_gangs_that_could_never_fit_are_unresolvable(
    two_spines: fabric.Fabric, pods: int, gpus: int, reason: str
) -> None:
    result = placing.place(snapshot.build(two_spines), all_free(two_spines), gang(pods, gpus))
    assert result == request.NoFit(reason, unresolvable=True)


def test_candidates_restrict_the_hosts(two_spines: fabric.Fabric) -> None:
    allowed = [ids.NodeName(n) for n in ("l2-h1", "l2-h3", "l4-h0")]
    snap = snapshot.build(two_spines)
    plan = plan_of(placing.place(snap, all_free(two_spines), gang(3), candidates=allowed))
    assert sorted(plan.ranks) == sorted(allowed)
    result = placing.place(snapshot.build(two_spines), all_free(two_spines), gang(4), candidates=allowed)
    assert result == request.NoFit("room for 3 of 4 pods of 8 GPUs on 3 candidate hosts")


def test_over_reserved_hosts_have_no_room(two_spines: fabric.Fabric) -> None:
    free = all_free(two_spines)
    free[ids.NodeName("l1-h0")] = -8
    plan = plan_of(placing.place(snapshot.build(two_spines), free, gang(4)))
    assert "l1-h0" not in plan.ranks and per_host(plan.ranks)


def test_slowdown_above_one_is_explained(two_spines: fabric.Fabric) -> None:
    plan = plan_of(placing.place(snapshot.build(two_spines), all_free(two_spines), gang(8)))
    assert plan.comm_slowdown == pytest.approx(8 / 7)
    assert "comm_slowdown 1.14: uplink load on leaf l1" in plan.reasons
    assert not math.isinf(plan.comm_slowdown)

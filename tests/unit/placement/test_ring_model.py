"""The ring traffic pattern of the capacity model on hand-computed cases (docs/model.md).

A ring: rank i sends b to rank i + 1 and the last rank to rank 0; consecutive ranks on one host
cost nothing. A domain's demand is b x the ring edges leaving it (as many as enter it: C_d and
the all-to-all D are one direction's, so is this).

Fabric ``two_spines``: 4 hosts x 8 GPUs per leaf, 400 Gbps per GPU, leaves 2:1, so
C_leaf = 32 x 400 / 2 = 6400 Gbps; 8 GPUs per pod: b = 3200 Gbps.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_builders import FabricBuilder, all_free

from fabricsched import ids
from fabricsched.placement import capacity, placing, ranks, request, snapshot
from fabricsched.topology import fabric

RING = capacity.RING
L1 = (0, ids.DomainName("l1"))
L2 = (0, ids.DomainName("l2"))


def nodes(*names: str) -> list[ids.NodeName]:
    return [ids.NodeName(n) for n in names]


def test_a_ring_in_one_leaf_costs_nothing(two_spines: fabric.Fabric) -> None:
    ring = nodes("l1-h0", "l1-h1", "l1-h2", "l1-h3")
    assert capacity.gang_demand(two_spines, ring, 8, RING) == {}
    assert capacity.comm_slowdown(two_spines, ring, 8, pattern=RING) == 1.0


def test_consecutive_ranks_on_one_host_cost_nothing(two_spines: fabric.Fabric) -> None:
    # 4 ranks on two hosts of two leaves, two per host: only l1-h0 -> l2-h0 and l2-h0 -> l1-h0
    # cross, one edge out of each leaf: D = b = 4 x 400 = 1600 Gbps each.
    ring = nodes("l1-h0", "l1-h0", "l2-h0", "l2-h0")
    assert capacity.gang_demand(two_spines, ring, 4, RING) == pytest.approx({L1: 1600, L2: 1600})


def test_a_ring_over_two_leaves_crosses_one_edge_each_way(two_spines: fabric.Fabric) -> None:
    # 8 pods, 4 per leaf in rank order: l1-h3 -> l2-h0 leaves l1, l2-h3 -> l1-h0 leaves l2.
    # D = 3200 per leaf, rho = 3200 / 6400 = 0.5: slowdown 1.0 (all-to-all: 4 x 3200 x 4/7 / 6400 = 8/7).
    ring = nodes(*(f"l1-h{i}" for i in range(4)), *(f"l2-h{i}" for i in range(4)))
    assert capacity.gang_demand(two_spines, ring, 8, RING) == pytest.approx({L1: 3200, L2: 3200})
    assert capacity.comm_slowdown(two_spines, ring, 8, pattern=RING) == 1.0
    assert capacity.comm_slowdown(two_spines, ring, 8) == pytest.approx(8 / 7)


def test_two_rings_sharing_the_uplinks_of_two_2_to_1_leaves() -> None:
    # Leaves of 2 hosts x 8 GPUs, 2:1: C_leaf = 16 x 400 / 2 = 3200 Gbps.
    fab = FabricBuilder().spine("s1").leaf("l1", hosts=2).leaf("l2", hosts=2).build()
    # Rings A and B of 4 pods x 4 GPUs (b = 1600), each on l1-h0, l1-h1, l2-h0, l2-h1 (both fit:
    # each host has 8 GPUs). A alone: one edge out of each leaf, 1600 / 3200 = 0.5.
    a = nodes("l1-h0", "l1-h1", "l2-h0", "l2-h1")
    running = capacity.Traffic()
    running.add(fab, a, 4, RING)
    assert running.load == pytest.approx({L1: 1600, L2: 1600})
    # B with A running: (1600 + 1600) / 3200 = 1.0. All-to-all, each gang would offer
    # 2 x 1600 x 2/3 = 2133 per leaf: (2133 + 2133) / 3200 = 4/3.
    assert capacity.comm_slowdown(fab, a, 4, running, pattern=RING) == pytest.approx(1.0)
    both = capacity.Traffic()
    both.add(fab, a, 4)
    assert capacity.comm_slowdown(fab, a, 4, both) == pytest.approx(4 / 3)
    # Rings of 2 pods x 8 GPUs (b = 3200), where both patterns offer b per leaf:
    # A' = l1-h0, l2-h0 alone: 3200 / 3200 = 1.0; B' = l1-h1, l2-h1 beside it: 6400 / 3200 = 2.0.
    pair = capacity.Traffic()
    pair.add(fab, nodes("l1-h0", "l2-h0"), 8, RING)
    assert capacity.comm_slowdown(fab, nodes("l1-h0", "l2-h0"), 8, pattern=RING) == pytest.approx(1.0)
    assert capacity.comm_slowdown(fab, nodes("l1-h1", "l2-h1"), 8, pair, pattern=RING) == pytest.approx(2.0)
    # Once A' ends, B' is alone again.
    pair.remove(fab, nodes("l1-h0", "l2-h0"), 8, RING)
    assert not pair


def test_a_scrambled_rank_order_costs_more(two_spines: fabric.Fabric) -> None:
    # The same 8 hosts, ranks alternating between the leaves: all 8 edges cross, 4 out of each
    # leaf: D = 4 x 3200 = 12800, rho = 2.0 (fabric order: 0.5, so 1.0; all-to-all: 8/7).
    scrambled = nodes(*(h for i in range(4) for h in (f"l1-h{i}", f"l2-h{i}")))
    assert capacity.gang_demand(two_spines, scrambled, 8, RING) == pytest.approx({L1: 12800, L2: 12800})
    assert capacity.comm_slowdown(two_spines, scrambled, 8, pattern=RING) == pytest.approx(2.0)
    ordered = ranks.order(two_spines, {ids.NodeName(n): 1 for n in scrambled})
    assert capacity.comm_slowdown(two_spines, ordered, 8, pattern=RING) == 1.0
    # Scrambled, a ring may offer more than all-to-all would (12800 against 7314).
    assert capacity.gang_demand(two_spines, scrambled, 8)[L1] == pytest.approx(4 * 3200 * 4 / 7)


def test_the_engine_prices_and_places_a_ring_by_its_pattern(two_spines: fabric.Fabric) -> None:
    snap = snapshot.build(two_spines)
    ring = request.GangRequest(ids.GangKey("r"), 8, 8, pattern=RING)
    plan = placing.place(snap, all_free(two_spines), ring)
    assert isinstance(plan, request.Plan)
    assert plan.comm_slowdown == 1.0 and set(plan.domains[0]) == {"l1", "l2"}
    a2a = placing.place(snap, all_free(two_spines), request.GangRequest(ids.GangKey("a"), 8, 8))
    assert isinstance(a2a, request.Plan) and a2a.comm_slowdown == pytest.approx(8 / 7)


def test_the_engine_steers_a_ring_to_quiet_uplinks() -> None:
    # Leaves of 2 hosts x 8 GPUs (C_leaf 3200) under one spine; a running ring of 2 pods x 8 GPUs
    # on l1-h0 and l2-h0 loads l1 and l2 with 3200 each. A ring of 6 pods x 4 GPUs (b = 1600)
    # needs two leaves; the tightest fit would take l1's or l2's free host ((3200 + 1600) / 3200
    # = 1.5); the quiet l3 + l4 give 1600 / 3200, so 1.0.
    fab = FabricBuilder().spine("s1").leaf("l1", hosts=2).leaf("l2", hosts=2).leaf("l3", hosts=2) \
        .leaf("l4", hosts=2).build()
    running = capacity.Traffic()
    running.add(fab, nodes("l1-h0", "l2-h0"), 8, RING)
    free = all_free(fab, {"l1-h0": 8, "l2-h0": 8})
    snap, ring = snapshot.build(fab), request.GangRequest(ids.GangKey("r"), 6, 4, pattern=RING)
    blind = placing.place(snap, free, ring)
    assert isinstance(blind, request.Plan) and {"l1", "l2"} & set(blind.domains[0])
    plan = placing.place(snap, free, ring, running)
    assert isinstance(plan, request.Plan)
    assert set(plan.domains[0]) == {"l3", "l4"} and plan.comm_slowdown == 1.0


def test_gang_on_takes_the_fabric_default_unless_the_gang_names_one(two_spines: fabric.Fabric) -> None:
    ringed = dataclasses.replace(two_spines, traffic=RING)
    key = ids.GangKey("g")
    cases = ((two_spines, None, capacity.ALL_TO_ALL), (ringed, None, RING),
             (ringed, capacity.ALL_TO_ALL, capacity.ALL_TO_ALL), (two_spines, RING, RING))
    for fab, named, expected in cases:
        asked = request.gang_on(fab, key, 8, 8, None, False, pattern=named)
        assert isinstance(asked, request.GangRequest) and asked.pattern == expected


@st.composite
def _contiguous_gangs(draw: st.DrawFn) -> tuple[fabric.Fabric, list[ids.NodeName]]:
    """A random two- or three-tier fabric and a gang on it in an order contiguous in every
    domain: the engine's fabric order, then rotated and maybe reversed (still contiguous on a
    ring), with the subtrees' order shuffled at random."""
    three = draw(st.booleans())
    tiers = (("leaf", 2.0), ("spine", 2.0), ("core", 1.0)) if three else (("leaf", 2.0), ("spine", 1.0))
    builder = FabricBuilder(tiers=tiers)
    for c in range(draw(st.integers(1, 2)) if three else 1):
        if three:
            builder.core(f"c{c}")
        for s in range(draw(st.integers(1, 3))):
            builder.spine(f"c{c}s{s}")
            for leaf in range(draw(st.integers(1, 3))):
                builder.leaf(f"c{c}s{s}l{leaf}", hosts=draw(st.integers(1, 3)))
    fab = builder.build()
    names = sorted(fab.hosts)
    counts = {n: c for n in names if (c := draw(st.integers(0, 3)))}
    if sum(counts.values()) < 2:
        counts = {names[0]: 2}
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    salt = {d: rng.random() for h in fab.hosts.values() for d in h.path} | {n: rng.random() for n in names}
    order = sorted(counts, key=lambda n: (tuple(salt[d] for d in reversed(fab.hosts[n].path)), salt[n]))
    gang = [n for n in order for _ in range(counts[n])]
    shift = draw(st.integers(0, len(gang) - 1))
    gang = gang[shift:] + gang[:shift]
    return fab, gang[::-1] if draw(st.booleans()) else gang


@settings(max_examples=300, deadline=None)
@given(_contiguous_gangs(), st.sampled_from([1, 2, 4, 8]))
def test_a_contiguous_ring_never_offers_more_than_all_to_all(
    drawn: tuple[fabric.Fabric, list[ids.NodeName]], gpus_per_pod: int
) -> None:
    fab, gang = drawn
    ring = capacity.gang_demand(fab, gang, gpus_per_pod, RING)
    a2a = capacity.gang_demand(fab, gang, gpus_per_pod)
    assert set(ring) == set(a2a)  # the same domains spanned in part
    for key, gbps in ring.items():
        # One edge out: b; all-to-all n b (P - n) / (P - 1) >= b whenever 0 < n < P.
        assert gbps == pytest.approx(capacity.pod_bandwidth_gbps(fab, gpus_per_pod))
        assert gbps <= a2a[key] + 1e-6
    assert capacity.comm_slowdown(fab, gang, gpus_per_pod, pattern=RING) <= \
        capacity.comm_slowdown(fab, gang, gpus_per_pod) + 1e-9

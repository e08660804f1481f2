"""The path query (elements a gang's traffic crosses) and the element -> gangs index."""

from __future__ import annotations

from builders import make_node, make_topology, topograph_tiers
from fabricsched import ids
from fabricsched.controller import state as cluster_state
from fabricsched.placement import path
from fabricsched.topology import fabric, health
from timing import Clock

N = ids.NodeName


def small_fabric() -> fabric.Fabric:
    state = cluster_state.ClusterState(Clock())
    for spine, leaves in {"s1": ("l1", "l2"), "s2": ("l3",)}.items():
        for leaf in leaves:
            for i in range(2):
                state.apply_node(make_node(f"{leaf}-h{i}").leaf(leaf).spine(spine).gpus(8).build())
    spec = make_topology(topograph_tiers(2)).to_wire()
    state.apply_topology("t", {"metadata": {"name": "t", "generation": 1}, "spec": spec})
    snapshot = state.snapshot(ids.TopologyName("t"))
    assert snapshot is not None
    return snapshot.fabric


def test_a_single_host_gang_crosses_no_fabric_element() -> None:
    assert path.elements(small_fabric(), [N("l1-h0")] * 8) == frozenset()


def test_a_gang_inside_one_leaf_crosses_its_hosts_links_but_no_uplink() -> None:
    found = path.elements(small_fabric(), [N("l1-h0"), N("l1-h1")])
    assert found == {("node", None, "l1-h0"), ("node", None, "l1-h1")}


def test_a_gang_over_two_leaves_crosses_both_leaves_uplinks_not_their_common_spine() -> None:
    found = path.elements(small_fabric(), [N("l1-h0"), N("l2-h0")])
    assert ("domain", "leaf", "l1") in found and ("domain", "leaf", "l2") in found
    assert ("domain", "spine", "s1") not in found


def test_a_gang_over_two_spines_crosses_the_spines_uplinks() -> None:
    found = path.elements(small_fabric(), [N("l1-h0"), N("l3-h0")])
    assert {("domain", "spine", "s1"), ("domain", "spine", "s2")} <= found


def test_a_rail_of_an_element_is_on_the_path_of_the_element() -> None:
    found = path.elements(small_fabric(), [N("l1-h0"), N("l1-h1")])
    assert path.on_path(found, health.ElementId.node("l1-h0", rail=3))
    assert not path.on_path(found, health.ElementId.node("l2-h0"))


def test_hosts_that_left_the_fabric_are_left_out() -> None:
    assert path.elements(small_fabric(), [N("gone"), N("l1-h0")]) == frozenset()


def test_the_index_finds_the_gangs_of_an_element_and_forgets_replaced_paths() -> None:
    index = path.PathIndex()
    t = ids.TopologyName("t")
    a, b = ids.GangKey("ns/a"), ids.GangKey("ns/b")
    index.put(a, t, frozenset({("node", None, "h1"), ("domain", "leaf", "l1")}))
    index.put(b, t, frozenset({("domain", "leaf", "l1")}))
    assert index.gangs_on(t, ("domain", "leaf", "l1")) == {a, b}
    index.put(a, t, frozenset({("node", None, "h2")}))
    assert index.gangs_on(t, ("node", None, "h1")) == frozenset()
    assert index.gangs_on(t, ("domain", "leaf", "l1")) == {b}
    index.drop(b)
    assert index.gangs_on(t, ("domain", "leaf", "l1")) == frozenset()
    assert index.gangs_on(ids.TopologyName("other"), ("node", None, "h2")) == frozenset()
    assert len(index) == 1

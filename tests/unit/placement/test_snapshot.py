"""The engine's snapshot: built by the caller, its tree kept across health-only changes."""

from __future__ import annotations

from placement_builders import gang

import builders
from fabricsched import ids
from fabricsched.placement import placing, request, session, snapshot
from fabricsched.topology import fabric, health, index


def _index() -> index.FabricIndex:
    built = index.FabricIndex(builders.make_topology(builders.topograph_tiers(2)))
    for leaf in ("l1", "l2"):
        for i in range(2):
            built.set_node(builders.make_node(f"{leaf}-h{i}").leaf(leaf).spine("s1").gpus(8).info())
    return built


def _degraded(node: str) -> health.ElementHealth:
    element = health.ElementId.node(node)
    return health.ElementHealth(element, fabric.HealthState.DEGRADED, 0.5, 0.0, None, ())


def _degrade(built: index.FabricIndex, node: str) -> None:
    built.apply_health({health.ElementId.node(node): _degraded(node)})


def test_a_health_change_keeps_the_tree_and_a_node_change_rebuilds_it() -> None:
    built = _index()
    first = snapshot.build(built.snapshot().fabric)
    _degrade(built, "l1-h0")
    after_health = snapshot.build(built.snapshot().fabric, first)
    assert after_health.fabric is not first.fabric and after_health.tree is first.tree
    assert after_health.fabric.degraded_hosts == ("l1-h0",)
    built.set_node(builders.make_node("l2-h2").leaf("l2").spine("s1").gpus(8).info())
    after_node = snapshot.build(built.snapshot().fabric, after_health)
    assert after_node.tree is not first.tree and "l2-h2" in after_node.tree.order


def test_apply_health_reports_only_real_changes() -> None:
    built = _index()
    record = _degraded("l1-h0")
    element = health.ElementId.node("l1-h0")
    assert built.apply_health({element: record})
    assert not built.apply_health({element: record})
    assert built.apply_health({})
    assert not built.snapshot().fabric.degraded_hosts


def test_a_session_decides_on_the_snapshot_it_keeps_and_answers_like_a_fresh_one() -> None:
    built = _index()
    fab = built.snapshot().fabric
    planner = session.Session()
    free = {name: host.gpus for name, host in fab.hosts.items()}
    kept = planner.snapshot(fab)
    assert planner.snapshot(fab) is kept
    result = planner.place(fab, free, gang(3))
    assert result == placing.place(snapshot.build(fab), free, gang(3))
    assert isinstance(result, request.Plan)
    planner.running.start(ids.GangKey("g"), fab, result.ranks, 8)
    assert planner.running.traffic
    planner.running.end(ids.GangKey("g"), fab)
    assert not planner.running.traffic

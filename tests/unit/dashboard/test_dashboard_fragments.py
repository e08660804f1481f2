"""The rows kept between builds (``fragments``) never go stale: after every change the document
built and serialised with them is byte for byte the one built from nothing, and only the leaves
whose hosts moved are made again."""

from __future__ import annotations

import dataclasses
import json
import random

from dashboard_builders import T0, demo_facts, gang_on, record

from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.cluster import samples
from fabricsched.dashboard import document, fragments, view
from fabricsched.topology import building, fabric, health, nodes


def fresh(snap: view.PageSnapshot) -> bytes:
    return document.dumps(document.build(snap))


def kept(snap: view.PageSnapshot, rows: document.Rows) -> bytes:
    return document.dumps(document.build(snap, rows=rows), rows)


def rebuilt(facts: view.FabricFacts, effective: dict[health.ElementId, health.ElementHealth],
            drop: str = "") -> view.FabricFacts:
    """``facts`` on a fabric built again (a new object) with ``effective`` health, without host ``drop``."""
    spec = api.FabricTopologySpec.model_validate(samples.demo_topology()["spec"])
    infos = [nodes.NodeInfo.from_manifest(m) for m in samples.demo_nodes() if m["metadata"]["name"] != drop]
    fab = building.build_fabric(spec, infos, effective).fabric
    return dataclasses.replace(facts, fabric=fab, health=effective)


def test_only_the_leaf_of_a_host_that_moved_is_made_again() -> None:
    facts = demo_facts()
    rows = document.Rows()
    first = document.build(view.PageSnapshot([facts]), rows=rows)
    moved = dataclasses.replace(facts, free_gpus={**facts.free_gpus, "gpu-001": 0})
    second = document.build(view.PageSnapshot([moved]), rows=rows)
    remade = {a["name"] for a, b in zip(first["fabric"]["hosts"], second["fabric"]["hosts"], strict=True)
              if a is not b}
    leaf = str(facts.fabric.hosts[ids.NodeName("gpu-001")].path[0])
    assert remade == {str(n) for n in facts.fabric.domains[(0, leaf)].hosts}
    assert kept(view.PageSnapshot([moved]), rows) == fresh(view.PageSnapshot([moved]))
    row = b'"name":"gpu-001","leaf":"' + leaf.encode() + b'","gpus":8,"used":8'
    assert row in kept(view.PageSnapshot([moved]), rows)


def test_a_free_map_changed_in_place_still_shows() -> None:
    facts = demo_facts()
    free = dict(facts.free_gpus)
    facts = dataclasses.replace(facts, free_gpus=free)
    rows = document.Rows()
    kept(view.PageSnapshot([facts]), rows)
    free["gpu-003"] = 2  # the same map object, one value changed
    assert kept(view.PageSnapshot([facts]), rows) == fresh(view.PageSnapshot([facts]))
    hosts = json.loads(kept(view.PageSnapshot([facts]), rows))["fabric"]["hosts"]
    host = {h["name"]: h for h in hosts}["gpu-003"]
    assert (host["used"], host["free"]) == (6, 2)


def test_health_of_a_host_shows_whether_the_fabric_object_is_new_or_the_same() -> None:
    facts = demo_facts()
    rows = document.Rows()
    kept(view.PageSnapshot([facts]), rows)
    element = health.ElementId.node("gpu-010")
    # A record alone (same fabric object): the host row must carry it.
    flapping = record(element, 0.5, "flap-010")
    with_record = dataclasses.replace(facts, health={**facts.health, element: flapping})
    assert kept(view.PageSnapshot([with_record]), rows) == fresh(view.PageSnapshot([with_record]))
    assert b"flap-010" in kept(view.PageSnapshot([with_record]), rows)
    # A new fabric where the host is down, then healthy again.
    down = health.ElementHealth(element, fabric.HealthState.DOWN, 0.0, T0, None, ())
    for effective in ({**facts.health, element: down}, dict(facts.health)):
        now = rebuilt(facts, effective)
        assert kept(view.PageSnapshot([now]), rows) == fresh(view.PageSnapshot([now]))
    assert b"flap-010" not in kept(view.PageSnapshot([now]), rows)


def test_a_host_gone_leaves_its_leaf_and_the_totals() -> None:
    facts = demo_facts()
    rows = document.Rows()
    kept(view.PageSnapshot([facts]), rows)
    smaller = rebuilt(facts, dict(facts.health), drop="gpu-006")
    body = kept(view.PageSnapshot([smaller]), rows)
    assert body == fresh(view.PageSnapshot([smaller]))
    assert b'"gpu-006"' not in body and json.loads(body)["fabric"]["summary"]["hosts"] == 31


def test_gang_rows_follow_their_facts() -> None:
    facts = demo_facts()
    rows = document.Rows()
    snap = view.PageSnapshot([facts], [gang_on(facts, ["gpu-001", "gpu-002"])])
    kept(snap, rows)
    wider = view.PageSnapshot([facts], [gang_on(facts, ["gpu-001", "gpu-005"])])
    assert kept(wider, rows) == fresh(wider)
    slower = view.PageSnapshot([facts], [dataclasses.replace(wider.gangs[0], slowdown=1.9)])
    assert kept(slower, rows) == fresh(slower) and b'"slowdown":1.9' in kept(slower, rows)
    # On a new fabric object the gang row (its path) is made again from that fabric.
    again = rebuilt(facts, dict(facts.health))
    moved = view.PageSnapshot([again], [dataclasses.replace(slower.gangs[0], topology=again.name)])
    assert kept(moved, rows) == fresh(moved)


def test_random_changes_never_leave_a_stale_fragment() -> None:
    rng = random.Random(14)
    facts = demo_facts()
    names = sorted(facts.fabric.hosts)
    rows = document.Rows()
    gangs: list[view.GangFacts] = []
    for step in range(200):
        kind = rng.randrange(5)
        if kind == 0:
            free = {**facts.free_gpus, rng.choice(names): rng.randrange(9)}
            facts = dataclasses.replace(facts, free_gpus=free)
        elif kind == 1:
            facts = dataclasses.replace(facts, reserved_gpus={rng.choice(names): rng.randrange(9)})
        elif kind == 2:
            leaf = rng.choice([str(n) for t, n in facts.fabric.domains if t == 0])
            element = rng.choice([health.ElementId.node(rng.choice(names)),
                                  health.ElementId.domain("leaf", leaf)])
            effective = dict(facts.health)
            if element in effective:
                del effective[element]
            else:
                effective[element] = record(element, rng.choice([0.25, 0.5]), f"step {step}")
            facts = dataclasses.replace(facts, health=effective) if rng.random() < 0.5 \
                else rebuilt(facts, effective)
        elif kind == 3:
            gangs = [gang_on(facts, rng.sample(names, 2), name=f"g{step}"), *gangs[:3]]
        else:
            facts = rebuilt(facts, dict(facts.health), drop=rng.choice(["", rng.choice(names)]))
        snap = view.PageSnapshot([facts], [g for g in gangs if set(g.hosts) <= set(facts.fabric.hosts)])
        assert kept(snap, rows) == fresh(snap), f"stale after step {step} (change {kind})"


def test_compact_writes_non_finite_numbers_as_null() -> None:
    doc = {"a": 1.5, "b": [float("inf"), {"c": float("nan")}], "d": (2, -float("inf"))}
    assert fragments.compact(doc) == '{"a":1.5,"b":[null,{"c":null}],"d":[2,null]}'
    assert fragments.compact({"a": 1.0}) == '{"a":1.0}'

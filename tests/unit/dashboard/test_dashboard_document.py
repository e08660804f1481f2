"""The page's JSON document: the fabric top tier down, health with reason and since, what a gang
crosses, and selections that name nothing."""

from __future__ import annotations

import dataclasses

import pytest
from dashboard_builders import T0, demo_facts, gang_on, record

from fabricsched.cluster import samples
from fabricsched.dashboard import document, query, view
from fabricsched.topology import health


def by_id(rows: list[dict[str, object]]) -> dict[object, dict[str, object]]:
    """Rows by page id (hosts carry their name only: the page makes ``node:NAME``)."""
    return {r["id"] if "id" in r else f"node:{r['name']}": r for r in rows}


def test_the_fabric_is_drawn_top_tier_first_with_health_reason_and_since() -> None:
    doc = document.build(view.PageSnapshot([demo_facts()]))
    fabric = doc["fabric"]
    assert [d["id"] for d in fabric["domains"][:2]] == ["domain:spine/s1", "domain:spine/s2"]
    leaf = by_id(fabric["domains"])[f"domain:leaf/{samples.DEMO_DEGRADED_LEAF}"]
    assert leaf["health"]["state"] == "degraded" and leaf["health"]["capacity"] == 0.25
    assert leaf["health"]["records"] == [
        {"rail": None, "state": "degraded", "capacity": 0.25,
         "reason": "spec.links: 4 of 16 uplinks flapping", "since": T0}
    ]
    assert leaf["parent"] == "domain:spine/s2" and leaf["hosts"] == 4 and leaf["gpus"] == 32
    hosts = by_id(fabric["hosts"])
    assert len(hosts) == 32
    assert hosts[f"node:{samples.DEMO_DEGRADED_HOST}"]["health"]["state"] == "degraded"
    assert sum(h["health"] is None for h in hosts.values()) == 31  # healthy: left out
    assert fabric["summary"] == {"hosts": 32, "gpus": 256, "used": 0, "reserved": 0, "free": 256,
                                 "degraded": 2, "down": 0}


def test_gpus_are_used_reserved_and_free_per_host_and_summed_per_domain() -> None:
    facts = demo_facts()
    free = {**facts.free_gpus, "gpu-001": 2}
    facts = view.FabricFacts(facts.name, facts.fabric, free, {"gpu-001": 1, "gpu-002": 8}, facts.health)
    doc = document.build(view.PageSnapshot([facts]))
    hosts = by_id(doc["fabric"]["hosts"])
    assert (hosts["node:gpu-001"]["used"], hosts["node:gpu-001"]["reserved"], hosts["node:gpu-001"]["free"]) \
        == (6, 1, 1)
    assert (hosts["node:gpu-002"]["reserved"], hosts["node:gpu-002"]["free"]) == (8, 0)
    leaf = by_id(doc["fabric"]["domains"])[f"domain:leaf/{hosts['node:gpu-001']['leaf']}"]
    assert (leaf["used"], leaf["reserved"], leaf["free"]) == (6, 9, 17)


def test_a_gang_across_two_leaves_crosses_both_leaves_uplinks_and_its_hosts_links() -> None:
    facts = demo_facts()
    doc = document.build(view.PageSnapshot([facts], [gang_on(facts, ["gpu-001", "gpu-005"])]))
    (gang,) = doc["gangs"]
    assert gang["hosts"] == ["gpu-001", "gpu-005"]
    assert gang["uplinks"] == ["domain:leaf/l01", "domain:leaf/l02"]
    assert set(gang["path"]) == {"node:gpu-001", "node:gpu-005", "domain:leaf/l01", "domain:leaf/l02"}
    one_leaf = document.build(view.PageSnapshot([facts], [gang_on(facts, ["gpu-001", "gpu-002"])]))
    assert one_leaf["gangs"][0]["uplinks"] == []


@pytest.mark.parametrize(
    ("selection", "message"),
    [
        (document.Selection(topology="nope"), "no FabricTopology named 'nope'"),
        (document.Selection(gang="team/none"), "no gang named 'team/none'"),
        (document.Selection(namespace="other"), "no gang in namespace 'other'"),
    ],
    ids=["an unknown topology", "an unknown gang", "a namespace without gangs"],
)
def test_a_selection_naming_nothing_gives_an_empty_view_and_a_message(
    selection: document.Selection, message: str
) -> None:
    facts = demo_facts()
    doc = document.build(view.PageSnapshot([facts], [gang_on(facts, ["gpu-001"])]), selection)
    assert doc["gangs"] == [] and doc["messages"] == [message]


def test_a_gang_is_selected_by_key_or_namespace_and_name() -> None:
    facts = demo_facts()
    snap = view.PageSnapshot([facts], [gang_on(facts, ["gpu-001"]), gang_on(facts, ["gpu-002"], "other")])
    named = document.build(snap, document.Selection(gang="team/other"))
    assert [g["name"] for g in named["gangs"]] == ["other"]
    assert len(document.build(snap, document.Selection(gang="team/train@u1"))["gangs"]) == 1


def test_no_topology_yet_is_said() -> None:
    doc = document.build(view.PageSnapshot([]))
    assert doc["fabric"] is None and doc["messages"] == ["no FabricTopology is known to this process yet"]


@pytest.mark.parametrize(
    ("raw", "pairs", "error"),
    [
        ("x=1", [("x", "1")], "unknown query parameter 'x'"),
        ("", [("gang", "a"), ("gang", "b")], "given twice"),
        ("", [("gang", "a" * 601)], "longer than 600"),
        ("", [("gang", "a\x00")], "not printable ASCII"),
        ("", [("gang", "é")], "not printable ASCII"),
        ("q" * 2049, [], "longer than 2048"),
        ("", [("gang", "a"), ("namespace", "b"), ("topology", "c"), ("gang", "d")], "more than 3"),
    ],
    ids=["an unknown key", "a key twice", "a long value", "a NUL", "non-ASCII", "a long query", "too many"],
)
def test_bad_queries_are_refused_with_the_reason(raw: str, pairs: list[tuple[str, str]], error: str) -> None:
    with pytest.raises(query.BadQuery, match=error):
        query.parse(raw, pairs)


def test_a_good_query_is_a_selection() -> None:
    assert query.parse("", [("topology", "ib"), ("gang", "a/b")]) == document.Selection("ib", "", "a/b")


def test_a_rail_of_a_host_has_its_own_record_and_colours_the_host() -> None:
    facts = demo_facts()
    rail = health.ElementId.node("gpu-003", rail=2)
    effective = {**facts.health, rail: record(rail, 0.5, "rail 2 port flapping")}
    railed = view.FabricFacts(facts.name, dataclasses.replace(facts.fabric, rails=4), facts.free_gpus, {},
                              effective)
    doc = document.build(view.PageSnapshot([railed]))
    assert doc["fabric"]["rails"] == 4
    host = next(h for h in doc["fabric"]["hosts"] if h["name"] == "gpu-003")
    assert host["health"]["state"] == "degraded"
    assert [(r["rail"], r["capacity"]) for r in host["health"]["records"]] == [(2, 0.5)]

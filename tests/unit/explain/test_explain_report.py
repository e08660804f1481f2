from __future__ import annotations

from typing import Any

import explain_objects as o
import pytest

from fabricsched.explain import report

HOSTS = ["h1", "h2", "h3", "h4"]
NODES = {
    "h1": o.node("h1", "l1", "s1"),
    "h2": o.node("h2", "l1", "s1"),
    "h3": o.node("h3", "l2", "s1"),
    "h4": o.node("h4", "l2", "s1"),
    "h9": o.node("h9", "l1", "s1"),
}


def explain(
    placement: dict[str, Any],
    degraded: list[dict[str, Any]] | None = None,
    topology: bool = True,
    **kw: Any,
) -> report.Explanation:
    return report.build(
        report.Objects(
            namespace="train",
            name=placement["metadata"]["name"],
            workload=kw.get("workload"),
            placements=[placement],
            topologies={"ib": o.topology(degraded) if topology else None},
            nodes=NODES,
            events=kw.get("events", []),
        )
    )


def test_each_rank_gets_its_leaf_and_spine_from_the_node_labels() -> None:
    gang = explain(o.placement("a", HOSTS)).gangs[0]
    assert [(r.node, r.domains["leaf"], r.domains["spine"]) for r in gang.ranks] == [
        ("h1", "l1", "s1"),
        ("h2", "l1", "s1"),
        ("h3", "l2", "s1"),
        ("h4", "l2", "s1"),
    ]
    assert gang.tiers == ("leaf", "spine") and gang.bound_ranks == 4 and gang.phase == "Bound"


@pytest.mark.parametrize(
    ("hosts", "degraded", "on_path"),
    [
        (HOSTS, [o.degraded_host("h3")], ["h3"]),
        (HOSTS, [o.degraded_host("h9")], []),
        (["h1"], [o.degraded_host("h1")], []),
        (HOSTS, [o.degraded_leaf("l1")], ["leaf/l1"]),
        (["h1", "h2"], [o.degraded_leaf("l1")], []),
        (HOSTS, [{**o.degraded_leaf("s1"), "tier": "spine"}], []),
        (
            HOSTS,
            [o.degraded_host("h2"), o.degraded_leaf("l2"), o.degraded_leaf("l7")],
            ["h2", "leaf/l2"],
        ),
    ],
    ids=[
        "a degraded host of a multi-host gang is on its path",
        "a degraded host outside the gang is not",
        "a single-host gang uses no fabric link",
        "a leaf the gang spans partly: its uplinks are on the path",
        "a leaf that holds the whole gang: its uplinks are not",
        "a spine that holds the whole gang: not on the path",
        "only the elements that touch the gang",
    ],
)
def test_the_unhealthy_path_follows_the_path_rule(
    hosts: list[str], degraded: list[dict[str, Any]], on_path: list[str]
) -> None:
    gang = explain(o.placement("a", hosts), degraded).gangs[0]
    assert [e.name for e in gang.unhealthy] == on_path
    assert gang.unhealthy_count == len(on_path) and gang.path_source == "topology"


def test_an_element_on_the_path_keeps_its_since_and_source() -> None:
    element = (
        explain(o.placement("a", HOSTS), [o.degraded_host("h3", "FabricLinkDegraded")])
        .gangs[0]
        .unhealthy[0]
    )
    assert (
        element.since == "2026-12-01T10:00:00Z"
        and element.state == "degraded"
        and element.capacity == 0.5
    )
    assert [(s.source, s.reason) for s in element.sources] == [("label", "FabricLinkDegraded")]


def test_without_the_live_status_fields_the_slowdown_is_the_one_at_placement() -> None:
    gang = explain(o.placement("a", HOSTS)).gangs[0]
    assert gang.slowdown_at_placement == 1.25 and gang.slowdown_now is None


def test_the_live_status_fields_are_used_when_present() -> None:
    status = {
        "phase": "Bound",
        "commSlowdown": 2.0,
        "commSlowdownAtPlacement": 1.0,
        "degradedPath": True,
        "unhealthyPath": [{**o.degraded_host("h4"), "why": "host link"}],
        "conditions": [
            {
                "type": "PathDegraded",
                "status": "True",
                "reason": "HostDegraded",
                "message": "h4 at 0.5",
                "lastTransitionTime": "2026-12-01T11:00:00Z",
            }
        ],
    }
    gang = explain(o.placement("a", HOSTS, status), [o.degraded_host("h1")]).gangs[0]
    assert (gang.slowdown_now, gang.slowdown_at_placement) == (2.0, 1.0)
    assert [e.name for e in gang.unhealthy] == ["h4"] and gang.path_source == "status"
    assert gang.why == "HostDegraded: h4 at 0.5" and gang.degraded_path is True


def test_a_pending_gang_says_why_from_its_condition() -> None:
    status = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "Reserved",
                "status": "False",
                "reason": "NoFit",
                "message": "needs 7 x 8 GPUs inside one leaf; the largest leaf has 6 hosts, 4 free",
            }
        ],
    }
    gang = explain(o.placement("a", [], status)).gangs[0]
    assert gang.phase == "Pending" and gang.why.startswith("NoFit: needs 7 x 8 GPUs inside one leaf")
    assert gang.ranks == ()


def test_an_unreadable_topology_leaves_the_domains_and_path_unknown() -> None:
    gang = explain(o.placement("a", HOSTS), topology=False).gangs[0]
    assert gang.path_source == "unknown" and gang.tiers == ("leaf", "spine")
    assert all(r.domains == {} for r in gang.ranks)


def test_hostile_strings_are_stripped_of_control_characters_and_cut() -> None:
    status = {"phase": "Bound\x1b[2J", "reasons": ["\x1b]0;pwned\x07" + "x" * 10_000, "a\u202eb\nc"]}
    gang = explain(o.placement("a", HOSTS, status)).gangs[0]
    assert all(len(r) <= 300 for r in gang.reasons) and gang.reasons[0].endswith("...")
    assert "\x1b" not in gang.reasons[0] + gang.phase and "\x07" not in gang.reasons[0]
    assert gang.reasons[1] == "ab c"


def test_wrong_typed_fields_read_as_absent() -> None:
    bad = o.placement(
        "a", HOSTS, {"phase": 3, "commSlowdown": "fast", "reasons": "x", "boundRanks": [True]}
    )
    bad["spec"]["ranks"] = [
        {"rank": "0", "node": "h1"},
        "junk",
        {"rank": 1, "node": ["h2"]},
        {"rank": 2, "node": "h3"},
    ]
    gang = explain(bad).gangs[0]
    assert (
        [r.node for r in gang.ranks] == ["h3"]
        and gang.reasons == ()
        and gang.slowdown_at_placement is None
    )


def test_a_workload_without_a_placement_is_explained_with_a_note() -> None:
    explanation = report.build(
        report.Objects(
            namespace="train",
            name="j",
            workload={"kind": "Job", "apiVersion": "batch/v1", "metadata": {"name": "j", "uid": "u"}},
            placements=[],
            topologies={},
            nodes={},
            events=[o.event("FailedScheduling", "2026-12-01T10:00:00Z")],
        )
    )
    assert (
        explanation.gangs == ()
        and explanation.workload is not None
        and explanation.workload.kind == "Job"
    )
    assert (
        "no FabricPlacement" in explanation.notes[0]
        and explanation.events[0].reason == "FailedScheduling"
    )

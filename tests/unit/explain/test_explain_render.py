from __future__ import annotations

import json

import explain_objects as o
import yaml

from fabricsched.explain import render, report

NODES = {f"h{i}": o.node(f"h{i}", "l1" if i < 3 else "l2", "s1") for i in range(1, 5)}


def explanation(hosts: list[str] | None = None) -> report.Explanation:
    hosts = hosts or ["h1", "h2", "h3", "h4"]
    return report.build(
        report.Objects(
            namespace="train",
            name="a",
            workload=None,
            placements=[o.placement("a", hosts)],
            topologies={"ib": o.topology([o.degraded_host("h3")])},
            nodes=NODES,
            events=[o.event("Planned", "2026-12-01T10:00:00Z", "4 ranks in 2 leaves")],
        )
    )


def test_text_shows_the_phase_the_ranks_the_path_and_the_events() -> None:
    out = render.render(explanation(), "text")
    assert "phase Bound (4/4 ranks bound): fits 2 leaves under spine s1" in out
    assert "RANK  NODE  LEAF  SPINE  BOUND" in out and "2     h3    l2    s1     yes" in out
    assert "host h3  degraded  0.50" in out and "label: symbol errors" in out
    assert "at placement 1.25" in out and "Planned" in out and len(out.splitlines()) < 30


def test_consecutive_ranks_on_one_host_are_one_row() -> None:
    out = render.text(explanation(["h1", "h1", "h1", "h2"]))
    assert "0-2   h1" in out and "3     h2" in out


def test_json_and_yaml_carry_the_same_documented_schema() -> None:
    wire = json.loads(render.render(explanation(), "json"))
    assert wire == yaml.safe_load(render.render(explanation(), "yaml"))
    assert wire["apiVersion"] == "fabricsched.io/v1alpha1" and wire["kind"] == "Explanation"
    gang = wire["gangs"][0]
    assert set(gang) >= {
        "placement",
        "gang",
        "phase",
        "why",
        "reasons",
        "conditions",
        "ranks",
        "commSlowdown",
        "unhealthyPath",
        "tiers",
        "domains",
        "degradedPath",
        "boundRanks",
    }
    assert gang["ranks"][2] == {
        "rank": 2,
        "node": "h3",
        "domains": {"leaf": "l2", "spine": "s1"},
        "bound": True,
    }
    assert gang["commSlowdown"] == {"now": None, "atPlacement": 1.25}
    assert gang["unhealthyPath"]["source"] == "topology" and gang["unhealthyPath"]["count"] == 1
    assert gang["unhealthyPath"]["elements"][0]["sources"] == [
        {"source": "label", "reason": "symbol errors"}
    ]
    assert wire["events"][0]["reason"] == "Planned"


def test_text_event_times_are_whole_seconds_and_json_keeps_them_whole() -> None:
    stamp = "2026-12-01T10:00:00.123456Z"
    built = report.build(
        report.Objects(
            namespace="train",
            name="a",
            workload=None,
            placements=[],
            topologies={},
            nodes={},
            events=[o.event("Scheduled", stamp)],
        )
    )
    assert "2026-12-01T10:00:00Z  Normal  Scheduled" in render.text(built)
    assert json.loads(render.render(built, "json"))["events"][0]["time"] == stamp

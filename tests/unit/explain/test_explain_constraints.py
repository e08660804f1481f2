"""`fabricsched explain` shows every constraint of a gang and whether its plan kept it (issue 31)."""

from __future__ import annotations

import explain_objects as o

from fabricsched.explain import render, report

NODES = {h: o.node(h, leaf, "s1") for h, leaf in (("h1", "l1"), ("h2", "l1"), ("h3", "l2"), ("h4", "l2"))}


def explained(spec: dict[str, object], status: dict[str, object]) -> report.Explanation:
    placement = o.placement("a", ["h1", "h2", "h3", "h4"])
    placement["spec"].update(spec)
    placement["status"].update(status)
    objects = report.Objects(namespace="train", name="a", workload=None, placements=[placement],
                             topologies={"ib": o.topology()}, nodes=NODES, events=[])
    return report.build(objects)


def test_required_preferred_and_slices_are_shown_with_what_held() -> None:
    built = explained(
        {"tier": {"required": "spine", "preferred": "leaf"},
         "slices": {"size": 2, "tier": "leaf", "policy": "required", "domains": ["l1", "l2"]}},
        {"preferredTierHeld": False, "slicesHeld": True})
    gang = built.gangs[0]
    assert gang.constraints == ("required tier spine", "preferred tier leaf: not held",
                                "slices of 2 pods in one leaf (required): held in l1, l2")
    assert (gang.tier, gang.tier_policy) == ("spine", "required")
    text = render.text(built)
    assert "  constraint: slices of 2 pods in one leaf (required): held in l1, l2" in text


def test_an_object_of_the_shape_before_shows_its_one_tier() -> None:
    gang = explained({"tier": {"name": "leaf", "policy": "required"}}, {}).gangs[0]
    assert gang.constraints == ("required tier leaf",)
    assert (gang.tier, gang.tier_policy) == ("leaf", "required")


def test_the_traffic_pattern_is_shown_and_all_to_all_when_the_object_has_none() -> None:
    ring = explained({"traffic": "ring"}, {})
    assert ring.gangs[0].traffic == "ring"
    assert ", traffic ring" in render.text(ring)
    assert render.to_wire(ring)["gangs"][0]["traffic"] == "ring"
    older = explained({}, {})
    assert older.gangs[0].traffic == "all-to-all" and ", traffic all-to-all" in render.text(older)

"""A gang's constraints and preemption in the page's document: what it asked for, what held,
whom it evicted and who evicted it, every list and string bounded."""

from __future__ import annotations

import dataclasses

from dashboard_builders import T0, demo_facts, gang_on

from fabricsched.dashboard import document, view


def test_a_required_spine_with_a_preferred_leaf_and_slices_in_leaves() -> None:
    facts = demo_facts()
    gang = dataclasses.replace(
        gang_on(facts, ["gpu-001", "gpu-002", "gpu-005", "gpu-006"]), tier="spine", required=True,
        preferred_tier="leaf", slices=view.SliceFacts(2, "leaf", True, ("l01", "l02")), priority=1000)
    (row,) = document.build(view.PageSnapshot([facts], [gang]))["gangs"]
    assert row["priority"] == 1000
    assert row["constraints"] == {
        "required": "spine", "preferred": "leaf", "preferredHeld": False,
        "slices": {"size": 2, "tier": "leaf", "required": True, "domains": ["l01", "l02"], "domainsMore": 0},
    }
    assert row["preemption"] is None and row["preemptedBy"] is None


def test_a_preferred_tier_alone_that_held() -> None:
    facts = demo_facts()
    (row,) = document.build(view.PageSnapshot([facts], [gang_on(facts, ["gpu-001", "gpu-002"])]))["gangs"]
    assert row["constraints"] == {"required": None, "preferred": "leaf", "preferredHeld": True,
                                  "slices": None}


def test_the_preemptor_lists_its_victims_and_the_victim_names_its_preemptor() -> None:
    facts = demo_facts()
    victims = tuple(view.VictimFacts("team", f"low-{i}", 100, 8) for i in range(70))
    hold = view.PreemptionFacts(victims, "leaf/l01", T0, T0 + 30)
    preemptor = dataclasses.replace(gang_on(facts, ["gpu-001"], "high"), priority=1000, preemption=hold)
    victim = dataclasses.replace(gang_on(facts, ["gpu-009"], "low-0"), priority=100,
                                 preempted_by=view.PreemptedByFacts("team/high", 1000, "leaf/l01", T0))
    rows = {g["name"]: g for g in document.build(view.PageSnapshot([facts], [preemptor, victim]))["gangs"]}
    shown = rows["high"]["preemption"]
    assert (shown["domain"], shown["at"], shown["clearedAt"]) == ("leaf/l01", T0, T0 + 30)
    assert len(shown["victims"]) == document.MAX_LISTED and shown["victimsMore"] == 70 - document.MAX_LISTED
    assert shown["victims"][0] == {"namespace": "team", "name": "low-0", "priority": 100, "gpus": 8}
    assert rows["low-0"]["preemptedBy"] == {"gang": "team/high", "priority": 1000, "domain": "leaf/l01",
                                            "at": T0}


def test_long_names_from_the_cluster_are_bounded() -> None:
    facts = demo_facts()
    long = "x" * 5000
    gang = dataclasses.replace(
        gang_on(facts, ["gpu-001"]), slices=view.SliceFacts(2, long, False, (long,) * 100),
        preemption=view.PreemptionFacts((view.VictimFacts(long, long, 0, 8),), long, T0))
    (row,) = document.build(view.PageSnapshot([facts], [gang]))["gangs"]
    slices = row["constraints"]["slices"]
    assert len(slices["tier"]) <= document.MAX_NAME and len(slices["domains"]) == document.MAX_LISTED
    assert all(len(d) <= document.MAX_NAME for d in slices["domains"]) and slices["domainsMore"] == 36
    assert len(row["preemption"]["domain"]) <= 2 * document.MAX_NAME + 1
    assert len(row["preemption"]["victims"][0]["name"]) <= document.MAX_NAME

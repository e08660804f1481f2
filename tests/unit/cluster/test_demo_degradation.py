"""The demo's last act picks the widest running job and reports explain before and after."""

from __future__ import annotations

from typing import Any

from fabricsched.cluster import degradation


def placement(name: str, nodes: list[str]) -> dict[str, Any]:
    ranks = [{"rank": r, "node": n} for r, n in enumerate(nodes)]
    return {"metadata": {"name": name}, "spec": {"size": len(nodes), "ranks": ranks}}


def test_the_widest_job_and_its_rank_0_host_are_chosen() -> None:
    placements = [placement("train-4", ["a", "b", "c", "d"]),
                  placement("train-6", ["e", "f", "g", "h", "i", "j"]), placement("eval-1", ["k"])]
    assert degradation.widest(placements) == ("train-6", "e")


def test_of_equals_the_first_wins_and_a_lone_pod_is_never_chosen() -> None:
    assert degradation.widest([placement("a", ["x", "y"]), placement("b", ["z", "w"])]) == ("a", "x")
    assert degradation.widest([placement("eval-1", ["k"])]) is None
    assert degradation.widest([{"metadata": {"name": "planless"}, "spec": {"size": 4, "ranks": []}}]) is None


def test_the_report_shows_both_explains_and_how_to_undo() -> None:
    text = degradation.Degradation("train", "train-6", "h7", "BEFORE\n", "AFTER\n", 1.25).render()
    lines = text.splitlines()
    assert lines.count("$ fabricsched explain train/train-6") == 2
    assert lines.index("BEFORE") < lines.index("AFTER")
    assert "kubectl label node h7 fabricsched.io/fabric-health=degraded" in text
    assert "1.2 s later" in text or "1.3 s later" in text
    assert lines[-1] == "The host stays degraded; undo: kubectl label node h7 fabricsched.io/fabric-health-"

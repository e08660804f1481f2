"""A gang that waits has a Pending FabricPlacement that says why, with the numbers."""

from __future__ import annotations

from typing import Any

from extender_harness import Harness


def reserved_condition(h: Harness, name: str) -> dict[str, Any]:
    status = h.store.get("train", name)["status"]
    return next(c for c in status["conditions"] if c["type"] == "Reserved")


def test_a_required_tier_that_no_leaf_has_room_for_now_is_pending_with_the_numbers(harness: Harness) -> None:
    blocker = harness.job("blocker", 2)
    for rank in range(2):
        harness.place(harness.pod("blocker", blocker, rank).annotate("fabricsched.io/required-tier", "leaf"))
    uid = harness.job("wide", 4)
    pod = harness.pod("wide", uid, 0).annotate("fabricsched.io/required-tier", "leaf")
    # Only one leaf is offered, the one the blocker half fills: no leaf has room for 4 now.
    leaf = harness.store.get("train", "blocker")["spec"]["domains"]["leaf"][0]
    offered = [n for n in harness.state.nodes if n.startswith(leaf)]
    harness.filter(pod, offered)
    obj = harness.store.get("train", "wide")
    assert obj["status"]["phase"] == "Pending" and obj["spec"]["ranks"] == []
    cond = reserved_condition(harness, "wide")
    assert cond["status"] == "False" and cond["reason"] == "RequiredTierUnsatisfiable"
    assert cond["message"].startswith(
        "needs 4 x 8 GPUs inside one leaf: required tier leaf: no leaf has room"
    )
    assert "room for 2" in cond["message"]
    assert harness.book.reserved_gpus() == {}  # a Pending gang holds nothing

    writes = harness.writer.writes
    harness.filter(pod, offered)  # the scheduler retries: same reason, no new write
    assert harness.writer.writes == writes

    harness.filter(pod)  # every node offered: it fits a whole leaf
    placed = harness.store.get("train", "wide")
    assert placed["status"]["phase"] == "Reserved" and len(placed["spec"]["ranks"]) == 4
    cond = reserved_condition(harness, "wide")
    assert cond["status"] == "True" and cond["reason"] == "Planned"


def test_a_gang_bigger_than_the_fabric_is_pending_as_unplaceable(harness: Harness) -> None:
    uid = harness.job("huge", 40)
    harness.filter(harness.pod("huge", uid, 0))
    cond = reserved_condition(harness, "huge")
    assert cond["reason"] == "Unplaceable"
    assert cond["message"] == (
        "needs 40 x 8 GPUs: the fabric could never hold 40 pods of 8 GPUs (room for 16 when empty)"
    )

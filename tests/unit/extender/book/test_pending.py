"""A gang that waits has a Pending FabricPlacement that says why, with the numbers."""

from __future__ import annotations

from typing import Any

from extender_harness import Harness, fabric_nodes

from builders import PodBuilder, make_pod
from fabricsched.extender.book import pending


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


def _waiting_pod_group(h: Harness, name: str, size: int) -> list[PodBuilder]:
    """A Job-less gang (gang label + size) too big for the fabric: every pod created, one filtered."""
    pods = [make_pod(f"{name}-{i}", "train").gang(name, size).gpus(8).scheduler("fabricsched")
            for i in range(size)]
    for pod in pods:
        h.state.apply_pod(pod.build())
    h.filter(pods[0])
    assert h.store.get("train", name)["status"]["phase"] == "Pending"
    return pods


def _housekeeping(h: Harness) -> None:
    h.clock.advance(pending.SWEEP_S)
    h.coordinator.housekeeping()
    h.run(h.writer.flush(1.0))


def test_the_pending_object_of_a_gang_without_a_job_is_deleted_once_its_pods_are(harness: Harness) -> None:
    pods = _waiting_pod_group(harness, "group", 20)
    for pod in pods[1:]:
        harness.state.delete_pod("train", pod.build()["metadata"]["name"])
    _housekeeping(harness)
    assert ("train", "group") in harness.store.objects  # one pod is left: it still waits

    harness.state.delete_pod("train", "group-0")
    _housekeeping(harness)
    assert ("train", "group") not in harness.store.objects
    assert harness.coordinator.pending.waiting == 0


def test_a_pending_object_read_back_after_a_restart_is_deleted_when_its_pods_are_gone(
    harness: Harness,
) -> None:
    pods = _waiting_pod_group(harness, "group", 20)
    restarted = Harness(fabric_nodes())
    restarted.store = harness.store
    restarted.writer.store = harness.store
    restarted.restore()
    restarted.state.apply_pod(pods[3].build())
    _housekeeping(restarted)
    assert ("train", "group") in restarted.store.objects

    restarted.state.delete_pod("train", "group-3")
    _housekeeping(restarted)
    assert ("train", "group") not in restarted.store.objects


def test_the_pending_object_of_a_job_is_left_to_the_garbage_collector(harness: Harness) -> None:
    uid = harness.job("huge", 40)
    harness.filter(harness.pod("huge", uid, 0))
    for rank in range(40):
        harness.state.delete_pod("train", f"huge-{rank}")
    _housekeeping(harness)
    # Its ownerReference to the Job makes the Job's deletion remove it.
    assert harness.store.get("train", "huge")["metadata"]["ownerReferences"][0]["uid"] == uid
    assert harness.coordinator.pending.waiting == 0  # no longer counted as waiting

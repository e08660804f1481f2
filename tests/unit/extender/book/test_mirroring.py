"""A standby replica's book follows the plans the active one writes (``mirroring``).

Two harnesses play the two replicas on the same fabric: A is called by its scheduler and plans;
its FabricPlacement objects reach B as watch events. B must then hold A's reservations (a gang
it plans next avoids them), count A's bound ranks from the pods, and not undo a plan of its own
with the echo of an older write.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from extender_harness import Harness, fabric_nodes
from kubernetes import client

from fabricsched.extender.book import mirror as mirroring
from fabricsched.extender.kube import feed as placement_feed


def replicas() -> tuple[Harness, Harness, mirroring.PlanMirror, set[tuple[str, str, int]]]:
    a, b = Harness(fabric_nodes()), Harness(fabric_nodes())
    a.restore()
    b.restore()
    covered: set[tuple[str, str, int]] = set()
    mirror = mirroring.PlanMirror(b.book, b.coordinator.follower,
                                  lambda ns, name, generation: (ns, name, generation) in covered)
    return a, b, mirror, covered


def event(store_object: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    obj = copy.deepcopy(store_object)
    obj["metadata"]["generation"] = generation
    return obj


def plan_on_a(a: Harness, b: Harness, name: str, pods: int) -> list[str]:
    """A's scheduler calls A's extender for each pod of a new gang; B sees the same Job and pods."""
    uid = a.job(name, pods)
    b.state.apply_job({"metadata": {"name": name, "namespace": "train", "uid": uid},
                       "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed"},
                       "status": {}})
    nodes = []
    for rank in range(pods):
        pod = a.pod(name, uid, rank)
        b.state.apply_pod(pod.build())
        answer = a.filter(pod)
        assert len(answer.passed) == 1, answer
        nodes.append(answer.passed[0])
    return nodes


def test_the_standby_holds_the_active_replicas_reservations_and_plans_around_them() -> None:
    a, b, mirror, _ = replicas()
    planned = plan_on_a(a, b, "big", 6)
    for obj in a.store.objects.values():
        mirror.on_event("MODIFIED", event(obj))
    assert mirror.adopted == 1
    held = b.book.reserved_gpus()
    assert set(held) == set(planned) and all(gpus == 8 for gpus in held.values())
    # B takes over: a new gang planned there avoids every node A's plan holds.
    uid = b.job("next", 4)
    placed = {b.place(b.pod("next", uid, rank)) for rank in range(4)}
    assert not placed & set(planned)


def test_ranks_bound_while_the_standby_watched_count_as_bound_there() -> None:
    a, b, mirror, _ = replicas()
    planned = plan_on_a(a, b, "g", 2)
    uid = next(iter(a.store.objects.values()))["spec"]["jobUID"]
    b.state.apply_pod(b.pod("g", uid, 0).on(planned[0]).build())
    mirror.on_event("ADDED", event(next(iter(a.store.objects.values()))))
    entry = b.book.get(next(iter(b.book.entries())).key)
    assert entry is not None and entry.bound == {0: planned[0]}
    assert set(b.book.reserved_gpus()) == {planned[1]}


def test_the_echo_of_an_own_write_never_replaces_a_newer_plan() -> None:
    a, b, mirror, covered = replicas()
    plan_on_a(a, b, "g", 2)
    obj = next(iter(a.store.objects.values()))
    mirror.on_event("ADDED", event(obj, generation=1))
    older = event(obj, generation=1)
    older["spec"]["ranks"][1]["node"] = "l4-h3"
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    covered.add((ns, name, 2))
    echo = copy.deepcopy(older)
    echo["metadata"]["generation"] = 2
    before = b.book.entries()[0].ranks
    mirror.on_event("MODIFIED", echo)  # a generation this replica wrote: ignored
    assert b.book.entries()[0].ranks == before
    elsewhere = copy.deepcopy(older)
    elsewhere["metadata"]["generation"] = 3
    mirror.on_event("MODIFIED", elsewhere)  # a re-plan made by the other replica: followed
    assert b.book.entries()[0].ranks[1] == "l4-h3"


def test_a_released_or_unreadable_object_and_a_deletion_change_nothing() -> None:
    a, b, mirror, _ = replicas()
    plan_on_a(a, b, "g", 2)
    obj = event(next(iter(a.store.objects.values())))
    mirror.on_event("DELETED", obj)
    released = copy.deepcopy(obj)
    released["status"]["phase"] = "Released"
    mirror.on_event("MODIFIED", released)
    mirror.on_event("MODIFIED", {"metadata": {"name": "x"}, "spec": {"size": "many"}})
    assert len(b.book) == 0 and mirror.adopted == 0


def test_a_late_echo_of_its_own_write_never_brings_a_released_gang_back() -> None:
    a, b, _, _ = replicas()
    plan_on_a(a, b, "g", 2)
    stale = event(next(iter(a.store.objects.values())))
    meta = stale["metadata"]
    own = mirroring.PlanMirror(a.book, a.coordinator.follower,
                               lambda ns, name, generation: (ns, name) == (meta["namespace"], meta["name"]))
    a.coordinator.follower.release(a.book.entries()[0].key, "Job finished")
    assert len(a.book) == 0
    own.on_event("MODIFIED", stale)  # the watch delivers the Reserved write after the release
    assert len(a.book) == 0 and own.adopted == 0


class FakeConnection:
    """``listwatch.Connection`` as the feed's informer calls it: a listing at version 7, or (watch)
    a stream of one MODIFIED event. Records what was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    async def get(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        self.calls.append(("list", None))
        return {"metadata": {"resourceVersion": "7"}, "items": [{"metadata": {"name": "listed"}}]}

    async def stream(self, path: str, params: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        self.calls.append(("watch", params.get("resourceVersion")))
        yield {"type": "MODIFIED", "object": {"metadata": {"name": "changed", "resourceVersion": "9"}}}

    async def close(self) -> None: ...


class _Changed(BaseException):
    """Ends the feed's endless follow once the watched change arrived (not an ``Exception``: the
    informer would catch that as an object it cannot apply)."""


def follow_until_changed(since: str | None) -> tuple[FakeConnection, list[tuple[str, str]]]:
    feed = placement_feed.ApiPlacementFeed(client.ApiClient(), lambda *_: False, since=lambda: since)
    fake = FakeConnection()
    feed._connection = fake  # type: ignore[assignment]
    delivered: list[tuple[str, str]] = []

    def deliver(kind: str, obj: dict[str, Any]) -> None:
        delivered.append((kind, obj["metadata"]["name"]))
        if obj["metadata"]["name"] == "changed":
            raise _Changed

    with pytest.raises(_Changed):
        asyncio.run(feed.follow(deliver))
    return fake, delivered


# The feed hands every listed or changed object over as ``ADDED`` (``PlanMirror`` takes ADDED and
# MODIFIED alike); a deletion is not handed over at all.


def test_the_watch_starts_where_the_restore_listed_without_listing_again() -> None:
    fake, delivered = follow_until_changed(since="42")
    assert fake.calls == [("watch", "42")]
    assert delivered == [("ADDED", "changed")]


def test_without_a_restore_listing_the_feed_lists_first_and_watches_from_there() -> None:
    fake, delivered = follow_until_changed(since=None)
    assert fake.calls == [("list", None), ("watch", "7")]
    assert delivered == [("ADDED", "listed"), ("ADDED", "changed")]


def test_a_preemptors_hold_written_after_its_plan_reaches_the_standby() -> None:
    # The plan arrives first (ADDED), its status.preemption in a status-only change: a new
    # leader must still hold the domain for the victims and write the hold back.
    a, b, mirror, _ = replicas()
    plan_on_a(a, b, "urgent", 2)
    obj = event(next(iter(a.store.objects.values())))
    obj.get("status", {}).pop("preemption", None)
    mirror.on_event("ADDED", obj)
    held = copy.deepcopy(obj)
    held["status"]["preemption"] = {
        "victims": [{"namespace": "train", "name": "low", "priority": 100, "gpus": 16, "pods": ["u1", "u2"]}],
        "domain": "leaf/l1", "time": "2026-01-01T00:00:00Z"}
    mirror.on_event("MODIFIED", held)
    (entry,) = b.book.entries()
    assert entry.preemption is not None and entry.preemption.domain == "leaf/l1"
    assert entry.preemption.pod_uids == {"u1", "u2"} and entry.preemption.cleared_at is None

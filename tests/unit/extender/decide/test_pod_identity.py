"""Forged requests: the extender decides only for pods that exist in the API server with their UID."""

from __future__ import annotations

import asyncio

from extender_harness import Harness, fabric_nodes

from builders import PodBuilder, make_pod
from fabricsched.extender.decide import pod_identity
from fabricsched.ports import errors


class Lookup:
    """The API server's pods by (namespace, name) -> UID; counts reads, can fail or stall."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], str] = {}
        self.reads = 0
        self.fail: Exception | None = None
        self.stall = 0.0

    async def uid_of(self, namespace: str, name: str) -> str | None:
        self.reads += 1
        if self.stall:
            await asyncio.sleep(self.stall)
        if self.fail is not None:
            raise self.fail
        return self.pods.get((namespace, name))


def guarded(lookup: Lookup, **options: float) -> Harness:
    h = Harness(fabric_nodes())
    h.coordinator.identity = pod_identity.PodIdentity(
        h.state, lookup, h.clock, pod_identity.IdentityOptions(**options)
    )
    h.restore()
    return h


def lone(name: str, uid: str) -> PodBuilder:
    pod = make_pod(name, "train").gpus(8).scheduler("fabricsched")
    pod._meta["uid"] = uid
    return pod


def ask(h: Harness, pod: PodBuilder) -> tuple[list[str], set[str]]:
    """Filter without adding the pod to the cluster state (as a forged request arrives)."""
    answer = h.run(h.coordinator.filter(pod.build(), list(h.state.nodes)))
    h.run(h.writer.flush(1.0))
    return answer.passed, set(answer.failed.values())


def test_a_pod_that_never_existed_gets_every_node_failed_and_reserves_nothing() -> None:
    lookup = Lookup()
    h = guarded(lookup)
    passed, reasons = ask(h, lone("forged", "u-1"))
    assert passed == [] and len(reasons) == 1
    (reason,) = reasons
    assert reason.startswith("unknown pod 'train/forged'") and len(reason.encode()) <= 160
    assert not h.book.entries() and not h.store.objects and not h.events.events


def test_a_pod_with_the_right_name_and_a_wrong_uid_is_unknown_too() -> None:
    lookup = Lookup()
    lookup.pods[("train", "real")] = "u-real"
    h = guarded(lookup)
    h.state.apply_pod(lone("real", "u-real").build())
    passed, reasons = ask(h, lone("real", "u-forged"))
    assert passed == [] and all("unknown pod" in r for r in reasons)
    assert not h.book.entries() and not h.store.objects


def test_a_pod_the_watch_holds_needs_no_lookup_and_is_planned() -> None:
    lookup = Lookup()
    h = guarded(lookup)
    pod = lone("real", "u-real")
    h.state.apply_pod(pod.build())
    passed, _ = ask(h, pod)
    assert len(passed) == 1 and lookup.reads == 0 and h.book.entries()


def test_a_pod_the_watch_has_not_delivered_yet_is_looked_up_once_and_planned() -> None:
    lookup = Lookup()
    lookup.pods[("train", "new")] = "u-new"
    h = guarded(lookup)
    pod = lone("new", "u-new")
    assert len(ask(h, pod)[0]) == 1
    assert len(ask(h, pod)[0]) == 1
    assert lookup.reads == 1


def test_a_negative_answer_is_remembered_for_a_short_while_only() -> None:
    lookup = Lookup()
    h = guarded(lookup, unknown_ttl_s=5.0)
    pod = lone("soon", "u-soon")
    for _ in range(3):
        assert ask(h, pod)[0] == []
    assert lookup.reads == 1
    lookup.pods[("train", "soon")] = "u-soon"  # created just after the first question
    h.clock.now += 5.1
    assert len(ask(h, pod)[0]) == 1 and lookup.reads == 2


def test_a_lookup_that_fails_or_stalls_refuses_this_call_and_asks_again_next_time() -> None:
    lookup = Lookup()
    lookup.fail = errors.Unavailable("no answer from the API server")
    h = guarded(lookup, lookup_timeout_s=0.05)
    pod = lone("p", "u-p")
    _, reasons = ask(h, pod)
    assert all("could not look it up" in r for r in reasons)
    lookup.fail, lookup.stall = None, 1.0
    _, reasons = ask(h, pod)
    assert all("timed out" in r for r in reasons)
    assert lookup.reads == 2 and not h.book.entries()


def test_a_pod_without_a_uid_is_refused_without_a_lookup() -> None:
    lookup = Lookup()
    h = guarded(lookup)
    _, reasons = ask(h, lone("p", ""))
    assert all("carries no UID" in r for r in reasons) and lookup.reads == 0


def test_a_pod_without_gpus_is_not_checked_and_passes_every_node() -> None:
    lookup = Lookup()
    h = guarded(lookup)
    cpu = make_pod("cpu", "train").scheduler("fabricsched")
    cpu._meta["uid"] = "u-cpu"
    passed, _ = ask(h, cpu)
    assert sorted(passed) == sorted(h.state.nodes) and lookup.reads == 0


def test_prioritize_scores_nothing_for_an_unverified_pod() -> None:
    lookup = Lookup()
    h = guarded(lookup)
    scores = h.coordinator.prioritize(lone("forged", "u-1").build(), list(h.state.nodes))
    assert scores.planned is None and lookup.reads == 0


def test_forged_names_cannot_grow_the_memory_without_bound() -> None:
    lookup = Lookup()
    h = guarded(lookup)
    identity = h.coordinator.identity
    assert identity is not None
    for i in range(pod_identity.MAX_REMEMBERED + 10):
        identity._remember(("train", f"f-{i}", "u"), False, h.clock() + 5)
    assert len(identity._answers) == pod_identity.MAX_REMEMBERED

"""A gang is planned only once its pods exist (issue 15, attack 4: reservation hoarding)."""

from __future__ import annotations

from extender_harness import Harness, fabric_nodes

from builders import PodBuilder, make_pod
from fabricsched.api.placement import PlacementPhase
from fabricsched.extender.decide import coordinator, verdicts


def test_a_lone_pod_claiming_a_gang_of_21_reserves_nothing_and_says_how_many_are_missing(
    harness: Harness,
) -> None:
    lone = make_pod("hoarder", "tenant").gpus(8).annotate("fabricsched.io/gang-size", "21")
    answer = harness.filter(lone.scheduler("fabricsched"))
    assert answer.passed == [] and set(answer.failed) == set(harness.state.nodes)
    assert set(answer.failed.values()) == {"waiting for 20 more pods of gang tenant/hoarder"}
    assert len(harness.book) == 0 and harness.book.reserved_gpus() == {}
    assert harness.store.objects == {}


def test_a_job_gang_is_planned_when_its_last_pod_appears(harness: Harness) -> None:
    uid = harness.job("j", 3, create_pods=False)
    first = harness.filter(harness.pod("j", uid, 0))
    assert first.passed == [] and set(first.failed.values()) == {"waiting for 2 more pods of gang train/j"}
    harness.state.apply_pod(harness.pod("j", uid, 1).build())
    assert set(harness.filter(harness.pod("j", uid, 0)).failed.values()) == {
        "waiting for 1 more pod of gang train/j"
    }
    harness.state.apply_pod(harness.pod("j", uid, 2).build())
    placed = [harness.place(harness.pod("j", uid, r)) for r in range(3)]
    assert len(set(placed)) == 3 and len(harness.book) == 1


def test_ended_pods_do_not_count_towards_the_gang(harness: Harness) -> None:
    gone = make_pod("g-0", "train").gang("g", 2).gpus(8).scheduler("fabricsched").phase("Failed")
    harness.state.apply_pod(gone.build())
    answer = harness.filter(make_pod("g-1", "train").gang("g", 2).gpus(8).scheduler("fabricsched"))
    assert answer.passed == [] and len(harness.book) == 0


def test_the_waiting_reason_is_bounded_for_the_longest_names(harness: Harness) -> None:
    lone = make_pod("p" * 253, "n" * 63).gpus(8).annotate("fabricsched.io/gang-size", "1000000")
    answer = harness.filter(lone.scheduler("fabricsched"))
    (reason,) = set(answer.failed.values())
    assert reason.startswith("waiting for 999999 more pods of gang ")
    assert len(reason.encode()) <= verdicts.MAX_REASON_BYTES


def labelled(name: str) -> PodBuilder:
    return make_pod(name, "train").gang("g", 2).gpus(8).scheduler("fabricsched")


def test_recreating_an_unbound_pod_does_not_renew_the_reservation(harness: Harness) -> None:
    for name in ("g-0", "g-1"):
        harness.state.apply_pod(labelled(name).build())
    first = harness.filter(labelled("g-0"))
    (entry,) = harness.book.entries()
    assert first.passed and entry.expires_at == harness.clock() + 120
    harness.clock.advance(100)
    harness.state.delete_pod("train", "g-1")
    planned = set(entry.ranks)
    # The re-created pod's planned node is taken meanwhile: its rank is planned again elsewhere.
    elsewhere = [n for n in harness.state.nodes if n not in planned]
    moved = harness.filter(labelled("g-1b"), elsewhere)
    assert len(moved.passed) == 1 and moved.passed[0] in elsewhere
    harness.clock.advance(21)
    harness.coordinator.housekeeping()
    (after,) = harness.book.entries()
    assert after.phase == PlacementPhase.EXPIRED and after.expires_at == entry.expires_at


def test_an_expired_gang_is_not_planned_again_by_one_recreated_pod(harness: Harness) -> None:
    for name in ("g-0", "g-1"):
        harness.state.apply_pod(labelled(name).build())
    assert harness.filter(labelled("g-0")).passed
    harness.clock.advance(121)
    harness.coordinator.housekeeping()
    harness.state.delete_pod("train", "g-1")
    answer = harness.filter(labelled("g-0"))
    assert answer.passed == [] and set(answer.failed.values()) == {"waiting for 1 more pod of gang train/g"}
    (entry,) = harness.book.entries()
    assert entry.phase == PlacementPhase.EXPIRED and harness.book.reserved_gpus() == {}


def test_a_namespace_over_its_reservation_limit_gets_no_new_plan_until_its_gangs_bind() -> None:
    h = Harness(fabric_nodes(), options=coordinator.CoordinatorOptions(max_reserved_gpus_per_namespace=24))
    h.restore()
    a = h.job("a", 2)
    first = h.filter(h.pod("a", a, 0))
    assert len(first.passed) == 1  # 16 of 24
    b = h.job("b", 2)
    refused = h.filter(h.pod("b", b, 0))
    assert refused.passed == [] and set(refused.failed) == set(h.state.nodes)
    assert set(refused.failed.values()) == {
        "gang train/b would reserve 16 GPUs; namespace train already holds 16 reserved GPUs "
        "of its limit of 24"
    }
    assert [e.name for e in h.book.entries()] == ["a"]
    other = h.job("c", 2, namespace="other")
    assert len(h.filter(h.pod("c", other, 0, namespace="other")).passed) == 1  # another namespace
    h.bind(h.pod("a", a, 0), first.passed[0])
    h.place(h.pod("a", a, 1))  # gang a bound: nothing of train is held any more
    assert len(h.filter(h.pod("b", b, 0)).passed) == 1

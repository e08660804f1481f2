"""Holding a gang for locality in the filter: the engine's decision, as the simulator makes it.

The scene, on the harness fabric (leaves of 4 hosts x 8 GPUs, 2:1 uplinks): a running gang
``block`` of 4 ranks split 2 + 2 over leaves l1 and l2, and a gang ``g`` of 4 ranks whose pods
may only use spine s1 (a node selector, as the candidates show). ``g`` fits only 2 + 2 over the
same two leaves now, next to ``block``'s traffic: slowdown (4267 + 4267) / 6400 = 1.33, where
its floor (alone, in one leaf) is 1.00.
"""

from __future__ import annotations

from extender_harness import Harness, fabric_nodes, leaf_of

from fabricsched import ids
from fabricsched.extender.decide import coordinator, locality
from fabricsched.placement import patience, request

WAIT = {locality.WAIT_ANNOTATION: "600s"}
BLOCK_NODES = ["l1-h0", "l1-h1", "l2-h0", "l2-h1"]


def spine_s1(h: Harness) -> list[str]:
    """``g``'s candidates: nodes under spine s1 that no running pod holds."""
    held = {p.node for p in h.state.pods.values() if p.active}
    return [n for n in h.state.nodes if leaf_of(n) in ("l1", "l2") and n not in held]


class Scene:
    def __init__(self, h: Harness) -> None:
        self.h = h
        self.block_uid = h.job("block", 4)
        self.block = [h.pod("block", self.block_uid, r) for r in range(4)]
        for pod in self.block:
            h.place(pod, BLOCK_NODES)
        self.g_uid = h.job("g", 4)
        self.g_key = ids.gang_key("train", "g", self.g_uid)

    def filter_g(
        self, rank: int = 0, annotations: dict[str, str] = WAIT, created: float | None = None
    ) -> coordinator.FilterAnswer:
        pod = self.h.pod("g", self.g_uid, rank)
        for key, value in annotations.items():
            pod.annotate(key, value)
        return self.h.filter(pod, spine_s1(self.h), created)

    def place_g(self, annotations: dict[str, str] = WAIT) -> list[str]:
        placed = []
        for rank in range(4):
            pod = self.h.pod("g", self.g_uid, rank)
            for key, value in annotations.items():
                pod.annotate(key, value)
            placed.append(self.h.place(pod, spine_s1(self.h)))
        return placed

    def end_block(self) -> None:
        for pod, node in zip(self.block, BLOCK_NODES, strict=True):
            self.h.state.apply_pod(pod.on(node).phase("Succeeded").build())
        self.h.end_job("block", self.block_uid, 4)


def test_a_gang_far_above_its_floor_waits_with_the_reason_and_reserves_nothing(harness: Harness) -> None:
    scene = Scene(harness)
    answer = scene.filter_g()
    assert answer.passed == [] and not answer.unresolvable
    assert set(answer.failed) == set(spine_s1(harness))
    expected = (
        "gang train/g is waiting up to 600 s more (timeout 600 s) for a placement within 5% of its "
        "floor 1.00x: best now 1.33x"
    )
    assert set(answer.failed.values()) == {expected}
    assert harness.book.get(scene.g_key) is None
    # The held gang's object is Pending: no ranks (nothing reserved), the hold as its reason.
    held = harness.store.get("train", "g")
    assert held["status"]["phase"] == "Pending" and held["spec"]["ranks"] == []
    (reserved,) = [c for c in held["status"]["conditions"] if c["type"] == "Reserved"]
    assert reserved["status"] == "False" and reserved["reason"] == "HeldForLocality"
    assert reserved["message"].startswith("needs 4 x 8 GPUs: waiting up to 600 s more")
    assert harness.book.reserved_gpus() == {}
    assert ("g-0", "FabricWaitingForLocality", expected, False) in harness.events.events


def test_the_waiting_event_is_rate_limited_but_every_answer_says_how_long_is_left(harness: Harness) -> None:
    scene = Scene(harness)
    scene.filter_g(0)
    harness.clock.advance(20)
    later = scene.filter_g(1)
    assert next(iter(later.failed.values())).startswith("gang train/g is waiting up to 580 s more")
    assert harness.events.reasons().count("FabricWaitingForLocality") == 1


def test_the_wait_counts_from_the_gangs_first_hold_not_its_pods_creation(harness: Harness) -> None:
    # Counted from creation, a gang that queued for capacity longer than its timeout was never
    # held: under saturation a short wait then held nobody (the short-wait anomaly).
    scene = Scene(harness)
    answer = scene.filter_g(created=harness.clock() - 500)
    assert next(iter(answer.failed.values())).startswith("gang train/g is waiting up to 600 s more")
    harness.clock.advance(20)
    younger = scene.filter_g(1, created=harness.clock() - 10)
    assert next(iter(younger.failed.values())).startswith("gang train/g is waiting up to 580 s more")


def test_after_the_timeout_the_gang_is_placed_on_the_plan_it_has_and_says_so(harness: Harness) -> None:
    scene = Scene(harness)
    assert scene.filter_g().passed == []
    harness.clock.advance(600)
    placed = scene.place_g()
    assert {leaf_of(n) for n in placed} == {"l1", "l2"}
    entry = harness.book.get(scene.g_key)
    assert entry is not None and round(entry.comm_slowdown, 2) == 1.33
    assert entry.reasons[-1] == (
        "waited 600 s (timeout 600 s) for a placement within 5% of its floor 1.00x: starting at 1.33x"
    )
    stored = harness.store.get("train", "g")
    assert stored["status"]["reasons"][-1] == entry.reasons[-1]


def test_a_gang_created_longer_ago_than_its_timeout_is_held_from_its_first_plan(harness: Harness) -> None:
    scene = Scene(harness)
    answer = scene.filter_g(created=harness.clock() - 700)
    assert answer.passed == []
    assert "FabricWaitingForLocality" in harness.events.reasons()


def test_when_a_leaf_frees_up_the_waiting_gang_lands_in_one_leaf(harness: Harness) -> None:
    scene = Scene(harness)
    assert scene.filter_g().passed == []
    harness.clock.advance(120)
    scene.end_block()
    placed = scene.place_g()
    assert len({leaf_of(n) for n in placed}) == 1
    entry = harness.book.get(scene.g_key)
    assert entry is not None and entry.comm_slowdown == 1.0
    # Its wait played a part, but it started at its floor: no reason about the wait.
    assert not any("wait" in r for r in entry.reasons)


def test_a_gang_within_tolerance_of_its_floor_is_placed_at_once(harness: Harness) -> None:
    uid = harness.job("a", 4)
    placed = []
    for rank in range(4):
        pod = harness.pod("a", uid, rank)
        pod.annotate(locality.WAIT_ANNOTATION, "1h")
        placed.append(harness.place(pod))
    assert len({leaf_of(n) for n in placed}) == 1
    assert "FabricWaitingForLocality" not in harness.events.reasons()


def test_a_wider_tolerance_lets_the_gang_start_above_its_floor(harness: Harness) -> None:
    scene = Scene(harness)
    answer = scene.filter_g(annotations={**WAIT, locality.TOLERANCE_ANNOTATION: "0.4"})
    assert len(answer.passed) == 1


def test_without_the_annotation_the_shipped_default_holds_capped_while_the_fabric_is_not_saturated(
    harness: Harness,
) -> None:
    # The harness runs the coordinator's defaults: the shipped wait (4 h). Three quarters of the
    # fabric's GPUs are free, so the hold is capped at patience.UNSATURATED_CAP_S.
    assert harness.coordinator.options.placement.locality_wait == patience.DEFAULT_LOCALITY_WAIT
    answer = Scene(harness).filter_g(annotations={})
    assert answer.passed == []
    assert next(iter(answer.failed.values())).startswith(
        f"gang train/g is waiting up to {patience.UNSATURATED_CAP_S:.0f} s more")


def test_a_gang_opts_out_of_the_cluster_default_with_0s(harness: Harness) -> None:
    placed = Scene(harness).place_g(annotations={locality.WAIT_ANNOTATION: "0s"})
    assert {leaf_of(n) for n in placed} == {"l1", "l2"}
    assert "FabricWaitingForLocality" not in harness.events.reasons()


def test_the_cluster_default_holds_gangs_without_the_annotation() -> None:
    options = coordinator.CoordinatorOptions(
        request.PlacementOptions(locality_wait=request.LocalityWait(timeout_s=300))
    )
    h = Harness(fabric_nodes(), options=options)
    h.restore()
    scene = Scene(h)
    answer = scene.filter_g(annotations={})
    assert answer.passed == []
    assert next(iter(answer.failed.values())).startswith("gang train/g is waiting up to 300 s more")
    # A gang can opt out of the cluster's default.
    assert len(scene.filter_g(annotations={locality.WAIT_ANNOTATION: "0s"}).passed) == 1


def test_a_gang_is_not_held_while_a_lower_priority_pod_waits(harness: Harness) -> None:
    # Held, g would wait while the lower-priority pod starts (docs/preemption.md).
    scene = Scene(harness)
    low = harness.pod("low", harness.job("low", 1), 0).spec_field("priority", -5)
    harness.state.apply_pod(low.build())
    assert len(scene.filter_g().passed) == 1
    assert "FabricWaitingForLocality" not in harness.events.reasons()


def test_a_gang_of_the_lowest_priority_waiting_is_held(harness: Harness) -> None:
    scene = Scene(harness)
    same = harness.pod("other", harness.job("other", 1), 0)  # priority 0, as g's: not lower
    harness.state.apply_pod(same.build())
    assert scene.filter_g().passed == []


def test_a_gang_whose_node_affinity_cannot_be_read_is_not_held_and_says_why(harness: Harness) -> None:
    scene = Scene(harness)
    pod = harness.pod("g", scene.g_uid, 0).annotate(locality.WAIT_ANNOTATION, "600s").spec_field(
        "affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Near"}]}]}}})
    answer = harness.filter(pod, spine_s1(harness))
    assert len(answer.passed) == 1
    (event,) = [e for e in harness.events.events if e[1] == "FabricLocalityWaitInvalid"]
    assert event[2] == "gang train/g does not wait for locality: its node selector or affinity is unreadable"


def test_an_invalid_annotation_is_reported_and_the_gang_does_not_wait(harness: Harness) -> None:
    scene = Scene(harness)
    answer = scene.filter_g(annotations={locality.WAIT_ANNOTATION: "ten minutes"})
    assert len(answer.passed) == 1
    (event,) = [e for e in harness.events.events if e[1] == "FabricLocalityWaitInvalid"]
    assert event[3] is True
    assert event[2] == (
        "gang train/g does not wait for locality: annotation fabricsched.io/locality-wait: "
        "'ten minutes' is not a duration such as 600s, 10m or 1h"
    )

"""Filter and prioritize decisions on the real cluster state (no API server, no HTTP)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from extender_harness import Harness, fabric_nodes, leaf_of

HOSTS_PER_LEAF = 4


def run_gang(h: Harness, name: str, pods: int, gpus: int = 8, **annotations: str) -> list[str]:
    uid = h.job(name, pods)
    placed = []
    for rank in range(pods):
        pod = h.pod(name, uid, rank, gpus)
        for key, value in annotations.items():
            pod.annotate(f"fabricsched.io/{key.replace('_', '-')}", value)
        placed.append(h.place(pod))
    return placed


def leaf_changes(nodes: list[str]) -> int:
    return sum(1 for a, b in itertools.pairwise(nodes) if leaf_of(a) != leaf_of(b))


def test_a_gang_that_fits_one_leaf_lands_in_one_leaf(harness: Harness) -> None:
    placed = run_gang(harness, "a", 4)
    assert len({leaf_of(n) for n in placed}) == 1 and len(set(placed)) == 4


def test_a_steered_pod_passes_its_ranks_node_alone_and_names_no_other(harness: Harness) -> None:
    # The kube-scheduler drops the other nodes' reasons once one passes: none are sent.
    uid = harness.job("b", 3)
    answer = harness.filter(harness.pod("b", uid, 0))
    (target,) = answer.passed
    assert answer.failed == {} and answer.unresolvable == {} and not answer.error
    (entry,) = harness.book.entries()
    assert entry.ranks[0] == target


def test_ranks_follow_the_fabric_and_change_leaf_once_for_a_two_leaf_gang(harness: Harness) -> None:
    placed = run_gang(harness, "big", 6)
    assert len({leaf_of(n) for n in placed}) == 2 and leaf_changes(placed) == 1
    spines = {"s1" if leaf_of(n) in ("l1", "l2") else "s2" for n in placed}
    assert len(spines) == 1


def test_a_two_leaf_gang_avoids_a_leaf_whose_uplinks_are_degraded() -> None:
    spec = {
        "tiers": [
            {"name": "leaf", "nodeLabel": "fabric.topograph.run/tier-0", "oversubscription": 2.0},
            {"name": "spine", "nodeLabel": "fabric.topograph.run/tier-1"},
        ],
        "links": [
            {
                "tier": "leaf",
                "domain": "l1",
                "state": "degraded",
                "capacity": 0.25,
                "reason": "4 of 16 uplinks flapping",
            }
        ],
    }
    h = Harness(fabric_nodes(), spec=spec)
    h.restore()
    placed = run_gang(h, "big", 6)
    assert "l1" not in {leaf_of(n) for n in placed}
    assert len({leaf_of(n) for n in placed}) == 2


def test_a_second_gang_does_not_take_the_first_gangs_reserved_nodes(harness: Harness) -> None:
    uid_a = harness.job("a", 4)
    first = harness.filter(harness.pod("a", uid_a, 0)).passed[0]
    reserved = set(harness.book.reserved_gpus())
    assert len(reserved) == 4
    uid_b = harness.job("b", 4)
    answer = harness.filter(harness.pod("b", uid_b, 0))
    assert answer.passed[0] not in reserved
    assert first in reserved


def test_a_single_pod_job_goes_to_a_host_with_a_degraded_link() -> None:
    h = Harness(fabric_nodes(degraded_hosts=["l3-h2"]))
    h.restore()
    assert run_gang(h, "solo", 1, gpus=2) == ["l3-h2"]


def test_a_gang_avoids_a_host_with_a_degraded_link_and_says_why() -> None:
    h = Harness(fabric_nodes(degraded_hosts=["l1-h0", "l2-h0", "l3-h0", "l4-h0"]))
    h.restore()
    placed = run_gang(h, "b", 3)
    assert not any(n.endswith("-h0") for n in placed)
    (entry,) = h.book.entries()
    assert any("degraded" in reason for reason in entry.reasons), entry.reasons


def test_a_required_tier_that_cannot_be_met_is_unresolvable_with_an_event_naming_the_tier(
    harness: Harness,
) -> None:
    uid = harness.job("wide", 5)
    pod = harness.pod("wide", uid, 0).annotate("fabricsched.io/required-tier", "leaf")
    answer = harness.filter(pod)
    assert answer.passed == [] and answer.failed == {}
    assert set(answer.unresolvable) == set(harness.state.nodes)
    message = next(iter(answer.unresolvable.values()))
    assert "one leaf domain" in message and "train/wide" in message
    (event,) = harness.events.events
    assert event[1] == "FabricTierUnsatisfiable" and "leaf" in event[2] and event[3]
    assert len(harness.book) == 0
    # The scheduler retries: no second Event within the interval.
    harness.filter(pod)
    assert len(harness.events.events) == 1


def test_a_pod_recreated_for_a_rank_returns_to_that_ranks_node(harness: Harness) -> None:
    uid = harness.job("a", 4)
    placed = [harness.place(harness.pod("a", uid, r)) for r in range(4)]
    old = harness.pod("a", uid, 2)
    harness.state.apply_pod(old.on(placed[2]).phase("Failed").build())
    harness.state.delete_pod("train", "a-2")
    replacement = harness.pod("a", uid, 2)
    replacement._meta["uid"] = "uid-train-a-2-again"
    # Meanwhile another gang looks for room: rank 2's node is held for the replacement.
    uid_b = harness.job("b", 1)
    assert harness.place(harness.pod("b", uid_b, 0)) != placed[2]
    assert harness.filter(replacement).passed == [placed[2]]


def test_a_planned_node_that_drops_out_of_node_names_is_replanned(harness: Harness) -> None:
    uid = harness.job("a", 3)
    first = harness.filter(harness.pod("a", uid, 0)).passed[0]
    lost = harness.book.entries()[0].ranks[1]
    candidates = [n for n in harness.state.nodes if n != lost]
    moved = harness.filter(harness.pod("a", uid, 1), candidates).passed
    assert moved and moved[0] != lost and leaf_of(moved[0]) == leaf_of(first)


def test_an_idle_reservation_expires_and_a_later_pod_plans_again(harness: Harness) -> None:
    uid = harness.job("a", 4)
    harness.place(harness.pod("a", uid, 0))
    harness.clock.advance(121)
    harness.coordinator.housekeeping()
    harness.run(harness.writer.flush(1.0))
    stored = harness.store.get("train", "a")
    assert stored["status"]["phase"] == "Expired" and [r["rank"] for r in stored["spec"]["ranks"]] == [0]
    assert harness.book.reserved_gpus() == {}
    answer = harness.filter(harness.pod("a", uid, 1))
    assert len(answer.passed) == 1
    assert harness.store.get("train", "a")["status"]["phase"] == "Reserved"


def test_a_finished_job_releases_its_plan(harness: Harness) -> None:
    uid = harness.job("a", 2)
    harness.filter(harness.pod("a", uid, 0))
    harness.end_job("a", uid, 2)
    harness.run(harness.writer.flush(1.0))
    assert len(harness.book) == 0 and harness.book.reserved_gpus() == {}
    assert harness.store.get("train", "a")["status"]["phase"] == "Released"


def test_a_lone_pod_is_released_when_it_ends(harness: Harness) -> None:
    from builders import make_pod

    pod = make_pod("solo", "dev").gpus(1).scheduler("fabricsched")
    node = harness.place(pod)
    harness.state.apply_pod(pod.on(node).phase("Succeeded").build())
    harness.coordinator.housekeeping()
    assert len(harness.book) == 0


def test_a_gang_without_a_job_whose_pod_deletions_went_unseen_is_released_by_the_sweep(
    harness: Harness,
) -> None:
    from builders import make_pod
    from fabricsched.extender.book import following

    pods = [make_pod(f"g-{r}", "train").gang("g", 2).gpus(8).scheduler("fabricsched") for r in range(2)]
    for pod in pods:
        harness.state.apply_pod(pod.build())  # the gang is planned once all its pods exist
    harness.place(pods[0])
    assert len(harness.book) == 1
    # The pods go while the book does not hear of it (an event lost on the way, say).
    harness.state._subscribers.remove(harness.coordinator.on_change)
    for pod in pods:
        harness.state.delete_pod("train", pod.build()["metadata"]["name"])
    harness.coordinator.housekeeping()
    assert len(harness.book) == 1  # nothing told it yet
    for _ in range(2):  # a plan is checked at the second sweep that sees it
        harness.clock.advance(following.SWEEP_S)
        harness.coordinator.housekeeping()
    assert len(harness.book) == 0 and harness.book.reserved_gpus() == {}


def test_a_pod_without_a_rank_takes_the_rank_of_an_ended_one_never_a_live_ones(harness: Harness) -> None:
    from builders import make_pod

    def member(name: str) -> Any:
        return make_pod(name, "train").gang("g", 2).gpus(8).scheduler("fabricsched")

    first, second = member("g-a"), member("g-b")
    for pod in (first, second):
        harness.state.apply_pod(pod.build())
    # Steered, not bound yet: their ranks are held by their pods alone.
    (a_node,), (b_node,) = harness.filter(first).passed, harness.filter(second).passed
    assert a_node != b_node
    # Other pods of the namespace, of other gangs, are not members however many there are.
    for i in range(20):
        harness.state.apply_pod(make_pod(f"x-{i}", "train").gang("x", 30).gpus(8).build())
    spare = member("g-c")
    answer = harness.filter(spare)
    assert answer.passed == [] and "all 2 ranks of gang" in next(iter(answer.failed.values()))
    harness.state.apply_pod(first.phase("Failed").build())
    assert harness.filter(spare).passed == [a_node]  # the ended pod's rank, on its planned node


def test_reservations_survive_a_restart_and_bound_ranks_are_rederived(harness: Harness) -> None:
    uid = harness.job("a", 4)
    placed = [harness.place(harness.pod("a", uid, r)) for r in range(2)]
    before = harness.book.reserved_gpus()
    # A new process: fresh book and coordinator, same API server (store) and cluster (state).
    again = Harness(state=harness.state, store=harness.store)
    again.restore()
    assert again.book.reserved_gpus() == before
    (entry,) = again.book.entries()
    assert dict(entry.bound) == {0: placed[0], 1: placed[1]}
    uid_b = again.job("b", 4)
    answer = again.filter(again.pod("b", uid_b, 0))
    assert answer.passed[0] not in before and answer.passed[0] not in placed


def test_decisions_wait_until_reservations_are_restored() -> None:
    h = Harness(fabric_nodes())
    uid = h.job("a", 2)
    answer = h.filter(h.pod("a", uid, 0))
    assert answer.error and not answer.passed


def test_prioritize_scores_the_planned_node_ten_and_others_zero(harness: Harness) -> None:
    uid = harness.job("a", 2)
    pod = harness.pod("a", uid, 1)
    harness.filter(harness.pod("a", uid, 0))
    target = harness.book.entries()[0].ranks[1]
    scores = dict(harness.coordinator.prioritize(pod.build(), list(harness.state.nodes)))
    assert scores.pop(target) == 10 and set(scores.values()) == {0}


def test_pods_without_gpus_pass_every_node(harness: Harness) -> None:
    from builders import make_pod

    names = list(harness.state.nodes)
    answer = harness.run(harness.coordinator.filter(make_pod("web", "default").build(), names))
    assert answer.passed == names and len(harness.book) == 0


def test_a_pod_whose_job_is_unknown_waits_with_a_reason(harness: Harness) -> None:
    pod = harness.pod("ghost", "uid-ghost", 0)
    answer = harness.filter(pod)
    assert answer.passed == [] and "Job train/ghost is not known yet" in next(iter(answer.failed.values()))


def test_a_plan_restored_without_its_status_is_held_for_a_full_ttl(harness: Harness) -> None:
    uid = harness.job("a", 4)
    harness.filter(harness.pod("a", uid, 0))
    stored = harness.store.get("train", "a")
    del stored["status"]  # the process died between the create and the status write
    again = Harness(state=harness.state, store=harness.store)
    again.restore()
    (restored,) = again.book.entries()
    assert restored.phase.value == "Reserved" and restored.expires_at == again.clock() + 120.0
    again.clock.advance(60)
    again.coordinator.housekeeping()
    assert again.book.reserved_gpus() == harness.book.reserved_gpus()


def test_the_warm_up_before_ready_reserves_and_writes_nothing_and_the_first_plan_is_unchanged() -> None:
    # restore() plans and drops a one-pod gang per GPU count in use (planning.warm): nothing of
    # it may reach the book, the objects or the Events, and the next plan is the one a cold
    # engine makes.
    warmed = Harness(fabric_nodes())
    warmed.restore()
    assert warmed.book.entries() == [] and warmed.store.objects == {} and warmed.events.events == []
    cold = Harness(fabric_nodes())
    cold.coordinator.ready = True  # decisions without restore(): no warm-up
    assert run_gang(warmed, "a", 4) == run_gang(cold, "a", 4)


def test_a_new_gangs_answer_does_not_wait_for_its_object_which_is_created_at_once() -> None:
    h = Harness(fabric_nodes())
    h.restore()
    uid = h.job("a", 4)
    manifest = h.pod("a", uid, 0).build()

    async def scenario() -> None:
        gate = asyncio.Event()
        create = h.store.create

        async def slow_create(body: dict[str, Any]) -> None:
            await gate.wait()  # the API server is slow: the answer must not wait for it
            await create(body)

        h.store.create = slow_create  # type: ignore[method-assign]
        answer = await h.coordinator.filter(manifest, list(h.state.nodes))
        assert len(answer.passed) == 1 and h.store.objects == {}
        gate.set()
        for _ in range(10):  # created by its own task, well before the 250 ms coalescing delay
            await asyncio.sleep(0)
        assert ("train", "a") in h.store.objects

    h.run(scenario())


def test_a_gang_whose_plan_was_lost_is_planned_around_its_bound_ranks(harness: Harness) -> None:
    # Rank 0 bound, but no plan was kept (fabricsched stopped before its object landed): the
    # other ranks are planned next to it, and its node is not reserved a second time.
    uid = harness.job("a", 4)
    harness.bind(harness.pod("a", uid, 0), "l3-h1")
    answer = harness.filter(harness.pod("a", uid, 1))
    (entry,) = harness.book.entries()
    assert dict(entry.bound) == {0: "l3-h1"} and entry.ranks[0] == "l3-h1"
    assert "planned around ranks 0, bound without a plan" in entry.reasons
    assert "l3-h1" not in harness.book.reserved_gpus()
    placed = [answer.passed[0]] + [harness.place(harness.pod("a", uid, r)) for r in (2, 3)]
    assert placed[0] == entry.ranks[1] and {leaf_of(n) for n in placed} == {"l3"}
    assert len({"l3-h1", *placed}) == 4
    stored = harness.store.get("train", "a")
    assert {r["rank"]: r["node"] for r in stored["spec"]["ranks"]}[0] == "l3-h1"

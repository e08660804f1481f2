"""The preemption sweep's workload index (decide.running): kept between decisions, or followed
pod by pod through the state's log of changed pods, it gives what a pass over every pod gives
(the same groups with the same pods, each group's pods in name order), as pods start, end, move,
change gangs and as a PodGroup's policy is read."""

from __future__ import annotations

import random
from typing import Any

import pytest
from extender_harness import Harness, relabel
from owner_objects import Owners

from builders import PodBuilder, make_pod
from fabricsched import ids
from fabricsched.extender.decide import running
from fabricsched.placement import request, snapshot
from fabricsched.topology import nodes

GPU = "nvidia.com/gpu"


def full_pass(h: Harness) -> dict[ids.GangKey, list[nodes.PodUsage]]:
    """What the sweep computed at every decision before the index."""
    snap = h.state.snapshot(next(iter(h.state.topologies)))
    assert snap is not None
    groups: dict[ids.GangKey, list[nodes.PodUsage]] = {}
    for pod in h.state.pods.values():
        if pod.active and pod.node in snap.fabric.hosts and pod.gpus(GPU) > 0:
            groups.setdefault(h.coordinator.owners.key(pod), []).append(pod)
    return {key: sorted(pods, key=lambda p: p.name) for key, pods in groups.items()}


def indexed(h: Harness, index: running.RunningIndex, follow: bool = True) -> running.Groups:
    snap = h.state.snapshot(next(iter(h.state.topologies)))
    assert snap is not None
    changed = h.state.placed_pods_since if follow else None
    return index.groups(h.state.pods, snap.fabric.hosts, GPU, h.state.placed_pods_version, changed)


@pytest.mark.parametrize("follow", [True, False], ids=["followed pod by pod", "passed over again"])
def test_the_index_follows_random_pod_changes_as_a_full_pass_sees_them(
        harness: Harness, follow: bool) -> None:
    h, rng = harness, random.Random(7)
    index = running.RunningIndex(h.coordinator.owners)
    hosts = sorted(h.state.nodes)
    names = [f"p{i}" for i in range(40)]
    for step in range(300):
        name = rng.choice(names)
        move = rng.random()
        if move < 0.15:
            h.state.delete_pod("train", name)
        else:
            pod = make_pod(name, rng.choice(["train", "other"])).gpus(rng.choice([0, 1, 2, 4])).priority(
                rng.choice([0, 10]))
            if rng.random() < 0.5:
                pod.gang(f"g{rng.randrange(4)}", 4)
            if rng.random() < 0.8:
                pod.on(rng.choice(hosts))
            if rng.random() < 0.1:
                pod.phase("Succeeded")
            if rng.random() < 0.1:
                pod.terminating(containers_done=rng.random() < 0.5)
            h.state.apply_pod(pod.build())
        if step % 3 == 0:
            assert indexed(h, index, follow) == full_pass(h), step


def test_a_podgroup_read_later_moves_its_pods_keys(harness: Harness) -> None:
    h = harness
    owners = Owners()
    h.coordinator.owners.fetcher = owners
    index = running.RunningIndex(h.coordinator.owners)

    def member(i: int) -> PodBuilder:
        pod = make_pod(f"pg-{i}", "train").gpus(8).on(f"l1-h{i}")
        pod._spec["schedulingGroup"] = {"podGroupName": "pg"}
        return pod

    for i in range(2):
        h.state.apply_pod(member(i).build())
    assert list(indexed(h, index)) == ["train/pg@podgroup"] == list(full_pass(h))
    # Read now: a basic PodGroup is no gang, each pod is its own workload.
    owners.objects[("PodGroup", "train", "pg")] = {
        "kind": "PodGroup", "metadata": {"name": "pg", "uid": "uid-pg"},
        "spec": {"schedulingPolicy": {"basic": {}}}}
    h.run(h.coordinator.owners.prepare(h.state.pods[("train", "pg-0")]))
    assert len(full_pass(h)) == 2
    assert indexed(h, index) == full_pass(h)


def test_a_candidate_is_built_again_when_what_it_is_made_of_changes(harness: Harness) -> None:
    h = harness
    index = running.RunningIndex(h.coordinator.owners)
    h.state.apply_pod(make_pod("a", "train").gpus(8).on("l1-h0").build())
    h.state.apply_pod(make_pod("b", "other").gpus(8).priority(50).on("l1-h1").build())
    snap = h.state.snapshot(next(iter(h.state.topologies)))
    assert snap is not None
    facts: dict[str, running.Namespace] = {"train": ([], False), "other": ([], False)}
    read: list[str] = []

    async def namespace_of(namespace: str) -> running.Namespace:
        read.append(namespace)
        return facts[namespace]

    def made(pattern: request.Pattern | None = None) -> running.Candidate:
        patterns = {} if pattern is None else {ids.GangKey("train/a@uid-train-a"): pattern}
        found = h.run(index.candidates(indexed(h, index), 10, namespace_of, patterns, snap.fabric, GPU))
        (candidate,) = found  # b's priority is not below 10: built (kept for later), not a candidate
        return candidate

    first = made()
    assert read == ["train", "other"] and first.workload.key == "train/a@uid-train-a"
    assert made() is first, "nothing changed: kept"
    assert made().workload.started_s is None and made().workload.progress(500.0) == 0.0, "not started"
    facts["train"] = ([], True)
    assert made().workload.opted_out
    assert made(pattern=request.Pattern.RING).workload.pattern == request.Pattern.RING
    h.state.apply_pod(make_pod("a", "train").gpus(8).on("l1-h0").terminating().build())
    assert made().workload.protected, "its pod changed: built again"


def test_a_node_that_leaves_the_fabric_takes_its_pods_out_and_a_health_change_keeps_them(
        harness: Harness) -> None:
    h = harness
    index = running.RunningIndex(h.coordinator.owners)
    for i, node in enumerate(("l1-h0", "l1-h1", "l2-h0")):
        h.state.apply_pod(make_pod(f"p{i}", "train").gpus(8).on(node).build())
    assert len(indexed(h, index)) == 3
    relabel(h, "l1-h1", "degraded")  # the fabric is built again, with the same hosts
    assert indexed(h, index) == full_pass(h) and len(full_pass(h)) == 3
    h.state.delete_node("l1-h0")
    assert indexed(h, index) == full_pass(h) and len(full_pass(h)) == 2


def test_warming_computes_every_key_ahead_in_chunks_and_the_decision_then_computes_none(
        harness: Harness) -> None:
    h = harness
    index = running.RunningIndex(h.coordinator.owners)
    hosts = sorted(h.state.nodes)
    for i in range(25):
        pod = make_pod(f"w{i}", "train").gpus(1).on(hosts[i % len(hosts)])
        if i % 5 == 0:
            pod.gang(f"g{i}", 4)
        h.state.apply_pod(pod.build())
    snap = h.state.snapshot(next(iter(h.state.topologies)))
    assert snap is not None
    assert h.run(index.warm(h.state.pods, snap.fabric.hosts, GPU, h.state.placed_pods_version, chunk=4))
    computed: list[str] = []
    key = h.coordinator.owners.key

    def counted(pod: nodes.PodUsage) -> ids.GangKey:
        computed.append(pod.name)
        return key(pod)

    expected = full_pass(h)
    h.coordinator.owners.key = counted  # type: ignore[method-assign]
    assert indexed(h, index) == expected
    assert computed == [], "warmed: the decision computes no key"
    h.state.apply_pod(make_pod("late", "train").gpus(1).on(hosts[0]).build())
    found = indexed(h, index)
    assert computed == ["late"], "a pod that came later: its key alone"
    h.coordinator.owners.key = key  # type: ignore[method-assign]
    assert found == full_pass(h)


def test_groups_and_candidates_are_kept_whole_while_no_pod_on_a_node_changes(harness: Harness) -> None:
    h = harness
    index = running.RunningIndex(h.coordinator.owners)
    h.state.apply_pod(make_pod("low", "train").gpus(8).priority(5).on("l1-h0").build())
    h.state.apply_pod(make_pod("mid", "train").gpus(8).priority(50).on("l1-h1").build())
    snap = h.state.snapshot(next(iter(h.state.topologies)))
    assert snap is not None

    async def namespace_of(namespace: str) -> running.Namespace:
        return [], False

    def candidates(groups: dict[ids.GangKey, list[nodes.PodUsage]], below: int) -> list[running.Candidate]:
        return h.run(index.candidates(groups, below, namespace_of, {}, snap.fabric, GPU))

    groups = indexed(h, index)
    assert [c.workload.priority for c in candidates(groups, 100)] == [5, 50]
    kept = candidates(groups, 10)
    assert [c.workload.priority for c in kept] == [5], "filtered by priority, not built again"
    h.state.apply_pod(make_pod("pending", "train").gpus(8).build())  # on no node: no workload
    assert indexed(h, index) is groups, "nothing on a node changed: the same groups"
    assert candidates(indexed(h, index), 10)[0] is kept[0]
    h.state.apply_pod(make_pod("low", "train").gpus(8).priority(5).on("l1-h0").terminating().build())
    moved = indexed(h, index)
    assert moved is not groups and moved == full_pass(h)
    assert candidates(moved, 10)[0].workload.protected, "its pod changed: built again"


class _NoPass(dict):  # type: ignore[type-arg]
    """The state's pods, refusing a pass over all of them."""

    def items(self):  # type: ignore[no-untyped-def]
        raise AssertionError("a pass over every pod")


def test_a_few_changed_pods_are_followed_without_a_pass_over_every_pod(harness: Harness) -> None:
    h = harness
    index = running.RunningIndex(h.coordinator.owners)
    hosts = sorted(h.state.nodes)
    for i in range(30):
        h.state.apply_pod(make_pod(f"f{i}", "train").gpus(1).on(hosts[i % len(hosts)]).build())
    before = indexed(h, index)
    h.state.apply_pod(make_pod("g-1", "train").gpus(1).gang("g", 2).on(hosts[1]).build())
    h.state.apply_pod(make_pod("g-0", "train").gpus(1).gang("g", 2).on(hosts[0]).build())
    h.state.delete_pod("train", "f3")
    snap = h.state.snapshot(next(iter(h.state.topologies)))
    assert snap is not None
    followed = index.groups(_NoPass(h.state.pods), snap.fabric.hosts, GPU, h.state.placed_pods_version,
                            h.state.placed_pods_since)
    assert followed == full_pass(h) and followed is not before
    gang = h.coordinator.owners.key(h.state.pods[("train", "g-0")])
    assert [p.name for p in followed[gang]] == ["g-0", "g-1"], "in name order, not in the order they came"
    assert len(before) == 30, "the groups handed out before are left as they were"


def test_candidates_and_their_host_map_followed_pod_by_pod_are_those_made_afresh(harness: Harness) -> None:
    h, rng = harness, random.Random(11)
    index = running.RunningIndex(h.coordinator.owners)
    hosts = sorted(h.state.nodes)
    names = [f"p{i}" for i in range(40)]
    snap = h.state.snapshot(next(iter(h.state.topologies)))
    assert snap is not None

    async def namespace_of(namespace: str) -> running.Namespace:
        return [], namespace == "other"

    full_builds = [0]
    built = index._built

    async def counted(*args: Any) -> Any:
        full_builds[0] += 1
        return await built(*args)

    index._built = counted  # type: ignore[method-assign]

    def made(with_index: running.RunningIndex, follow: bool) -> tuple[object, ...]:
        groups = indexed(h, with_index, follow)
        found = h.run(with_index.candidates(groups, 1000, namespace_of, {}, snap.fabric, GPU))
        kept = with_index.kept()
        placing = snapshot.build(snap.fabric)
        return ({c.workload.key: c.workload for c in found},
                {host: {w.key for w in ws} for host, ws in kept.by_host().items()},
                *({key: {w.key for w in ws} for key, ws in kept.by_domain(placing, tier).items() if ws}
                  for tier in range(len(snap.fabric.tiers) + 1)))

    for step in range(200):
        name = rng.choice(names)
        namespace = "train" if int(name[1:]) % 2 else "other"
        if rng.random() < 0.2:
            h.state.delete_pod(namespace, name)
        else:
            pod = make_pod(name, namespace).gpus(rng.choice([1, 2])).priority(rng.choice([0, 10]))
            if rng.random() < 0.5:
                pod.gang(f"g{rng.randrange(4)}", 4)
            if rng.random() < 0.8:
                pod.on(rng.choice(hosts))
            body = pod.build()
            if rng.random() < 0.7:
                body["status"]["startTime"] = rng.choice(["2026-01-01T00:00:10Z", "2026-01-01T00:00:20Z"])
            h.state.apply_pod(body)
        if step % 2 == 0:
            assert made(index, True) == made(running.RunningIndex(h.coordinator.owners), False), step
    assert full_builds == [1], "after the first, every change was followed"

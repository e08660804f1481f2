"""Topology-aware gang preemption on the real control plane (docs/preemption.md): real
PriorityClasses, the Eviction API, the real Job controller recreating evicted pods, the
fabricsched scheduler and ``fabricsched run``. Every test also checks that no node ever holds
more GPUs than it has.

The fabric: 2 spines x 2 leaves x 4 hosts of 8 GPUs (128 GPUs).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from preemption_kit import Fabric, preemption_cluster
from waiting import holds_for, wait_for


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    with preemption_cluster(tmp_path_factory.mktemp("preemption-cluster")) as cluster:
        yield cluster


@pytest.fixture
def ns(fabric: Fabric) -> Iterator[str]:
    name = fabric.namespace()
    yield name
    fabric.clean(name)


def fill_with_singles(fabric: Fabric, ns: str, priority: str = "low") -> dict[str, set[str]]:
    """16 one-pod Jobs of 8 GPUs: every host full. Returns each Job's pod UIDs."""
    for i in range(16):
        fabric.job(ns, f"single-{i}", pods=1, priority=priority)
    for i in range(16):
        fabric.placed(ns, f"single-{i}", 1)
    return {f"single-{i}": fabric.uids(ns, f"single-{i}") for i in range(16)}


def survivors(fabric: Fabric, ns: str, before: dict[str, set[str]]) -> list[str]:
    """Jobs whose bound pods are still the ones they had."""
    return [job for job, uids in before.items() if fabric.uids(ns, job) == uids]


def test_equal_priority_and_never_wait_and_evict_nobody(fabric: Fabric, ns: str) -> None:
    before = fill_with_singles(fabric, ns, priority="high")
    fabric.job(ns, "equal", pods=1, priority="high")
    fabric.job(ns, "polite", pods=1, priority="polite")
    holds_for("nothing evicted",
                  lambda: len(survivors(fabric, ns, before)) == 16 and not fabric.overcommitted(), seconds=6)
    assert not fabric.events(ns, "Preempted")
    assert all(not p["spec"].get("nodeName") for job in ("equal", "polite") for p in fabric.job_pods(ns, job))


def test_a_high_single_pod_evicts_exactly_one_low_single_pod(fabric: Fabric, ns: str) -> None:
    before = fill_with_singles(fabric, ns)
    evictions = fabric.metric("fabricsched_preemptions_total")
    fabric.job(ns, "urgent", pods=1, priority="high")
    (node,) = fabric.placed(ns, "urgent", 1)
    assert not fabric.overcommitted()
    gone = [job for job in before if job not in survivors(fabric, ns, before)]
    assert len(gone) == 1, gone
    events = fabric.events(ns, "Preempted")
    assert events and all("urgent" in e["message"] and "priority 1000" in e["message"] for e in events)
    assert fabric.metric("fabricsched_preemptions_total") == evictions + 1
    placement = wait_for("urgent's placement names its victim",
                         lambda: (fabric.placement(ns, "urgent") or {}).get("status", {}).get("preemption"))
    assert [v["name"] for v in placement["victims"]] == gone
    assert placement["domain"] == f"leaf/{fabric.leaf_of[node]}"
    holds_for("no second eviction",
              lambda: len(survivors(fabric, ns, before)) >= 15 and not fabric.overcommitted(), seconds=3)


def test_a_high_leaf_gang_evicts_one_whole_low_gang_never_a_mid_one(fabric: Fabric, ns: str) -> None:
    # One 4-pod gang per leaf fills the fabric: one low, three mid.
    gangs = {"low-a": "low", "mid-b": "mid", "mid-c": "mid", "mid-d": "mid"}
    leaves = {}
    for name, priority in gangs.items():
        fabric.job(ns, name, pods=4, priority=priority, leaf="leaf")
        leaves[name] = {fabric.leaf_of[n] for n in fabric.placed(ns, name, 4)}
    assert all(len(v) == 1 for v in leaves.values())
    before = {name: fabric.uids(ns, name) for name in gangs}
    fabric.job(ns, "urgent", pods=6, gpus=4, priority="high", leaf="leaf")
    placed = fabric.placed(ns, "urgent", 6)
    assert {fabric.leaf_of[n] for n in placed} == leaves["low-a"]
    assert not fabric.overcommitted()
    assert survivors(fabric, ns, before) == ["mid-b", "mid-c", "mid-d"]
    job_events = [e for e in fabric.events(ns, "Preempted") if e["involvedObject"]["kind"] == "Job"]
    assert [e["involvedObject"]["name"] for e in job_events] == ["low-a"]
    assert "urgent" in job_events[0]["message"]
    explained = fabric.explain(ns, "low-a")
    assert "urgent" in str(explained), explained


def test_budgets_choose_the_victim(fabric: Fabric, ns: str) -> None:
    gangs = ["low-a", "low-b", "low-c", "low-d"]
    for name in gangs:
        fabric.job(ns, name, pods=4, leaf="leaf")
        fabric.placed(ns, name, 4)
    # No disruption allowed protects outright; one cannot cover a 4-pod gang; low-d has no budget.
    for name, available in (("low-a", 4), ("low-b", 3), ("low-c", 3)):
        fabric.budget(ns, name, available)
    before = {name: fabric.uids(ns, name) for name in gangs}
    fabric.job(ns, "urgent", pods=6, gpus=4, priority="high", leaf="leaf")
    fabric.placed(ns, "urgent", 6)
    assert survivors(fabric, ns, before) == ["low-a", "low-b", "low-c"]
    assert not fabric.overcommitted()


def test_a_restart_right_after_the_evictions_starts_no_second_round(fabric: Fabric, ns: str) -> None:
    before = fill_with_singles(fabric, ns)
    fabric.job(ns, "urgent", pods=1, priority="high")
    wait_for("the first eviction", lambda: fabric.events(ns, "Preempted"))
    fabric.kill()  # the victim still terminates: its GPUs are not free yet
    fabric.start()
    (node,) = fabric.placed(ns, "urgent", 1)
    assert len(survivors(fabric, ns, before)) == 15
    holds_for("no second eviction",
              lambda: len(survivors(fabric, ns, before)) == 15 and not fabric.overcommitted(), seconds=4)
    placement = fabric.placement(ns, "urgent") or {}
    assert placement["status"]["preemption"]["domain"] == f"leaf/{fabric.leaf_of[node]}"

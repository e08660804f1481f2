"""The sweep keeps its index of running workloads warm between decisions (docs/preemption.md):
after a pod on a node changed, the next tick makes it, so the decision that follows computes
no gang key and builds no candidate; a tick with nothing changed does nothing."""

from __future__ import annotations

import gc

import pytest
from extender_harness import Harness, PlayedEvictions, fabric_nodes

from builders import make_pod
from fabricsched import ids
from fabricsched.extender.decide import preempting, preemption_options
from fabricsched.topology import nodes


def test_a_decision_after_a_warm_tick_computes_no_key_and_an_idle_tick_does_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(fabric_nodes())
    h.restore()
    for node in sorted(h.state.nodes):
        h.state.apply_pod(make_pod(f"low-{node}", "train").gpus(8).priority(100).on(node).build())
    c = h.coordinator
    calls = PlayedEvictions()
    preempter = preempting.GangPreemption(
        h.state, h.book, c.follower, h.writer, c.events, c.owners, c.pending, c.workloads, calls,
        c._session, h.clock, preemption_options.PreemptionOptions(),
    )
    h.run(preempter.warm())
    made: list[str] = []
    key = c.owners.key

    def counted(pod: nodes.PodUsage) -> ids.GangKey:
        made.append(pod.name)
        return key(pod)

    c.owners.key = counted  # type: ignore[method-assign]
    h.run(preempter.warm())
    assert made == [], "nothing on a node changed: the tick does nothing"
    h.state.apply_pod(make_pod("urgent", "train").gpus(8).priority(1000).scheduler("fabricsched").build())
    assert made == []
    with caplog.at_level("INFO", logger=preempting.__name__):
        h.run(preempter.sweep())
    assert len(calls.evicted) == 1
    assert made == ["urgent"], "the decision computed the preemptor's key alone, no running pod's"
    (line,) = [r.getMessage() for r in caplog.records if "decided in" in r.getMessage()]
    assert "fit check" in line and "workloads" in line and "choice" in line


def test_an_index_made_whole_is_frozen_out_of_the_collectors_sight_and_a_followed_one_is_not() -> None:
    h = Harness(fabric_nodes())
    h.restore()
    hosts = sorted(h.state.nodes)
    for node in hosts:
        h.state.apply_pod(make_pod(f"low-{node}", "train").gpus(4).priority(100).on(node).build())
    c = h.coordinator
    preempter = preempting.GangPreemption(
        h.state, h.book, c.follower, h.writer, c.events, c.owners, c.pending, c.workloads, PlayedEvictions(),
        c._session, h.clock, preemption_options.PreemptionOptions(),
    )
    try:
        before = gc.get_freeze_count()
        h.run(preempter.warm())
        frozen = gc.get_freeze_count()
        assert frozen > before, "the whole index is frozen"
        assert preempter.running.whole_builds == 1
        h.state.apply_pod(make_pod("one-more", "train").gpus(4).priority(100).on(hosts[0]).build())
        h.run(preempter.warm())
        assert preempter.running.whole_builds == 1, "one pod changed: followed, not made whole"
        assert gc.get_freeze_count() <= frozen, "a followed index is not frozen again (freed ones: fewer)"
    finally:
        gc.unfreeze()

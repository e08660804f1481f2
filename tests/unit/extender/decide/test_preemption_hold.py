"""A preemptor's hold while its victims terminate (docs/preemption.md): a preemption round on the
real cluster state, with the Eviction API played in memory (an evicted pod is terminating, its
containers still running through its grace period, as a kubelet keeps them)."""

from __future__ import annotations

from extender_harness import Harness, PlayedEvictions, fabric_nodes

from builders import PodBuilder, make_pod
from fabricsched.api.placement import PlacementPhase
from fabricsched.extender.book import preempted
from fabricsched.extender.decide import preempting, preemption_options
from fabricsched.extender.decide.coordinator import Coordinator

TTL_S = 20.0
GRACE_S = 60


def low_pod(node: str) -> PodBuilder:
    """The low-priority 8-GPU pod on ``node``, with a 60 s grace period."""
    return make_pod(f"low-{node}", "train").gpus(8).priority(100).grace(GRACE_S).on(node)


def full_fabric(h: Harness) -> dict[str, PodBuilder]:
    """One low-priority pod on each of the 16 hosts."""
    pods = {f"low-{node}": low_pod(node) for node in sorted(h.state.nodes)}
    for pod in pods.values():
        h.state.apply_pod(pod.build())
    return pods


def preempting_harness() -> tuple[Harness, PlayedEvictions, preempting.GangPreemption]:
    h = Harness(fabric_nodes(), ttl_s=TTL_S)
    h.restore()
    pods = full_fabric(h)
    # An evicted pod is terminating, its containers still running through its grace period.
    calls = PlayedEvictions(lambda name: h.state.apply_pod(pods[name].terminating().build()))
    c: Coordinator = h.coordinator
    preempter = preempting.GangPreemption(
        h.state, h.book, c.follower, h.writer, c.events, c.owners, c.pending, c.workloads, calls,
        c._session, h.clock, preemption_options.PreemptionOptions(),
    )
    c.preempter = preempter  # housekeeping clears the hold, as in the service
    h.state.apply_pod(make_pod("urgent", "train").gpus(8).priority(1000).scheduler("fabricsched").build())
    h.run(preempter.sweep())
    return h, calls, preempter


def tick(h: Harness, seconds: float) -> None:
    """``seconds`` of housekeeping, one tick a second, as the service runs it."""
    for _ in range(int(seconds)):
        h.clock.advance(1.0)
        h.coordinator.housekeeping()


def test_the_hold_stands_while_the_victim_terminates_and_one_ttl_after() -> None:
    h, calls, _ = preempting_harness()
    (victim,) = calls.evicted
    (entry,) = h.book.entries()
    assert entry.preemption is not None and entry.preemption.grace_s == GRACE_S
    node = entry.ranks[0]
    assert node is not None and victim == f"low-{node}"
    tick(h, GRACE_S - 1)  # three TTLs: the victim still terminates
    held = h.book.get(entry.key)
    assert held is not None and held.phase == PlacementPhase.RESERVED and held.ranks == (node,)
    assert held.preemption is not None and held.preemption.cleared_at is None
    h.state.apply_pod(low_pod(node).terminating(containers_done=True).build())  # its grace is over
    tick(h, 1)
    cleared = h.book.get(entry.key)
    assert cleared is not None and cleared.preemption is not None
    assert cleared.preemption.cleared_at == h.clock.now and cleared.expires_at == h.clock.now + TTL_S
    tick(h, TTL_S - 1)
    assert (kept := h.book.get(entry.key)) is not None and kept.ranks == (node,)
    tick(h, 1)  # the preemptor did not bind within the TTL: its ranks go
    expired = h.book.get(entry.key)
    assert expired is not None and expired.phase == PlacementPhase.EXPIRED and expired.ranks == (None,)


def test_a_victim_that_never_ends_holds_the_domain_no_longer_than_its_grace_and_a_margin() -> None:
    h, _, _ = preempting_harness()
    (entry,) = h.book.entries()
    bound = TTL_S + GRACE_S + preempted.TERMINATION_MARGIN_S
    tick(h, bound - 1)
    assert (held := h.book.get(entry.key)) is not None and held.phase == PlacementPhase.RESERVED
    tick(h, 1)
    expired = h.book.get(entry.key)
    assert expired is not None and expired.phase == PlacementPhase.EXPIRED and expired.ranks == (None,)


def test_the_sweep_passes_over_gated_pods() -> None:
    # No scheduler looks at a gated pod: nothing is evicted for it (and no engine run each second).
    h, _, preempter = preempting_harness()  # urgent has its plan: not waiting any more
    assert preempter._waiting_pods() == []
    gated = make_pod("gated", "other").gpus(8).priority(1000).scheduler("fabricsched").build()
    gated["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    h.state.apply_pod(gated)
    assert preempter._waiting_pods() == []
    del gated["spec"]["schedulingGates"]
    h.state.apply_pod(gated)
    assert [p.name for p in preempter._waiting_pods()] == ["gated"]

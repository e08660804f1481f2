"""Waking the kube-scheduler when capacity frees, while gangs wait (coalesced, rate-limited)."""

from __future__ import annotations

import asyncio

from extender_harness import Harness, fabric_nodes

from fabricsched.extender.kube import wakeup
from fabricsched.ports import errors


class Nudger:
    def __init__(self) -> None:
        self.stamps: list[str] = []
        self.fail = False

    async def nudge(self, stamp: str) -> None:
        if self.fail:
            raise errors.Unavailable("API server away")
        self.stamps.append(stamp)


def run_for(wakeups: wakeup.WakeUps, seconds: float, *actions: object) -> None:
    async def scenario() -> None:
        task = asyncio.create_task(wakeups.run())
        for act in actions:
            assert callable(act)
            act()
            await asyncio.sleep(0)
        await asyncio.sleep(seconds)
        task.cancel()

    asyncio.run(scenario())


def test_a_burst_of_frees_is_one_nudge_while_a_gang_waits() -> None:
    nudger = Nudger()
    wakeups = wakeup.WakeUps(nudger, lambda: True, delay_s=0.01, min_interval_s=0.01)
    run_for(wakeups, 0.1, *[wakeups.freed] * 10)
    assert len(nudger.stamps) == 1 and wakeups.nudges == 1


def test_no_waiting_gang_no_write() -> None:
    nudger = Nudger()
    wakeups = wakeup.WakeUps(nudger, lambda: False, delay_s=0.01, min_interval_s=0.01)
    run_for(wakeups, 0.1, wakeups.freed)
    assert nudger.stamps == []


def test_a_plan_from_yielded_reservations_nudges_though_no_gang_waits_any_more() -> None:
    # The preemptor was planned by the sweep, not by a refused /filter call: no cluster event
    # would make the kube-scheduler retry its pods for 5 minutes.
    nudger = Nudger()
    wakeups = wakeup.WakeUps(nudger, lambda: False, delay_s=0.01, min_interval_s=0.01)
    run_for(wakeups, 0.1, wakeups.planned)
    assert len(nudger.stamps) == 1
    run_for(wakeups, 0.1, wakeups.freed)
    assert len(nudger.stamps) == 1  # once: a later free with nobody waiting writes nothing


def test_the_end_of_a_hold_nudges_once_then_and_not_before() -> None:
    # Nothing in the cluster changes when a hold ends: without this the scheduler would retry
    # the held gang up to 5 minutes late, where the simulator re-decides at once.
    nudger = Nudger()
    wakeups = wakeup.WakeUps(nudger, lambda: False, delay_s=0.01, min_interval_s=0.01)

    async def scenario() -> None:
        task = asyncio.create_task(wakeups.run())
        wakeups.hold_ends_in(0.15)
        wakeups.hold_ends_in(0.15)  # every pod of the gang is refused: one end, one nudge
        await asyncio.sleep(0.08)
        assert nudger.stamps == []  # holding is no reason to nudge
        await asyncio.sleep(0.25)
        task.cancel()

    asyncio.run(scenario())
    assert len(nudger.stamps) == 1


def test_the_coordinator_says_when_a_hold_ends() -> None:
    h = Harness(fabric_nodes())
    h.restore()
    told: list[float] = []
    h.coordinator.on_held = told.append
    block = h.job("block", 4)
    for rank in range(4):
        h.place(h.pod("block", block, rank), ["l1-h0", "l1-h1", "l2-h0", "l2-h1"])
    g = h.pod("g", h.job("g", 4), 0).annotate("fabricsched.io/locality-wait", "300s")
    answer = h.filter(g, ["l1-h2", "l1-h3", "l2-h2", "l2-h3"])
    assert answer.passed == [] and told == [300.0]


def test_a_failed_nudge_is_logged_and_the_next_free_nudges_again() -> None:
    nudger = Nudger()
    nudger.fail = True
    wakeups = wakeup.WakeUps(nudger, lambda: True, delay_s=0.01, min_interval_s=0.01)

    def recover() -> None:
        nudger.fail = False

    async def scenario() -> None:
        task = asyncio.create_task(wakeups.run())
        wakeups.freed()
        await asyncio.sleep(0.1)
        recover()
        wakeups.freed()
        await asyncio.sleep(0.1)
        task.cancel()

    asyncio.run(scenario())
    assert len(nudger.stamps) == 1


def test_the_coordinator_says_freed_when_a_job_ends_and_when_a_reservation_expires() -> None:
    h = Harness(fabric_nodes(), ttl_s=10.0)
    h.restore()
    told: list[int] = []
    h.coordinator.on_freed = lambda: told.append(1)
    uid = h.job("a", 2)
    h.place(h.pod("a", uid, 0))  # rank 1 stays reserved
    h.coordinator.housekeeping()
    assert told == []
    h.clock.now += 11
    h.coordinator.housekeeping()  # the reservation expired: its GPUs are free
    assert told == [1]
    h.end_job("a", uid, 2)
    assert told == [1, 1]

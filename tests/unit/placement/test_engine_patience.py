"""Waiting for locality (``placement.patience``): start now, or hold for a plan near the floor.

Fabric ``two_spines``: 4 hosts x 8 GPUs per leaf, 400 Gbps per GPU, leaves 2:1
(C_leaf = 6400 Gbps). A gang of 4 pods of 8 GPUs fits one leaf: floor 1.0.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from placement_builders import FabricBuilder, all_free, gang

from fabricsched import ids
from fabricsched.placement import capacity, patience, placing, request, snapshot
from fabricsched.topology import fabric

WAIT = request.LocalityWait(timeout_s=3600, tolerance=0.05)
L1 = (0, ids.DomainName("l1"))


def plan(slowdown: float) -> request.Plan:
    """A two-host plan whose figures are given (the decision reads only the slowdown)."""
    ranks = (ids.NodeName("a"), ids.NodeName("b"))
    return request.Plan(ranks, 0, {}, slowdown, False)


@pytest.mark.parametrize(
    ("slowdown", "floor", "waited", "wait", "held"),
    [
        (2.0, 1.0, 0.0, request.LocalityWait(), False),
        (1.05, 1.0, 0.0, WAIT, False),
        (1.19, 1.14, 0.0, WAIT, False),
        (1.0500001, 1.0, 0.0, WAIT, True),
        (1.31, 1.0, 0.0, WAIT, True),
        (1.31, 1.0, 3599.0, WAIT, True),
        (1.31, 1.0, 3600.0, WAIT, False),
        (1.31, 1.0, 99999.0, WAIT, False),
        (1.31, math.inf, 0.0, WAIT, False),
        (1.31, 1.0, -50.0, WAIT, True),
        (1.0, 1.0, 0.0, request.LocalityWait(3600, tolerance=0.0), False),
    ],
    ids=[
        "with the wait off a gang starts at once however far above its floor",
        "a plan exactly 5% above the floor starts at once",
        "a plan within 5% of a floor above 1 starts at once",
        "a plan just over 5% above the floor is held",
        "a plan 31% above the floor is held at submission",
        "one second before the timeout the gang is still held",
        "at the timeout the gang starts on the plan it has",
        "long past the timeout the gang starts",
        "a gang whose floor is unknown is never held",
        "a clock that runs backwards counts as no wait yet",
        "a plan at the floor starts even with zero tolerance",
    ],
)
def test_decide(slowdown: float, floor: float, waited: float, wait: request.LocalityWait, held: bool) -> None:
    decision = patience.decide(plan(slowdown), floor, patience.Held(waited, waited), wait)
    assert isinstance(decision, patience.Wait) is held


def test_a_held_gang_says_why_and_how_long_it_may_still_wait() -> None:
    decision = patience.decide(plan(1.31), 1.0, patience.Held(1200, 1200), WAIT)
    assert isinstance(decision, patience.Wait)
    assert decision.retry_in_s == 2400
    assert decision.reason == ("waiting up to 2400 s more (timeout 3600 s) for a placement within 5% "
                               "of its floor 1.00x: best now 1.31x")


def test_a_gang_started_by_the_timeout_says_so() -> None:
    decision = patience.decide(plan(1.31), 1.0, patience.Held(3600, 3600), WAIT)
    assert isinstance(decision, patience.Start)
    assert decision.reason is not None and "timeout 3600 s" in decision.reason and "1.31x" in decision.reason


def test_a_re_hold_waits_a_fresh_timeout_while_the_first_hold_is_younger_than_the_limit() -> None:
    # Held 3000 s in all, this hold 0 s: a whole new timeout of 3600 s.
    decision = patience.decide(plan(1.31), 1.0, patience.Held(0, 3000), WAIT)
    assert isinstance(decision, patience.Wait) and decision.retry_in_s == 3600
    # Its own timeout, not the 7200 s limit, says when to ask again at the latest.
    late = patience.decide(plan(1.31), 1.0, patience.Held(100, 6000), WAIT)
    assert isinstance(late, patience.Wait) and late.retry_in_s == 3500


def test_a_gang_held_for_the_hold_limit_in_all_starts_and_says_so() -> None:
    decision = patience.decide(plan(1.31), 1.0, patience.Held(100, 7200), WAIT)
    assert isinstance(decision, patience.Start)
    assert decision.reason is not None and "held 7200 s in all (2x the timeout 3600 s)" in decision.reason


def test_a_hold_limit_of_one_counts_every_hold_from_the_first() -> None:
    once = dataclasses.replace(WAIT, hold_limit=1.0)
    assert isinstance(patience.decide(plan(1.31), 1.0, patience.Held(0, 3600), once), patience.Start)
    decision = patience.decide(plan(1.31), 1.0, patience.Held(0, 1200), once)
    assert isinstance(decision, patience.Wait) and decision.retry_in_s == 2400


@pytest.mark.parametrize("limit", [0.5, 0.0, -1.0, math.nan, math.inf, request.MAX_HOLD_LIMIT + 1])
def test_a_hold_limit_below_one_timeout_or_unbounded_is_rejected(limit: float) -> None:
    with pytest.raises(ValueError, match="hold limit"):
        request.LocalityWait(3600, 0.05, limit)


@given(
    slowdown=st.floats(1.0, 10.0),
    this=st.floats(0.0, 1e5),
    before=st.floats(0.0, 1e5),
    timeout=st.floats(1.0, 1e5),
    limit=st.floats(1.0, request.MAX_HOLD_LIMIT),
)
def test_no_gang_is_held_past_its_hold_limit(
    slowdown: float, this: float, before: float, timeout: float, limit: float
) -> None:
    wait = request.LocalityWait(timeout, 0.05, limit)
    held = patience.Held(this, this + before)
    decision = patience.decide(plan(slowdown), 1.0, held, wait)
    if isinstance(decision, patience.Wait):
        assert held.total_s < limit * timeout
        assert this + decision.retry_in_s <= timeout + 1e-6
    else:  # started: within tolerance never happens at floor 1.0 above 1.05x, so a clock ran out
        assert slowdown <= 1.05 + 1e-9 or this >= timeout - 1e-6 or held.total_s >= limit * timeout - 1e-6


@given(
    slowdown=st.floats(1.0, 10.0),
    floor=st.floats(1.0, 3.0),
    waited=st.floats(-100.0, 1e6),
    timeout=st.floats(0.0, 1e5),
    tolerance=st.floats(0.0, 0.5),
)
def test_a_gang_is_never_held_past_its_timeout(
    slowdown: float, floor: float, waited: float, timeout: float, tolerance: float
) -> None:
    wait = request.LocalityWait(timeout, tolerance)
    decision = patience.decide(plan(slowdown), floor, patience.Held(waited, waited), wait)
    if isinstance(decision, patience.Wait):
        assert waited < timeout
        assert 0 < decision.retry_in_s <= timeout
        assert max(0.0, waited) + decision.retry_in_s == pytest.approx(timeout)
        assert slowdown > floor * (1 + tolerance)
    else:
        reached = max(0.0, waited) >= timeout - 1e-6
        assert reached or slowdown <= floor * (1 + tolerance) + 1e-9 or timeout == 0


@pytest.mark.parametrize(
    ("timeout", "tolerance"),
    [(math.inf, 0.05), (-1.0, 0.05), (math.nan, 0.05), (60.0, -0.1), (60.0, math.inf)],
    ids=["an endless timeout", "a negative timeout", "a timeout that is not a number",
         "a negative tolerance", "an infinite tolerance"],
)
def test_options_that_could_hold_a_gang_forever_or_mean_nothing_are_rejected(
    timeout: float, tolerance: float
) -> None:
    with pytest.raises(ValueError, match="locality wait"):
        request.LocalityWait(timeout, tolerance)


def test_the_wait_is_off_in_the_engine_options_by_default() -> None:
    assert not request.PlacementOptions().locality_wait.enabled


def busy_leaves(two_spines: fabric.Fabric) -> dict[ids.NodeName, int]:
    """Two hosts free in l1 and two in l2; l3 and l4 full: a 4-pod gang must split 2 + 2."""
    used = {f"{leaf}-h{i}": 8 for leaf in ("l1", "l2") for i in (0, 1)}
    used |= {f"{leaf}-h{i}": 8 for leaf in ("l3", "l4") for i in range(4)}
    return all_free(two_spines, used)


def test_with_the_engine_a_split_gang_on_busy_uplinks_is_held(two_spines: fabric.Fabric) -> None:
    # Split 2 + 2, each leaf gets D = 2 x 3200 x 2 / 3 = 4267 Gbps on top of 6400 already
    # there: rho = (6400 + 4267) / 6400 = 1.67 against a floor of 1 (one whole leaf).
    traffic = capacity.Traffic({L1: 6400.0, (0, ids.DomainName("l2")): 6400.0})
    g = gang(4)
    result = placing.place(snapshot.build(two_spines), busy_leaves(two_spines), g, traffic)
    assert isinstance(result, request.Plan)
    assert result.comm_slowdown == pytest.approx((6400 + 2 * 3200 * 2 / 3) / 6400)
    floors = patience.Floors()
    held = patience.hold_for(floors, two_spines, g, result, patience.Held(), WAIT)
    assert isinstance(held, patience.Wait)
    off = request.LocalityWait()
    assert patience.hold_for(floors, two_spines, g, result, patience.Held(), off) == patience.Start()


def test_a_gang_whose_only_plan_crosses_a_lasting_degradation_starts_at_the_timeout() -> None:
    # One leaf, two hosts, one with a degraded link: the only plan runs at 1 / 0.5 = 2.0 for as
    # long as the link stays degraded; the floor (healthy fabric) is 1.0.
    fab = FabricBuilder(tiers=[("leaf", 2.0)]).leaf("l1", hosts=2).degrade_host("l1-h1").build()
    g = gang(2)
    result = placing.place(snapshot.build(fab), all_free(fab), g)
    assert isinstance(result, request.Plan) and result.comm_slowdown == 2.0
    floors = patience.Floors()
    before, at = patience.Held(3599.0, 3599.0), patience.Held(3600.0, 3600.0)
    assert isinstance(patience.hold_for(floors, fab, g, result, before, WAIT), patience.Wait)
    assert isinstance(patience.hold_for(floors, fab, g, result, at, WAIT), patience.Start)


def test_floors_are_the_engine_plan_alone_in_the_empty_healthy_fabric(two_spines: fabric.Fabric) -> None:
    floors = patience.Floors()
    for pods in (1, 4, 8, 12, 16):
        assert floors.slowdown(two_spines, pods, 8) == patience.floor_slowdown(two_spines, pods, 8)
    assert floors.slowdown(two_spines, 8, 8) == pytest.approx(8 / 7)
    assert floors.slowdown(two_spines, 40, 8) == math.inf


def test_floors_are_computed_once_per_structure_whatever_the_health(
    two_spines: fabric.Fabric, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int]] = []
    real = patience.floor_slowdown

    def counting(fab: fabric.Fabric, pods: int, gpus_per_pod: int,
                 pattern: request.Pattern = request.Pattern.ALL_TO_ALL, *,
                 eligible: frozenset[ids.NodeName] | None = None) -> float:
        calls.append((pods, gpus_per_pod))
        return real(fab, pods, gpus_per_pod, pattern, eligible=eligible)

    monkeypatch.setattr(patience, "floor_slowdown", counting)
    degraded = (FabricBuilder().spine("s1").leaf("l1").leaf("l2").spine("s2").leaf("l3").leaf("l4")
                .degrade("leaf", "l1", 0.25).degrade_host("l2-h0").build())
    floors = patience.Floors()
    first = floors.slowdown(two_spines, 8, 8)
    assert floors.slowdown(degraded, 8, 8) == first  # the same structure: health is left out
    assert floors.slowdown(two_spines, 8, 4) == floors.slowdown(degraded, 8, 4)
    assert calls == [(8, 8), (8, 4)]
    bigger = FabricBuilder().spine("s1").leaf("l1", hosts=8).leaf("l2").build()
    assert floors.slowdown(bigger, 8, 8) == 1.0  # another structure: its own floor
    assert calls[-1] == (8, 8) and len(calls) == 3
    # A ring's floor is its own: one edge out of each leaf, not 4 x 4 / 7 pods' worth.
    assert floors.slowdown(two_spines, 8, 8, request.Pattern.RING) == 1.0
    assert len(calls) == 4


def test_clocks_as_the_simulator_uses_them_start_a_hold_only_when_told() -> None:
    """The simulator reads the clock before the policy decides and starts it only on a hold;
    ``waited`` (the extender's) is the same clock read once started."""
    key, clocks = ids.GangKey("job-0"), patience.Clocks()
    assert clocks.held(key, 100.0) == patience.Held()
    assert len(clocks) == 0  # reading starts no clock
    clocks.hold(key, 100.0)
    clocks.hold(key, 400.0)  # still held: the hold began at 100
    assert clocks.holding() == [key]
    assert clocks.held(key, 700.0) == patience.Held(600.0, 600.0)
    clocks.lost_fit(key, 800.0)
    assert clocks.holding() == []
    assert clocks.held(key, 900.0) == patience.Held(0.0, 800.0)  # the first hold is kept
    clocks.hold(key, 900.0)
    assert clocks.waited(key, 1000.0) == patience.Held(100.0, 900.0)
    clocks.forget(key)  # it started
    assert clocks.held(key, 1000.0) == patience.Held()

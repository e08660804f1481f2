"""A gang restarted as a whole goes back where it ran (``placement.previous``), when that is as
good as the fresh plan; through the session, as the extender and the simulator ask it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from placement_builders import FabricBuilder, all_free, gang

from fabricsched import ids
from fabricsched.placement import placing, request, session
from fabricsched.topology import fabric


def _fabric(degraded: Sequence[str] = ()) -> fabric.Fabric:
    """s1: l1, l2; s2: l3, l4; 4 hosts x 8 GPUs per leaf, leaves 2:1."""
    built = FabricBuilder().spine("s1").leaf("l1").leaf("l2").spine("s2").leaf("l3").leaf("l4")
    for host in degraded:
        built.degrade_host(host)
    return built.build()


def _before(*hosts: str) -> request.Previous:
    return request.Previous(tuple(ids.NodeName(h) for h in hosts))


def _plan(fab: fabric.Fabric, used: dict[str, int], ask: request.GangRequest,
          before: request.Previous | None) -> request.Plan:
    made = session.Session().place(fab, all_free(fab, used), ask, before=before)
    assert isinstance(made, request.Plan), made
    return made


# l1 is the tightest leaf (one host taken): best fit alone puts a 2-pod gang there.
PARTLY_USED_L1 = {"l1-h0": 8}


def test_without_a_hint_best_fit_takes_the_tightest_leaf() -> None:
    made = _plan(_fabric(), PARTLY_USED_L1, gang(2), None)
    assert {h[:2] for h in made.ranks} == {"l1"}
    assert not any("previous" in r for r in made.reasons)


def test_previous_hosts_free_again_take_the_same_ranks_back() -> None:
    # Rank 0 ran on l4-h1, rank 1 on l4-h0 (not fabric order): each rank returns to its node.
    made = _plan(_fabric(), PARTLY_USED_L1, gang(2), _before("l4-h1", "l4-h0"))
    assert made.ranks == ("l4-h1", "l4-h0")
    assert made.reasons[0] == "back on its previous hosts"
    assert made.domains[0] == ("l4",) and made.comm_slowdown == pytest.approx(1.0)


def test_previous_hosts_partly_taken_keep_the_gang_in_its_previous_leaf() -> None:
    made = _plan(_fabric(), {**PARTLY_USED_L1, "l4-h0": 8}, gang(2), _before("l4-h0", "l4-h1"))
    assert {h[:2] for h in made.ranks} == {"l4"} and "l4-h0" not in made.ranks
    assert made.reasons[0] == "back in its previous leaf l4"


def test_previous_leaf_full_gives_the_fresh_plan_and_says_why() -> None:
    full = {**PARTLY_USED_L1, "l4-h0": 8, "l4-h1": 8, "l4-h2": 8}
    made = _plan(_fabric(), full, gang(2), _before("l4-h0", "l4-h1"))
    fresh = _plan(_fabric(), full, gang(2), None)
    assert made == _with_note(fresh, "not back in its previous leaf l4: no room there now")


def test_previous_leaf_now_degraded_gives_the_fresh_healthy_plan() -> None:
    # The leaf's only free hosts are the previous ones, and their links degraded since.
    fab = _fabric(degraded=("l4-h0", "l4-h1"))
    used = {**PARTLY_USED_L1, "l4-h2": 8, "l4-h3": 8}
    made = _plan(fab, used, gang(2), _before("l4-h0", "l4-h1"))
    fresh = _plan(fab, used, gang(2), None)
    assert made.ranks == fresh.ranks and "l4" not in {h[:2] for h in made.ranks} and not made.degraded_path
    assert made.reasons[-1].startswith("not back in its previous leaf l4: its path there crosses host l4-h0")


def test_a_previous_placement_spanning_two_leaves_goes_back_to_its_spine() -> None:
    # 6 pods: s1 is the tighter spine (6 hosts free), but the gang ran across l3 and l4 (s2).
    used = {"l1-h0": 8, "l1-h1": 8, "l3-h0": 8}
    fresh = _plan(_fabric(), used, gang(6), None)
    assert {h[:2] for h in fresh.ranks} == {"l1", "l2"}
    made = _plan(_fabric(), used, gang(6), _before("l3-h0", "l3-h1", "l4-h0", "l4-h1", "l4-h2", "l4-h3"))
    assert {h[:2] for h in made.ranks} == {"l3", "l4"}
    assert made.reasons[0] == "back in its previous spine s2"
    assert made.comm_slowdown <= fresh.comm_slowdown * (1 + 1e-9)


def test_a_previous_placement_spanning_two_leaves_returns_on_its_hosts_when_free() -> None:
    before = _before("l3-h2", "l3-h3", "l4-h0", "l4-h1", "l4-h2", "l4-h3")
    made = _plan(_fabric(), {"l1-h0": 8, "l1-h1": 8}, gang(6), before)
    assert made.ranks == before.ranks and made.reasons[0] == "back on its previous hosts"


def test_a_higher_slowdown_back_home_gives_the_fresh_plan() -> None:
    # The previous hosts span two leaves; the fresh plan fits one leaf with no shared uplink:
    # with traffic on s2's leaves' uplinks, going back would be slower.
    fab = _fabric()
    running = session.Session()
    running.running.start(ids.GangKey("noisy"), fab, [ids.NodeName(h) for h in ("l3-h0", "l4-h3")], 8)
    free = all_free(fab, {"l3-h0": 8, "l4-h3": 8})
    fresh = placing.place(running.snapshot(fab), free, gang(4), running.running.traffic)
    assert isinstance(fresh, request.Plan) and len({h[:2] for h in fresh.ranks}) == 1
    made = running.place(fab, free, gang(4), before=_before("l3-h1", "l3-h2", "l4-h0", "l4-h1"))
    assert isinstance(made, request.Plan) and made.ranks == fresh.ranks
    assert made.reasons[-1].startswith("not back on its previous hosts: comm slowdown")


def test_a_required_tier_is_kept_when_going_back() -> None:
    # Required leaf: the previous hosts span two leaves, so only a plan inside one leaf counts.
    made = _plan(_fabric(), PARTLY_USED_L1, gang(2, tier=0, required=True), _before("l3-h3", "l4-h0"))
    assert len({h[:2] for h in made.ranks}) == 1


def test_the_hint_costs_one_engine_call_at_most(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = placing.place

    def counted(*args: object, **kwargs: object) -> request.Plan | request.NoFit:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(placing, "place", counted)
    _plan(_fabric(), PARTLY_USED_L1, gang(2), None)
    assert len(calls) == 1
    _plan(_fabric(), PARTLY_USED_L1, gang(2), _before("l4-h0", "l4-h1"))
    assert len(calls) == 3
    # Best fit picked the previous hosts itself: no call more, the ranks as before.
    made = _plan(_fabric(), PARTLY_USED_L1, gang(2), _before("l1-h2", "l1-h1"))
    assert len(calls) == 4 and made.ranks == ("l1-h2", "l1-h1")
    # Best fit went back to the previous leaf itself (its previous hosts are taken): no call more.
    made = _plan(_fabric(), {**PARTLY_USED_L1, "l1-h2": 8}, gang(2), _before("l1-h2", "l1-h1"))
    assert len(calls) == 5 and {h[:2] for h in made.ranks} == {"l1"}
    assert made.reasons[0] == "back in its previous leaf l1"


def _with_note(plan: request.Plan, note: str) -> request.Plan:
    return request.Plan(plan.ranks, plan.tier, plan.domains, plan.comm_slowdown, plan.degraded_path,
                        (*plan.reasons, note), plan.slice_domains)

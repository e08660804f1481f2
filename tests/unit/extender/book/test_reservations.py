"""The book of plans: holding, binding, expiry and release, with the clock passed in."""

from __future__ import annotations

from fabricsched import ids
from fabricsched.api.placement import PlacementPhase
from fabricsched.extender.book import reservations

Phase = PlacementPhase
N = ids.NodeName
T0 = 1000.0


def entry(
    key: str = "train/a@u1", ranks: tuple[str | None, ...] = ("n1", "n1", "n2"), gpus: int = 4
) -> reservations.Entry:
    return reservations.Entry(
        key=ids.GangKey(key),
        namespace="train",
        name=key.split("/")[1].split("@")[0],
        job_uid="u1",
        job_name="a",
        size=len(ranks),
        gpus_per_pod=gpus,
        topology=ids.TopologyName("ib-east"),
        tier=None,
        required=False,
        ranks=tuple(N(r) if r else None for r in ranks),
    )


def book(ttl: float = 120.0) -> reservations.Book:
    return reservations.Book(reservations.BookOptions(ttl))


def test_a_new_plan_holds_every_rank_until_it_binds() -> None:
    b = book()
    made = b.reserve(entry(), T0)
    assert made.phase is Phase.RESERVED and made.expires_at == T0 + 120
    assert b.reserved_gpus() == {"n1": 8, "n2": 4}


def test_a_gang_does_not_see_its_own_reservation_as_taken() -> None:
    b = book()
    b.reserve(entry(), T0)
    b.reserve(entry("train/b@u2", ("n2",)), T0)
    assert b.reserved_gpus(exclude=ids.GangKey("train/a@u1")) == {"n2": 4}
    assert b.reserved_gpus(exclude=ids.GangKey("train/b@u2")) == {"n1": 8, "n2": 4}


def test_bound_ranks_stop_being_held_and_all_bound_means_bound() -> None:
    b = book()
    key = b.reserve(entry(), T0).key
    b.set_bound(key, {0: N("n1")}, T0 + 5)
    assert b.reserved_gpus() == {"n1": 4, "n2": 4}
    done = b.set_bound(key, {0: N("n1"), 1: N("n1"), 2: N("n2")}, T0 + 6)
    assert done is not None and done.phase is Phase.BOUND and b.reserved_gpus() == {}


def test_a_rank_whose_pod_ended_is_held_on_its_node_for_the_replacement() -> None:
    b = book()
    key = b.reserve(entry(), T0).key
    b.set_bound(key, {0: N("n1"), 1: N("n1"), 2: N("n2")}, T0)
    again = b.set_bound(key, {0: N("n1"), 1: N("n1")}, T0 + 50)
    assert again is not None and again.phase is Phase.RESERVED
    assert again.ranks[2] == "n2" and b.reserved_gpus() == {"n2": 4}
    assert again.expires_at == T0 + 50 + 120


def test_expiry_releases_only_the_unbound_ranks() -> None:
    b = book(ttl=60)
    key = b.reserve(entry(), T0).key
    b.set_bound(key, {0: N("n1")}, T0 + 10)
    assert b.expire(T0 + 69) == []
    (expired,) = b.expire(T0 + 70)
    assert expired.phase is Phase.EXPIRED and expired.ranks == ("n1", None, None)
    assert b.reserved_gpus() == {}
    assert expired.reasons[-1] == "unbound ranks released after 60 s"


def test_a_newly_bound_rank_restarts_the_expiry_clock() -> None:
    b = book(ttl=60)
    key = b.reserve(entry(), T0).key
    b.set_bound(key, {0: N("n1")}, T0 + 50)
    assert b.expire(T0 + 100) == []
    assert len(b.expire(T0 + 110)) == 1


def test_replanning_moves_unbound_ranks_and_refuses_bound_ones() -> None:
    b = book()
    key = b.reserve(entry(), T0).key
    b.set_bound(key, {0: N("n1")}, T0)
    moved = b.replan(key, {2: N("n3")}, T0 + 1)
    assert moved.ranks == ("n1", "n1", "n3") and b.reserved_gpus() == {"n1": 4, "n3": 4}
    try:
        b.replan(key, {0: N("n9")}, T0 + 2)
    except ValueError as e:
        assert "bound" in str(e)
    else:
        raise AssertionError("a bound rank was planned again")


def test_release_frees_everything_and_forgets_the_gang() -> None:
    b = book()
    key = b.reserve(entry(), T0).key
    final = b.release(key, "Job train/a finished")
    assert final is not None and final.phase is Phase.RELEASED and final.reasons[-1] == "Job train/a finished"
    assert b.get(key) is None and b.reserved_gpus() == {} and b.release(key, "again") is None


def test_pods_without_a_rank_get_the_lowest_free_rank_and_keep_it() -> None:
    b = book()
    key = b.reserve(entry(), T0).key
    assert b.assign(key, "p1", ["p1"]) == 0
    assert b.assign(key, "p2", ["p1", "p2"]) == 1
    assert b.assign(key, "p1", ["p1", "p2"]) == 0
    # p1 is gone: its rank goes to the next pod.
    assert b.assign(key, "p3", ["p2", "p3"]) == 0
    assert b.assign(key, "p4", ["p2", "p3", "p4"]) == 2
    assert b.assign(key, "p5", ["p2", "p3", "p4", "p5"]) is None


def test_replanning_a_reserved_gang_keeps_its_expiry_clock() -> None:
    # Only a bind extends a reservation: moving an unbound rank (its pod deleted and created
    # again, its node taken) must not hold the gang's GPUs for another TTL.
    b = book(ttl=120)
    key = b.reserve(entry(), T0).key
    moved = b.replan(key, {2: N("n3")}, T0 + 100)
    assert moved.expires_at == T0 + 120
    assert len(b.expire(T0 + 121)) == 1


def test_replanning_an_expired_gang_starts_a_new_clock() -> None:
    b = book(ttl=120)
    key = b.reserve(entry(), T0).key
    (expired,) = b.expire(T0 + 121)
    assert expired.phase == Phase.EXPIRED
    again = b.replan(key, {0: N("n1"), 1: N("n1"), 2: N("n2")}, T0 + 200)
    assert again.phase == Phase.RESERVED and again.expires_at == T0 + 320

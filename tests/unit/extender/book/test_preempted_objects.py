"""The preemption records survive the FabricPlacement round trip (a restart resumes the hold)."""

from __future__ import annotations

import dataclasses

from fabricsched import ids
from fabricsched.api.placement import PlacementPhase
from fabricsched.extender.book import objects, preempted, reservations


def test_hold_and_preempted_by_read_back() -> None:
    victim = preempted.EvictedWorkload(ids.gang_key("ns", "low", ""), "ns", "low", 100, 8, ("u1", "u2"))
    entry = reservations.Entry(
        key=ids.gang_key("ns", "urgent", "uid"), namespace="ns", name="urgent", job_uid="uid",
        job_name="urgent", size=1, gpus_per_pod=8, topology=ids.TopologyName("t"), tier="leaf", required=True,
        ranks=(ids.NodeName("gpu-1"),), expires_at=1_000_000.0, priority=1000,
        preemption=preempted.PreemptionHold((victim,), "leaf/l1", 999_000.0),
        preempted_by=preempted.PreemptedRecord("ns/top", 5000, "leaf/l2", 998_000.0),
    )
    back = objects.entry_of(objects.manifest_of(entry))
    assert back.priority == 1000
    assert back.preemption == entry.preemption
    assert back.preempted_by == entry.preempted_by
    assert entry.preemption is not None
    hold = dataclasses.replace(entry.preemption, cleared_at=999_500.0)
    cleared = dataclasses.replace(entry, preemption=hold)
    assert objects.entry_of(objects.manifest_of(cleared)).preemption == cleared.preemption


TTL_S = 20.0
GRACE_S = 60.0


def held_gang(book: reservations.Book, size: int = 1, at: float = 0.0) -> reservations.Entry:
    """A preemptor's fresh plan, reserved at ``at``, whose victims have a 60 s grace period."""
    hold = preempted.PreemptionHold((), "leaf/l1", at, grace_s=GRACE_S)
    entry = reservations.Entry(
        key=ids.gang_key("ns", "g", "u"), namespace="ns", name="g", job_uid="u", job_name="g", size=size,
        gpus_per_pod=8, topology=ids.TopologyName("t"), tier=None, required=False,
        ranks=tuple(ids.NodeName(f"gpu-{r}") for r in range(size)), preemption=hold,
    )
    return book.reserve(entry, at)


def test_the_hold_outlives_the_ttl_while_its_victims_terminate() -> None:
    book = reservations.Book(reservations.BookOptions(TTL_S))
    entry = held_gang(book)
    # The TTL, the victims' grace period and the margin: the victims' end is awaited.
    assert entry.expires_at == TTL_S + GRACE_S + preempted.TERMINATION_MARGIN_S
    assert book.expire(TTL_S + 1) == [] and book.expire(GRACE_S + 1) == []
    kept = book.get(entry.key)
    assert kept is not None and kept.ranks == entry.ranks and kept.phase == PlacementPhase.RESERVED


def test_once_the_victims_are_gone_the_preemptor_has_one_ttl_to_bind() -> None:
    book = reservations.Book(reservations.BookOptions(TTL_S))
    entry = held_gang(book)
    cleared = book.clear_hold(entry.key, GRACE_S)
    assert cleared is not None and cleared.preemption is not None
    assert cleared.preemption.cleared_at == GRACE_S and cleared.expires_at == GRACE_S + TTL_S
    assert book.clear_hold(entry.key, GRACE_S + 1) is None  # cleared once
    assert book.expire(GRACE_S + TTL_S - 1) == []
    (expired,) = book.expire(GRACE_S + TTL_S)
    assert expired.ranks == (None,) and expired.phase == PlacementPhase.EXPIRED
    assert expired.reasons[-1] == f"unbound ranks released after {TTL_S:g} s"


def test_the_hold_is_bounded_when_a_victim_never_ends() -> None:
    book = reservations.Book(reservations.BookOptions(TTL_S))
    entry = held_gang(book)
    (expired,) = book.expire(entry.expires_at)
    assert expired.ranks == (None,) and expired.phase == PlacementPhase.EXPIRED
    assert "did not end within their grace period" in expired.reasons[-1]
    # A victim that ends after all clears the record; the expired plan keeps its clock.
    after = book.clear_hold(entry.key, entry.expires_at + 5)
    assert after is not None and after.phase == PlacementPhase.EXPIRED
    assert after.expires_at == entry.expires_at


def test_a_rank_bound_during_the_hold_does_not_shorten_it() -> None:
    book = reservations.Book(reservations.BookOptions(TTL_S))
    entry = held_gang(book, size=2)
    moved = book.set_bound(entry.key, {0: ids.NodeName("gpu-0")}, 5.0)
    assert moved is not None and moved.expires_at == entry.expires_at
    assert book.expire(TTL_S + 6) == []


def test_a_stored_hold_keeps_its_expiry() -> None:
    # The grace period is not on the object: its expiresAt carries the bound across a restart.
    book = reservations.Book(reservations.BookOptions(TTL_S))
    entry = held_gang(book, at=1_000_000.0)
    back = objects.entry_of(objects.manifest_of(entry))
    assert back.expires_at == entry.expires_at
    assert back.preemption is not None and back.preemption.cleared_at is None

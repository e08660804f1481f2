"""The preemption records survive the FabricPlacement round trip (a restart resumes the hold)."""

from __future__ import annotations

import dataclasses

from fabricsched import ids
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


def test_the_hold_does_not_expire_before_its_victims_are_gone() -> None:
    book = reservations.Book(reservations.BookOptions(10.0))
    hold = preempted.PreemptionHold((), "leaf/l1", 0.0)
    entry = reservations.Entry(
        key=ids.gang_key("ns", "g", "u"), namespace="ns", name="g", job_uid="u", job_name="g", size=1,
        gpus_per_pod=8, topology=ids.TopologyName("t"), tier=None, required=False,
        ranks=(ids.NodeName("gpu-1"),), preemption=hold,
    )
    book.reserve(entry, 0.0)
    assert book.expire(100.0) == []
    book.put(dataclasses.replace(book.get(entry.key), preemption=dataclasses.replace(hold, cleared_at=100.0)))
    assert len(book.expire(200.0)) == 1

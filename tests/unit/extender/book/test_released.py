"""The plans released lately (``book.released``): bounded in time and size, read back from a
Released object's condition after a restart."""

from __future__ import annotations

import dataclasses

import pytest

from fabricsched import ids
from fabricsched.api.placement import PlacementPhase
from fabricsched.extender.book import conditions, objects, released, reservations

T0 = 1_800_000_000.0
TOPOLOGY = ids.TopologyName("ib-east")


def _entry(name: str = "g", ranks: tuple[str | None, ...] = ("l4-h1", "l4-h0")) -> reservations.Entry:
    return reservations.Entry(
        key=ids.GangKey(f"train/{name}"), namespace="train", name=name, job_uid="", job_name=None,
        size=len(ranks), gpus_per_pod=8, topology=TOPOLOGY, tier=None, required=False,
        ranks=tuple(None if n is None else ids.NodeName(n) for n in ranks),
        phase=PlacementPhase.RELEASED, reasons=("all pods ended",),
    )


def test_a_release_is_a_hint_within_the_window_only() -> None:
    kept = released.Releases(window_s=3600)
    kept.remember(_entry(), T0)
    hint = kept.previous(ids.GangKey("train/g"), TOPOLOGY, T0 + 3600)
    assert hint is not None and hint.ranks == ("l4-h1", "l4-h0")
    assert kept.previous(ids.GangKey("train/g"), TOPOLOGY, T0 + 3601) is None
    assert kept.previous(ids.GangKey("train/g"), ids.TopologyName("other"), T0) is None
    assert kept.previous(ids.GangKey("train/h"), TOPOLOGY, T0) is None


def test_a_window_of_zero_keeps_nothing() -> None:
    kept = released.Releases(window_s=0)
    kept.remember(_entry(), T0)
    assert len(kept) == 0 and kept.previous(ids.GangKey("train/g"), TOPOLOGY, T0) is None
    with pytest.raises(ValueError, match="0 or more"):
        released.Releases(window_s=-1)


def test_ranks_let_go_by_expiry_leave_only_the_placed_ones() -> None:
    kept = released.Releases()
    kept.remember(_entry(ranks=("l4-h0", None)), T0)
    hint = kept.previous(ids.GangKey("train/g"), TOPOLOGY, T0)
    assert hint is not None and hint.ranks == ("l4-h0",)
    kept.remember(_entry("none", ranks=(None, None)), T0)
    assert kept.previous(ids.GangKey("train/none"), TOPOLOGY, T0) is None


def test_the_oldest_are_forgotten_first_past_the_limit_or_the_window() -> None:
    kept = released.Releases(window_s=100, limit=2)
    for i, name in enumerate(("a", "b", "c")):
        kept.remember(_entry(name), T0 + i)
    assert len(kept) == 2 and kept.previous(ids.GangKey("train/a"), TOPOLOGY, T0 + 2) is None
    kept.remember(_entry("d"), T0 + 500)
    assert len(kept) == 1


def test_a_released_object_read_back_is_dated_by_its_released_condition() -> None:
    entry = _entry()
    manifest = objects.manifest_of(entry, conditions.of(entry, (), T0))
    read = objects.entry_of(manifest)
    assert released.released_at(read) == pytest.approx(T0)
    kept = released.Releases()
    kept.restore(read, T0 + 60)
    assert kept.previous(ids.GangKey("train/g"), TOPOLOGY, T0 + 60) is not None


def test_an_object_without_a_readable_release_date_is_no_hint() -> None:
    undated = dataclasses.replace(_entry(), conditions=())
    kept = released.Releases()
    kept.restore(undated, T0)
    active = dataclasses.replace(_entry(), phase=PlacementPhase.BOUND)
    kept.restore(objects.entry_of(objects.manifest_of(active, conditions.of(active, (), T0))), T0)
    assert len(kept) == 0

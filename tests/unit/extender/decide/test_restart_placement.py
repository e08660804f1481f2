"""A gang whose whole group was restarted (every pod ended, its plan Released, new pods of the
same gang) is planned back where it ran, through the extender's book and coordinator
(``fabricsched run --restart-placement``, docs/placement.md)."""

from __future__ import annotations

from extender_harness import Harness, fabric_nodes

from builders import PodBuilder, make_pod
from fabricsched.api.placement import PlacementPhase
from fabricsched.extender.book import objects, released

WINDOW_S = released.DEFAULT_WINDOW_S


def _members(generation: str, size: int = 2) -> list[PodBuilder]:
    """The pods of gang ``g``, one generation of them (a restart makes new pods, same gang)."""
    return [make_pod(f"g-{generation}-{r}", "train").gang("g", size).gpus(8).scheduler("fabricsched")
            for r in range(size)]


def _run_then_end(h: Harness) -> tuple[str, ...]:
    """Gang g planned and bound, then every pod of it gone: its plan is Released. Returns its ranks."""
    pods = _members("a")
    for pod in pods:
        h.state.apply_pod(pod.build())
    for pod in pods:
        h.place(pod)
    (entry,) = h.book.entries()
    ranks = tuple(n for n in entry.ranks if n is not None)
    for pod in pods:
        h.state.delete_pod("train", pod.build()["metadata"]["name"])
    h.coordinator.housekeeping()
    h.run(h.writer.flush(1.0))
    assert len(h.book) == 0
    return ranks


def _load_elsewhere(h: Harness, ranks: tuple[str, ...]) -> None:
    """One 8-GPU pod in another spine's leaf: best fit alone now takes that spine for g."""
    other = "l3-h0" if ranks[0].startswith(("l1", "l2")) else "l1-h0"
    h.place(make_pod("w", "train").gpus(8).scheduler("fabricsched"), [other])


def _restart(h: Harness) -> list[str]:
    pods = _members("b")
    for pod in pods:
        h.state.apply_pod(pod.build())
    return [h.place(pod) for pod in pods]


def _plan_of_g(h: Harness) -> tuple[tuple[str | None, ...], tuple[str, ...]]:
    entry = next(e for e in h.book.entries() if e.name == "g")
    return entry.ranks, entry.reasons


def test_a_group_restarted_as_a_whole_returns_to_its_hosts_by_rank(harness: Harness) -> None:
    before = _run_then_end(harness)
    _load_elsewhere(harness, before)
    harness.clock.advance(60)
    assert tuple(_restart(harness)) == before
    ranks, reasons = _plan_of_g(harness)
    assert ranks == before and reasons[0] == "back on its previous hosts"
    # Users read it on the object.
    stored = next(o for o in harness.store.objects.values() if o["spec"]["gang"] == "g")
    assert stored["status"]["reasons"][0] == "back on its previous hosts"


def test_a_group_restarted_after_the_window_is_planned_fresh(harness: Harness) -> None:
    before = _run_then_end(harness)
    _load_elsewhere(harness, before)
    harness.clock.advance(WINDOW_S + 1)
    placed = _restart(harness)
    assert not set(placed) & set(before)
    assert not any("previous" in r for r in _plan_of_g(harness)[1])


def test_restart_placement_fresh_plans_it_from_scratch() -> None:
    h = Harness(fabric_nodes(), restart_placement="fresh")
    h.restore()
    before = _run_then_end(h)
    _load_elsewhere(h, before)
    placed = _restart(h)
    assert not set(placed) & set(before)
    assert not any("previous" in r for r in _plan_of_g(h)[1])


def test_a_released_object_read_back_after_a_restart_still_counts(harness: Harness) -> None:
    before = _run_then_end(harness)
    # A new process on the same cluster: the gang's Released object read back (an owned one
    # stays in the API server; a label gang's is deleted, so it is stored here as it reads).
    again = Harness(state=harness.state, store=harness.store)
    again.store.objects[("train", "g")] = _released_object(harness, before)
    again.clock.now = harness.clock.now + 30
    again.restore()
    _load_elsewhere(again, before)
    assert tuple(_restart(again)) == before
    assert _plan_of_g(again)[1][0] == "back on its previous hosts"


def _released_object(h: Harness, ranks: tuple[str, ...]) -> dict[str, object]:
    """The FabricPlacement of gang g as it reads back once Released (phase and conditions)."""
    from fabricsched import ids
    from fabricsched.extender.book import conditions, reservations

    entry = reservations.Entry(
        key=h.service.key_of(_members("a")[0].usage()), namespace="train", name="g", job_uid="",
        job_name=None, size=2, gpus_per_pod=8, topology=ids.TopologyName("ib-east"), tier=None,
        required=False, ranks=tuple(ids.NodeName(n) for n in ranks), phase=PlacementPhase.RELEASED,
        reasons=("all pods ended",),
    )
    return objects.manifest_of(entry, conditions.of(entry, (), h.clock()))

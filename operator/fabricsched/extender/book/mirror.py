"""Plans made by the other replica's extender, followed from the FabricPlacement watch.

Two replicas of ``fabricsched run`` run side by side; only the one whose kube-scheduler holds
the scheduler's Lease is called, so only it plans. The other keeps its book current from the
objects the active one writes, so that after a failover it answers at once, with every
reservation of the gang in flight. Where it sits in the flow: the watch (``ApiPlacementFeed``,
``extender.kube.feed``, a thread) -> ``PlanMirror.on_event`` on the event loop -> ``Follower.adopt``.

The watch starts at the resourceVersion of the restore's listing: the restore has just read
every object into the book, and listing them again right after ready (hundreds of objects
parsed in the thread, then one loop callback each) stalled the scheduler's first requests by
tens of milliseconds at 5,000 nodes. It lists only when it has no version to start from, or
the API server no longer holds that version (410).

What is taken from an object, and what is not:
- only objects at a generation (bumped by every spec change) this replica did not write count:
  the echoes of its own writes, which may trail a release or a re-plan, never do;
- of those, a live plan (Reserved, Bound, Expired) of a gang the book does not hold is adopted,
  and one whose ranks differ from the book's replaces it (a re-plan made elsewhere);
- status-only changes (binds, expiry, release) are not taken: each replica derives them from
  the same pods and Jobs (``following``), and the object trails them anyway; except a
  preemptor's hold (``status.preemption``), which only the replica that evicted knows.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, Protocol

from fabricsched.extender.book import following, objects, reservations

logger = logging.getLogger(__name__)

OnEvent = Callable[[str, dict[str, Any]], None]
"""(``ADDED``/``MODIFIED``/``DELETED``, object): called on the event loop."""


class Covers(Protocol):
    def __call__(self, namespace: str, name: str, generation: int) -> bool:
        """Whether this replica wrote that object at ``generation`` or later (or is writing it)."""
        ...


class PlanMirror:
    """Applies watch events of FabricPlacement objects to the book."""

    def __init__(self, book: reservations.Book, follower: following.Follower, covers: Covers) -> None:
        self.book = book
        self.follower = follower
        self.covers = covers
        self.adopted = 0
        """Plans taken from another replica (for logs and tests)."""

    def on_event(self, kind: str, manifest: dict[str, Any]) -> None:
        """Quick and synchronous; never raises (a bad object is skipped)."""
        if kind not in ("ADDED", "MODIFIED"):
            return  # a deleted object's gang is released by its Job's or pods' end
        try:
            entry = objects.entry_of(manifest)
        except objects.Unreadable as e:
            logger.debug("not mirroring an unreadable FabricPlacement: %s", e)
            return
        if not entry.active:
            return
        metadata = manifest.get("metadata") or {}
        generation = metadata.get("generation")
        if not isinstance(generation, int):
            return
        if self.covers(str(metadata.get("namespace")), str(metadata.get("name")), generation):
            return  # the echo of this replica's own write (perhaps of a gang it released since)
        held = self.book.get(entry.key)
        if held is not None and held.ranks == entry.ranks:
            if held.preemption is None and entry.preemption is not None:
                # A preemptor's hold arrives in its status, after the plan it completes: a new
                # leader must resume it (its victims, its expiry clock), and write it back.
                self.book.put(dataclasses.replace(held, preemption=entry.preemption))
            return
        self.follower.adopt(entry)
        self.adopted += 1
        logger.info("following the plan of %s made by another replica (%s; %d plans taken so far)",
                    entry.display, entry.phase, self.adopted)


class PlacementFeed(Protocol):
    """FabricPlacement objects as they change (``kube.feed.ApiPlacementFeed``)."""

    async def follow(self, on_event: OnEvent) -> None:
        """Every change since the restore's listing (without one: every object, ``ADDED``,
        first) to ``on_event`` until cancelled."""
        ...

    def covers(self, namespace: str, name: str, generation: int) -> bool:
        """Whether this replica wrote that object at ``generation`` or later (or is writing it)."""
        ...

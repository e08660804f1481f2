"""Plans made by the other replica's extender, followed from the FabricPlacement watch.

Two replicas of ``fabricsched run`` run side by side; only the one whose kube-scheduler holds
the scheduler's Lease is called, so only it plans. The other keeps its book current from the
objects the active one writes, so that after a failover it answers at once, with every
reservation of the gang in flight. Where it sits in the flow: the watch (``ApiPlacementFeed``,
a thread) -> ``PlanMirror.on_event`` on the event loop -> ``Follower.adopt``.

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
  the same pods and Jobs (``following``), and the object trails them anyway.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from kubernetes import client, watch

from fabricsched.api import placement as api
from fabricsched.extender import following, placements, reservations
from fabricsched.ports import errors

logger = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 10
"""Server-side timeout of one watch call: how often the thread looks whether it should stop."""
RETRY_S = 1.0

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
            entry = placements.entry_of(manifest)
        except placements.Unreadable as e:
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
            return
        self.follower.adopt(entry)
        self.adopted += 1
        logger.info("following the plan of %s made by another replica (%s)", entry.display, entry.phase)


class ApiPlacementFeed:
    """List and watch FabricPlacement objects in a thread of its own; events reach the loop."""

    def __init__(self, api_client: client.ApiClient, covers: Covers,
                 since: Callable[[], str | None] = lambda: None) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self.covers = covers
        self._since = since
        """The version the objects were last listed at (the restore's), read when the watch starts."""

    async def follow(self, on_event: OnEvent) -> None:
        """Deliver every change since ``since`` (without it: every object first) to
        ``on_event`` until cancelled."""
        loop = asyncio.get_running_loop()
        stop = threading.Event()

        def deliver(kind: str, obj: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(on_event, kind, obj)

        thread = threading.Thread(target=self._stream, args=(deliver, stop), name="fabricplacement-watch",
                                  daemon=True)
        thread.start()
        try:
            await asyncio.Event().wait()
        finally:
            stop.set()

    def _stream(self, deliver: OnEvent, stop: threading.Event) -> None:
        version = self._since()
        while not stop.is_set():
            try:
                if version is None:
                    version = self._list(deliver)
                version = self._watch(deliver, stop, version)
            except Exception as e:  # the thread must outlive any failure; the loop never sees one
                gone = getattr(e, "status", None) == 410
                version = None if gone else version
                if not gone:
                    logger.warning("FabricPlacement watch failed (retrying): %s", str(e)[:200])
                    time.sleep(RETRY_S)

    def _list(self, deliver: OnEvent) -> str:
        listed = errors.call(self._api.list_cluster_custom_object, api.GROUP, api.VERSION, api.PLURAL)
        for item in listed.get("items") or ():
            deliver("ADDED", item)
        return str(listed["metadata"]["resourceVersion"])

    def _watch(self, deliver: OnEvent, stop: threading.Event, version: str) -> str | None:
        stream = watch.Watch()  # type: ignore[no-untyped-call]
        events = stream.stream(  # type: ignore[no-untyped-call]
            self._api.list_cluster_custom_object, api.GROUP, api.VERSION, api.PLURAL,
            resource_version=version, timeout_seconds=WATCH_TIMEOUT_S,
        )
        try:
            for event in events:
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    return None if obj.get("code") == 410 else version
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                deliver(str(event.get("type")), obj)
                if stop.is_set():
                    break
        finally:
            stream.stop()  # type: ignore[no-untyped-call]
        return version

"""Writing FabricPlacement objects: the book's entries made inspectable, and durable across
restarts.

``PlacementWriter`` keeps the writes off the request path: decisions ``submit`` an entry (the
book's ``sink.PlanSink``) and return; a task writes the newest entry of each gang. A fresh
plan's object is created at once (``save_soon``), not after the coalescing delay, so its other
ranks' reservation survives a restart as soon as possible.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import Callable
from typing import Any, Protocol

from fabricsched import ids
from fabricsched.api import conditions as api_conditions
from fabricsched.api import placement as api
from fabricsched.extender.book import conditions, reservations
from fabricsched.extender.book.objects import manifest_of
from fabricsched.ports import errors

logger = logging.getLogger(__name__)

COALESCE_S = 0.25
"""Background writes wait this long after a change, so a burst of binds is one write per gang."""
CONCURRENT_WRITES = 4
"""FabricPlacement writes in flight at once (each is a blocking client call in a thread)."""
RETRY_DELAY_S = 1.0
STANDBY_POLL_S = 0.5
"""How often a standby replica's writer looks whether it leads now."""


_NAMESPACE_NOT_FOUND = re.compile(r'namespaces \\?"[^"\\]*\\?" not found')
"""The API server's message for a missing namespace, plain or JSON-escaped in a Status body."""


class PlacementStore(Protocol):
    """FabricPlacement objects in the API server (``store.ApiPlacementStore``).

    Failures are ``fabricsched.ports.errors.ApiError``s: ``Rejected`` for an invalid object
    (retrying cannot help), any other for a failure worth a retry."""

    async def load(self) -> list[dict[str, Any]]:
        """Every FabricPlacement object in the cluster."""
        ...

    async def create(self, manifest: dict[str, Any]) -> None:
        """Create the object named in ``manifest`` with its spec (the plan) if it does not exist
        yet; its status is left to ``save``."""
        ...

    async def save(self, manifest: dict[str, Any]) -> None:
        """Create or update the object (spec and status) named in ``manifest``; a ``Released``
        one without an owning Job is deleted (nothing else would collect it)."""
        ...


class PlacementWriter:
    """Writes the newest entry of each submitted gang, one write per gang at a time (the book's
    ``sink.PlanSink``)."""

    def __init__(
        self, store: PlacementStore, clock: Callable[[], float] = time.time,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        self.store = store
        self.clock = clock
        self.leading = leading
        """Whether this replica does the background writes (the Lease holder); a standby keeps
        its newest entry per gang and writes them once it leads. A new plan's ``save_now`` is
        not gated: the extender the scheduler calls makes the plan durable itself."""
        self._pending: dict[ids.GangKey, reservations.Entry] = {}
        self._conditions: dict[ids.GangKey, list[api_conditions.Condition]] = {}
        """The conditions last made for every gang: a condition keeps its date while unchanged."""
        self.writes = 0
        self._pending_objects: set[ids.GangKey] = set()
        """Gangs whose object was submitted Pending: their plan replaces it (``save``, not ``create``)."""
        self._locks: dict[ids.GangKey, asyncio.Lock] = {}
        self._wake = asyncio.Event()
        self._creating: set[asyncio.Task[bool]] = set()
        """Creates started by ``save_soon`` (held so they are not collected mid-flight)."""
        self.failures = 0
        self.dropped = 0
        """Writes dropped because the gang's namespace was gone."""
        self._gone: dict[ids.GangKey, str] = {}
        """Gangs whose namespace is gone, with the reason: the book's follower releases them."""

    def submit(self, entry: reservations.Entry) -> None:
        """Queue the entry; a later submit of the same gang replaces it (only the newest counts)."""
        previous = self._conditions.get(entry.key, list(entry.conditions))
        made = conditions.of(entry, previous, self.clock())
        if entry.active or entry.phase == api.PlacementPhase.PENDING:
            self._conditions[entry.key] = made
        else:
            self._conditions.pop(entry.key, None)
        self._pending[entry.key] = dataclasses.replace(entry, conditions=tuple(made))
        if entry.phase == api.PlacementPhase.PENDING:
            self._pending_objects.add(entry.key)
        self._wake.set()

    def replaces_pending(self, key: ids.GangKey) -> None:
        """The gang has a Pending object (read back after a restart): its plan is saved whole."""
        self._pending_objects.add(key)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def take_gone(self) -> list[tuple[ids.GangKey, str]]:
        """The gangs found with their namespace gone since the last call, with the reason."""
        gone, self._gone = list(self._gone.items()), {}
        return gone

    def save_soon(self, key: ids.GangKey, timeout_s: float) -> None:
        """Start creating the gang's object now, without waiting for it (``save_now`` in a
        task): the answer that made the plan is not held up by the API round trip. A crash
        before it lands loses the plan, not the gang: the next pod's plan is made around the
        ranks already bound (``Coordinator._plan``)."""
        task = asyncio.get_running_loop().create_task(self.save_now(key, timeout_s))
        self._creating.add(task)
        task.add_done_callback(self._creating.discard)

    async def save_now(self, key: ids.GangKey, timeout_s: float) -> bool:
        """Create the gang's object now (its spec: the plan, which is what a restarted
        extender needs), waiting at most ``timeout_s``; False if it did not land. The entry
        stays queued: its status follows with the background writes (an object read back
        without one is a plan held from the restore on, see ``Coordinator.restore``)."""
        try:
            return await asyncio.wait_for(self._create(key), timeout_s)
        except TimeoutError:
            logger.warning("writing FabricPlacement of %s took longer than %.1f s", key, timeout_s)
            return False

    async def save_whole(self, key: ids.GangKey, timeout_s: float) -> bool:
        """Write the gang's object now, spec and status, waiting at most ``timeout_s``; False if
        it did not land (a preemptor's, before it evicts: a restart must find its victims)."""
        try:
            written = await asyncio.wait_for(self._write(key), timeout_s)
        except TimeoutError:
            return False
        return written and key not in self._pending

    async def _create(self, key: ids.GangKey) -> bool:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            entry = self._pending.get(key)
            if entry is None:
                return True  # written meanwhile, status and all
            try:
                if key in self._pending_objects:
                    # A Pending object of the gang may exist: create would keep its empty spec.
                    await self.store.save(manifest_of(entry))
                    self._pending_objects.discard(key)
                else:
                    await self.store.create(manifest_of(entry))
            except errors.Rejected as e:
                self.failures += 1
                logger.error("FabricPlacement %s rejected: %s", entry.display, e)
                return False
            except errors.Conflict as e:
                # Another replica's extender planned this gang first: its object is the plan
                # (the book adopts it from the watch); this one is never written.
                self.failures += 1
                self._pending.pop(key, None)
                logger.warning("FabricPlacement %s planned elsewhere, following that plan: %s",
                               entry.display, e)
                return False
            except errors.ApiError as e:
                self.failures += 1
                if namespace_gone(e):
                    self._drop(entry, e)
                    return False
                logger.warning("could not create FabricPlacement %s: %s", entry.display, e)
                return False
            self._wake.set()
            return True

    async def run(self) -> None:
        """Write submitted entries until cancelled."""
        gate = asyncio.Semaphore(CONCURRENT_WRITES)

        async def one(key: ids.GangKey) -> bool:
            async with gate:
                return await self._write(key)

        while True:
            await self._wake.wait()
            if not self.leading():
                await asyncio.sleep(STANDBY_POLL_S)
                continue
            # Ranks of a gang bind within moments of each other: one write for the lot.
            await asyncio.sleep(COALESCE_S)
            self._wake.clear()
            # Several gangs at once (each gang's writes stay in order, under its lock): a burst
            # of single-pod plans must not queue behind one API round trip each.
            failed = not all(await asyncio.gather(*(one(key) for key in list(self._pending))))
            for key in [k for k, lock in self._locks.items() if not lock.locked() and k not in self._pending]:
                del self._locks[key]
            if failed:
                await asyncio.sleep(RETRY_DELAY_S)
                self._wake.set()

    async def flush(self, timeout_s: float) -> None:
        """Write everything pending (tests, shutdown); a standby writes nothing."""
        if not self.leading():
            return

        async def _all() -> None:
            if self._creating:  # a new plan's create first: the status write follows it
                await asyncio.gather(*list(self._creating), return_exceptions=True)
            for key in list(self._pending):
                await self._write(key)

        try:
            await asyncio.wait_for(_all(), timeout_s)
        except TimeoutError:
            logger.warning("%d FabricPlacement writes still pending at shutdown", len(self._pending))

    async def _write(self, key: ids.GangKey) -> bool:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            entry = self._pending.pop(key, None)
            if entry is None:
                return True  # written meanwhile by another caller
            try:
                self.writes += 1
                await self.store.save(manifest_of(entry))
            except errors.Rejected as e:
                # The API server refuses the object itself: retrying the same one cannot help.
                self.failures += 1
                logger.error("FabricPlacement %s rejected: %s", entry.display, e)
                return True
            except errors.ApiError as e:
                self.failures += 1
                if namespace_gone(e):
                    self._drop(entry, e)
                    return True
                # Keep it unless a newer entry arrived while this one was being written.
                self._pending.setdefault(key, entry)
                logger.warning("could not write FabricPlacement %s: %s", entry.display, e)
                return False
            return True


    def _drop(self, entry: reservations.Entry, cause: errors.ApiError) -> None:
        """The gang's namespace is gone or terminating: no write can ever land, and no pod of
        it can bind any more. The write is dropped (not retried) and the gang reported
        (``take_gone``), so the follower releases its plan and its GPUs at the next tick."""
        self._pending.pop(entry.key, None)
        self._pending_objects.discard(entry.key)
        self._conditions.pop(entry.key, None)
        if entry.active:
            self._gone[entry.key] = f"namespace {entry.namespace} is gone"
        self.dropped += 1
        logger.info("FabricPlacement %s not written, its namespace is gone (%d such writes dropped): %s",
                    entry.display, self.dropped, cause)


def namespace_gone(e: errors.ApiError) -> bool:
    """The API server says the object's namespace does not exist (404 naming the namespace, not
    the resource) or is being deleted (403 "because it is being terminated")."""
    text = str(e)
    if isinstance(e, errors.NotFound):
        return _NAMESPACE_NOT_FOUND.search(text) is not None
    return isinstance(e, errors.Forbidden) and "being terminated" in text



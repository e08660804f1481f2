"""Waking the kube-scheduler when capacity frees: waiting gangs are retried at once.

Why it is needed: the kube-scheduler keeps a pod the extender refused among its unschedulable
pods until a cluster event arrives; any event will do (an extender's refusal requeues on every
kind), but without one it waits ``podMaxInUnschedulablePodsDuration`` (5 minutes). The event
that frees capacity for fabricsched (a gang's pods ending, its Job deleted, a reservation
expiring or released) often reaches the scheduler *before* fabricsched's book lets go of the
plan, so the retry it causes is refused again, and the gang then waits the full 5 minutes.

What it does: after the book frees capacity, and while some gang waits, fabricsched updates one
object the kube-scheduler watches and nothing else uses: the ``CSIStorageCapacity``
``fabricsched-wakeup`` (storage class ``fabricsched-wakeup``, which no pod asks for) in its own
namespace. Its update requeues every pod the extender refused (after their back-off, at most
10 s), and no other plugin acts on it. Bursts are coalesced: at most one update per
``min_interval_s``.

A gang held for locality is retried when capacity frees (above) and when its hold ends
(``hold_ends_in``): nothing in the cluster changes at that moment, so without a nudge the
scheduler would retry it up to 5 minutes late. So the extender re-decides at the moments the
simulator does (docs/benchmark.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from kubernetes import client

from fabricsched.ports import errors

logger = logging.getLogger(__name__)

OBJECT_NAME = "fabricsched-wakeup"
STORAGE_CLASS = "fabricsched-wakeup"
"""A storage class no pod uses: the volume plugins ignore a capacity published for it."""
FREED_ANNOTATION = "fabricsched.io/capacity-freed"


class Nudger(Protocol):
    """Updates the object the kube-scheduler watches (``ApiNudger``)."""

    async def nudge(self, stamp: str) -> None:
        """Write ``stamp`` on the object (creating it first if needed); raises ``ApiError``."""
        ...


class WakeUps:
    """``freed()`` from the decisions (synchronous, cheap); ``run()`` does the writes."""

    def __init__(
        self,
        nudger: Nudger,
        waiting: Callable[[], bool],
        delay_s: float = 0.2,
        min_interval_s: float = 1.0,
    ) -> None:
        self.nudger = nudger
        self.waiting = waiting
        """Whether some gang waits for capacity now (no waiting gang: nothing to wake)."""
        self.delay_s = delay_s
        self.min_interval_s = min_interval_s
        self.nudges = 0
        self._wake = asyncio.Event()
        self._freed = False
        self._planned = False
        self._due: list[float] = []
        """Monotonic times at which a hold ends, earliest first (kept short: one per hold)."""

    def freed(self) -> None:
        self._freed = True
        self._wake.set()

    def planned(self) -> None:
        """A waiting gang got a plan with no cluster event (reservations yielded to it): its
        pods, refused before, must be retried even though no gang waits any more."""
        self._planned = True
        self.freed()

    def hold_ends_in(self, seconds: float) -> None:
        """A gang is held for locality for ``seconds`` more: retry it when the hold ends."""
        due = time.monotonic() + max(0.0, seconds) + self.delay_s
        if len(self._due) < _MAX_DUE and not any(abs(d - due) < self.min_interval_s for d in self._due):
            self._due = sorted([*self._due, due])
            self._wake.set()  # the loop recomputes how long to sleep; no nudge for this

    async def run(self) -> None:
        """Nudge after each burst of frees, and when a hold ends, until cancelled."""
        while True:
            ended = await self._next()
            await asyncio.sleep(self.delay_s)  # the rest of the burst (a whole gang ending)
            self._freed = False
            planned, self._planned = self._planned or ended, False
            if not (planned or self.waiting()):
                continue
            try:
                await self.nudger.nudge(f"{time.time():.3f}")
                self.nudges += 1
                logger.debug("woke the kube-scheduler for waiting gangs (%d times so far)", self.nudges)
            except errors.ApiError as e:
                logger.warning("could not wake the kube-scheduler for waiting gangs: %s", e)
            await asyncio.sleep(self.min_interval_s)

    async def _next(self) -> bool:
        """Wait for capacity freed or the next end of a hold; True when a hold ended."""
        while True:
            now = time.monotonic()
            if self._due and self._due[0] <= now:
                self._due = [d for d in self._due if d > now]
                return True
            if self._freed:
                return False
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._due[0] - now if self._due else None)


_MAX_DUE = 1024
"""Most hold ends remembered: one per held gang's retry, far more than held gangs at once."""


class ApiNudger:
    """``Nudger`` through ``StorageV1Api`` (a worker thread: the client is synchronous)."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self._api = client.StorageV1Api(api_client)
        self.namespace = namespace

    async def nudge(self, stamp: str) -> None:
        await asyncio.to_thread(self._nudge, stamp)

    def _nudge(self, stamp: str) -> None:
        patch: dict[str, Any] = {"metadata": {"annotations": {FREED_ANNOTATION: stamp}}}
        try:
            errors.call(self._api.patch_namespaced_csi_storage_capacity, OBJECT_NAME, self.namespace, patch)
        except errors.NotFound:
            body = {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSIStorageCapacity",
                "metadata": {"name": OBJECT_NAME, "annotations": {FREED_ANNOTATION: stamp},
                             "labels": {"app.kubernetes.io/managed-by": "fabricsched"}},
                "storageClassName": STORAGE_CLASS,
            }
            # Created meanwhile (by another replica): that create was the event.
            with contextlib.suppress(errors.Conflict):
                errors.call(self._api.create_namespaced_csi_storage_capacity, self.namespace, body)

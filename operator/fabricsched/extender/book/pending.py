"""Why a gang waits: a ``Pending`` FabricPlacement whose Reserved condition says so, with numbers.

Where it sits in the flow: the coordinator's filter finds no plan for a gang (the engine's
``NoFit``, a required tier unsatisfiable now, a hold for locality) -> ``PendingBoard.wait`` ->
a ``Pending`` entry (no ranks, no capacity held; never in the book) goes to the batched
FabricPlacement writer. The kube-scheduler retries a waiting pod every few seconds, so a write
happens only when the reason changes, or its message after ``refresh_s``. When the gang gets a
plan, ``placed`` forgets it and the plan's own write turns the object ``Reserved``.

A waiting gang with a Job has its object owned by the Job (the garbage collector removes it
with the Job). A gang without one (plain pods, a PodGroup) owns nothing: ``sweep`` (from the
housekeeping tick) deletes its object once none of its pods is left, and ``adopt`` hands it
the Pending objects read back after a restart.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Collection, Mapping

from fabricsched import gangs, ids
from fabricsched.api.placement import PlacementPhase
from fabricsched.extender.book import reservations, sink
from fabricsched.placement import request

NO_FIT = "NoFit"
TIER_UNSATISFIABLE = "RequiredTierUnsatisfiable"
UNPLACEABLE = "Unplaceable"
HELD_FOR_LOCALITY = "HeldForLocality"

MAX_MESSAGE = 1024
REFRESH_S = 30.0
"""A new message of the same reason is written at most this often (its numbers move with the cluster)."""
SWEEP_S = 5.0
"""Waiting gangs without a Job are checked for remaining pods at most this often."""
MAX_TRACKED = 10_000
"""Waiting gangs remembered at once; past it the oldest are forgotten (their next wait writes again)."""


class PendingBoard:
    """The waiting gangs' last written (reason, message), and the rate limit on their writes."""

    def __init__(
        self,
        writer: sink.PlanSink,
        clock: Callable[[], float],
        refresh_s: float = REFRESH_S,
        on_planned: Callable[[reservations.Entry, float], None] | None = None,
    ) -> None:
        self.writer = writer
        self.clock = clock
        self.refresh_s = refresh_s
        self._last: dict[ids.GangKey, tuple[str, str, float]] = {}
        self.since: dict[ids.GangKey, float] = {}
        """When each waiting gang was first seen waiting (placement wait metric)."""
        self.on_planned = on_planned
        """Told every new plan and its wait in seconds (the extender's metrics)."""
        self._jobless: dict[ids.GangKey, reservations.Entry] = {}
        """Waiting gangs without a Job, by key: nothing else deletes their Pending object."""
        self._swept = -SWEEP_S

    def wait(self, gang: gangs.GangIdentity, topology: ids.TopologyName, reason: str, message: str) -> bool:
        """Record that ``gang`` waits; True when this wrote (a new reason, or a refreshed message)."""
        now = self.clock()
        message = message[:MAX_MESSAGE]
        last = self._last.get(gang.key)
        if last is not None and last[0] == reason and (last[1] == message or now - last[2] < self.refresh_s):
            return False
        if last is None and len(self._last) >= MAX_TRACKED:
            oldest = min(self._last, key=lambda k: self._last[k][2])
            self._last.pop(oldest)
            self.since.pop(oldest, None)
        self._last[gang.key] = (reason, message, now)
        self.since.setdefault(gang.key, now)
        entry = entry_of(gang, topology, reason, message)
        if not (gang.job_name and gang.job_uid):  # no ownerReference (``objects.manifest_of``)
            self._jobless[gang.key] = entry
        self.writer.submit(entry)
        return True

    def no_fit(self, gang: gangs.GangIdentity, topology: ids.TopologyName, why: request.NoFit) -> bool:
        """The engine found no plan: wait with its reason."""
        return self.wait(gang, topology, reason_of(why), message_of(gang, why.reason))

    def planned(self, entry: reservations.Entry, created: float | None) -> None:
        """The gang got a plan: forget it, and tell ``on_planned`` how long it waited (from its
        first pod's creation, else from its first wait seen here)."""
        self._last.pop(entry.key, None)
        self._jobless.pop(entry.key, None)
        since = self.since.pop(entry.key, None)
        start = created if created is not None else since
        now = self.clock()
        if self.on_planned is not None:
            self.on_planned(entry, now - start if start is not None else 0.0)

    def adopt(self, entry: reservations.Entry) -> None:
        """A Pending object read back after a restart: if no Job owns it, ``sweep`` looks after it."""
        if entry.phase == PlacementPhase.PENDING and not entry.job_name:
            self._jobless.setdefault(entry.key, entry)

    def sweep(self, live: Callable[[], Collection[ids.GangKey]]) -> int:
        """Forget every waiting gang not in ``live()`` (the gangs with a pod left), and delete
        the Pending object of those without a Job (a Job's own deletion removes the others');
        at most every ``SWEEP_S``, and ``live`` is only asked when a gang waits. Returns how
        many objects were deleted."""
        now = self.clock()
        if not (self._jobless or self._last) or now - self._swept < SWEEP_S:
            return 0
        self._swept = now
        remaining = live()
        for key in [k for k in self._last if k not in remaining and k not in self._jobless]:
            self._last.pop(key, None)
            self.since.pop(key, None)
        gone = [key for key in self._jobless if key not in remaining]
        for key in gone:
            entry = self._jobless.pop(key)
            self._last.pop(key, None)
            self.since.pop(key, None)
            # Released without an owner: the writer deletes the object.
            self.writer.submit(
                dataclasses.replace(
                    entry, phase=PlacementPhase.RELEASED, reasons=(*entry.reasons, "all pods deleted")
                )
            )
        return len(gone)

    @property
    def waiting(self) -> int:
        return len(self._last)

    def waiting_gangs(self) -> Mapping[ids.GangKey, tuple[str, str, float]]:
        """Each waiting gang's last (reason, message, when written), read-only (the fabric page)."""
        return types.MappingProxyType(self._last)


def reason_of(why: request.NoFit) -> str:
    """The Reserved condition's reason for an engine NoFit."""
    if why.required_tier:
        return TIER_UNSATISFIABLE
    return UNPLACEABLE if why.unresolvable else NO_FIT


def message_of(gang: gangs.GangIdentity, why: str) -> str:
    """'needs 7 x 8 GPUs inside one leaf: <the engine's reason, with its numbers>'."""
    where = f" inside one {gang.tier}" if gang.required and gang.tier else ""
    return f"needs {gang.size} x {gang.gpus_per_pod} GPUs{where}: {why}"


def entry_of(
    gang: gangs.GangIdentity, topology: ids.TopologyName, reason: str, message: str
) -> reservations.Entry:
    """The Pending entry of a waiting gang: its identity, no ranks."""
    return dataclasses.replace(
        reservations.Entry.of_gang(gang, topology, (None,) * gang.size),
        phase=PlacementPhase.PENDING,
        waiting=(reason, message),
    )

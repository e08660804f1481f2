"""Why a gang waits: a ``Pending`` FabricPlacement whose Reserved condition says so, with numbers.

Where it sits in the flow: the coordinator's filter finds no plan for a gang (the engine's
``NoFit``, a required tier unsatisfiable now, a hold for locality) -> ``PendingBoard.wait`` ->
a ``Pending`` entry (no ranks, no capacity held; never in the book) goes to the batched
FabricPlacement writer. The kube-scheduler retries a waiting pod every few seconds, so a write
happens only when the reason changes, or its message after ``refresh_s``. When the gang gets a
plan, ``placed`` forgets it and the plan's own write turns the object ``Reserved``.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping

from fabricsched import ids
from fabricsched.api.placement import PlacementPhase
from fabricsched.extender import gangs, placements, planning, reservations
from fabricsched.placement import request

NO_FIT = "NoFit"
TIER_UNSATISFIABLE = "RequiredTierUnsatisfiable"
UNPLACEABLE = "Unplaceable"
HELD_FOR_LOCALITY = "HeldForLocality"
WAITING_FOR_PODS = "WaitingForPods"

MAX_MESSAGE = 1024
REFRESH_S = 30.0
"""A new message of the same reason is written at most this often (its numbers move with the cluster)."""
MAX_TRACKED = 10_000
"""Waiting gangs remembered at once; past it the oldest are forgotten (their next wait writes again)."""


class PendingBoard:
    """The waiting gangs' last written (reason, message), and the rate limit on their writes."""

    def __init__(
        self, writer: placements.PlacementWriter, clock: Callable[[], float], refresh_s: float = REFRESH_S
    ) -> None:
        self.writer = writer
        self.clock = clock
        self.refresh_s = refresh_s
        self._last: dict[ids.GangKey, tuple[str, str, float]] = {}
        self.since: dict[ids.GangKey, float] = {}
        """When each waiting gang was first seen waiting (placement wait metric)."""
        self.on_planned: Callable[[reservations.Entry, float], None] | None = None
        """Told every new plan and its wait in seconds (the extender's metrics)."""

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
        self.writer.submit(entry_of(gang, topology, reason, message))
        return True

    def no_fit(self, gang: gangs.GangIdentity, topology: ids.TopologyName, why: request.NoFit) -> bool:
        """The engine found no plan: wait with its reason."""
        return self.wait(gang, topology, reason_of(why), message_of(gang, why.reason))

    def planned(self, entry: reservations.Entry, created: float | None) -> None:
        """The gang got a plan: forget it, and tell ``on_planned`` how long it waited (from its
        first pod's creation, else from its first wait seen here)."""
        self._last.pop(entry.key, None)
        since = self.since.pop(entry.key, None)
        start = created if created is not None else since
        now = self.clock()
        if self.on_planned is not None:
            self.on_planned(entry, now - start if start is not None else 0.0)

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
        planning.entry_for(gang, topology, (None,) * gang.size),
        phase=PlacementPhase.PENDING,
        waiting=(reason, message),
    )

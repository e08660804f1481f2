"""What the book and the decisions write through, as Protocols: plans to their FabricPlacement
objects, and Events. The implementations are the API adapters' (``extender.kube``); unit tests
pass small in-memory fakes.
"""

from __future__ import annotations

from typing import Protocol

from fabricsched import ids
from fabricsched.extender.book import reservations
from fabricsched.ports import notices
from fabricsched.topology import nodes


class EventSink(Protocol):
    """Writes a core v1 Event about a pod (the recorder deduplicates and rate-limits)."""

    def pod_event(self, pod: nodes.PodUsage, reason: str, message: str, warning: bool) -> None: ...

    def object_event(self, ref: notices.ObjectRef, reason: str, message: str, warning: bool) -> None:
        """An Event about any object (a FabricPlacement, a Job)."""
        ...


class PlanSink(Protocol):
    """Where every changed entry goes to become its FabricPlacement (``kube.writer.PlacementWriter``)."""

    def submit(self, entry: reservations.Entry) -> None:
        """Queue the entry's write; only the newest entry of a gang counts."""
        ...

    def save_soon(self, key: ids.GangKey, timeout_s: float) -> None:
        """Start creating a new plan's object now, without waiting for it."""
        ...

    async def save_whole(self, key: ids.GangKey, timeout_s: float) -> bool:
        """Write the gang's object, spec and status, now; False if it did not land in time."""
        ...

    def replaces_pending(self, key: ids.GangKey) -> None:
        """The gang has a Pending object: its plan is saved whole, not created."""
        ...

    def take_gone(self) -> list[tuple[ids.GangKey, str]]:
        """Gangs whose namespace is gone (no write can land): the follower releases them."""
        ...

"""What the extender's decisions need from the outside, as Protocols: Events about pods,
FabricPlacement objects in the API server, and a Job read on demand.

The views of the cluster state the extender reads (``StateView``, ``SnapshotView``) are the
seam's (``fabricsched.ports.views``), re-exported here for the extender's modules. The API
implementations are in ``kubeapi``; tests pass small in-memory fakes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from fabricsched.ports import jobs, notices
from fabricsched.ports.views import SnapshotView as SnapshotView
from fabricsched.ports.views import StateView as StateView
from fabricsched.topology import nodes


class EventSink(Protocol):
    """Writes a core v1 Event about a pod (the recorder deduplicates and rate-limits)."""

    def pod_event(self, pod: nodes.PodUsage, reason: str, message: str, warning: bool) -> None: ...

    def object_event(self, ref: notices.ObjectRef, reason: str, message: str, warning: bool) -> None:
        """An Event about any object (a FabricPlacement, a Job)."""
        ...


class PlacementStore(Protocol):
    """FabricPlacement objects in the API server (``kubeapi.ApiPlacementStore``).

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


class PlacementFeed(Protocol):
    """FabricPlacement objects as they change (``mirroring.ApiPlacementFeed``)."""

    async def follow(self, on_event: Callable[[str, dict[str, Any]], None]) -> None:
        """Every change since the restore's listing (without one: every object, ``ADDED``,
        first) to ``on_event`` until cancelled."""
        ...

    def covers(self, namespace: str, name: str, generation: int) -> bool:
        """Whether this replica wrote that object at ``generation`` or later (or is writing it)."""
        ...


class JobFetcher(Protocol):
    """Reads one Job from the API when the state has not seen it yet."""

    async def fetch(self, namespace: str, name: str) -> jobs.JobInfo | None:
        """The Job, or None when it does not exist; raises ``ApiError`` when the API fails."""
        ...

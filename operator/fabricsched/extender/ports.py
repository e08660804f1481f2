"""What the extender needs from the rest of the process, as Protocols.

The extender and the controller are sibling adapters (the import-linter layers keep them
independent), so the extender does not import the controller: ``service.serve`` receives
the controller's ``Runtime`` and hands its parts to the coordinator through these ports,
which ``controller.state.ClusterState`` and friends satisfy structurally. Tests pass small
in-memory fakes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.topology import fabric, nodes


class JobView(Protocol):
    """The fields of ``controller.changes.JobInfo`` the gang logic reads."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def parallelism(self) -> int: ...
    @property
    def completions(self) -> int | None: ...
    @property
    def finished(self) -> bool: ...
    @property
    def deleted(self) -> bool: ...


class SnapshotView(Protocol):
    """One topology at one state generation (``controller.snapshots.TopologySnapshot``)."""

    @property
    def name(self) -> ids.TopologyName: ...
    @property
    def spec(self) -> api.FabricTopologySpec: ...
    @property
    def fabric(self) -> fabric.Fabric: ...
    @property
    def free_gpus(self) -> Mapping[ids.NodeName, int]: ...
    @property
    def generation(self) -> int: ...


class StateView(Protocol):
    """The operator's cluster state, read-only, plus its change notifications."""

    @property
    def synced(self) -> bool: ...
    @property
    def pods(self) -> Mapping[tuple[str, str], nodes.PodUsage]: ...
    @property
    def jobs(self) -> Mapping[tuple[str, str], JobView]: ...

    def topology_of(self, node: ids.NodeName) -> ids.TopologyName | None: ...
    def topology_holding_most(self, nodes: Collection[ids.NodeName]) -> ids.TopologyName | None:
        """The topology holding most of ``nodes`` (``topology_of``), the first by name on a
        tie; None when none holds any."""
        ...
    def snapshot(self, name: ids.TopologyName) -> SnapshotView | None: ...
    def job_by_uid(self, namespace: str, uid: str) -> JobView | None: ...
    def subscribe(self, callback: Callable[[Any], None]) -> Callable[[], None]: ...


class EventSink(Protocol):
    """Writes a core v1 Event about a pod (the recorder deduplicates and rate-limits)."""

    def pod_event(self, pod: nodes.PodUsage, reason: str, message: str, warning: bool) -> None: ...


class Rejected(Exception):
    """The API server refused an object as invalid (HTTP 400/422): retrying it cannot help."""


class PlacementStore(Protocol):
    """FabricPlacement objects in the API server (``placements.ApiPlacementStore``)."""

    async def load(self) -> list[dict[str, Any]]:
        """Every FabricPlacement object in the cluster."""
        ...

    async def create(self, manifest: dict[str, Any]) -> None:
        """Create the object named in ``manifest`` with its spec (the plan) if it does not exist
        yet; its status is left to ``save``. Raises like ``save``."""
        ...

    async def save(self, manifest: dict[str, Any]) -> None:
        """Create or update the object (spec and status) named in ``manifest``; a ``Released``
        one without an owning Job is deleted (nothing else would collect it). Raises
        ``Rejected`` for an invalid object, any other exception for a failure worth a retry."""
        ...


class JobFetcher(Protocol):
    """Reads one Job from the API when the state has not seen it yet."""

    async def fetch(self, namespace: str, name: str) -> JobView | None: ...

"""Read-only views one adapter gives another: the cluster state (the controller's, read by the
extender), one topology at one state generation, and the GPUs plans hold (the extender's,
read by the status reporter).

``controller.state.ClusterState``, ``controller.snapshots.TopologySnapshot`` and
``extender.reservations.Book`` satisfy these structurally; mypy checks it where the
composition root hands them over. Tests pass small in-memory fakes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.ports import changes
from fabricsched.ports import jobs as job_types
from fabricsched.topology import fabric, health
from fabricsched.topology import nodes as k8s


class SnapshotView(Protocol):
    """One topology at one state generation."""

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
    def nodes(self) -> Mapping[ids.NodeName, k8s.NodeInfo]:
        """Every node's labels, allocatable and conditions (a pod's node selector reads them)."""
        ...
    @property
    def pods(self) -> Mapping[tuple[str, str], k8s.PodUsage]: ...
    @property
    def placed_pods_version(self) -> int:
        """Changes whenever the record of a pod on a node is added, replaced or removed."""
        ...
    def placed_pods_since(self, version: int) -> Collection[tuple[str, str]] | None:
        """The pods on nodes whose records changed after ``version``; None: too long ago to tell."""
        ...
    def pods_in(self, namespace: str) -> Mapping[tuple[str, str], k8s.PodUsage]:
        """The pods of ``pods`` in one namespace."""
        ...
    @property
    def unbound_pods(self) -> Mapping[tuple[str, str], k8s.PodUsage]:
        """The pods of ``pods`` not on a node: what waits, without a pass over every pod."""
        ...
    @property
    def jobs(self) -> Mapping[tuple[str, str], job_types.JobInfo]: ...

    @property
    def topologies(self) -> Mapping[ids.TopologyName, object]: ...
    def topology_holding_most(self, nodes: Collection[ids.NodeName]) -> ids.TopologyName | None:
        """The topology whose fabric holds most of ``nodes`` (a node selected by two topologies is in
        neither fabric), the first by name on a
        tie; None when none holds any."""
        ...
    def snapshot(self, name: ids.TopologyName) -> SnapshotView | None: ...
    def counted(self, pod: k8s.PodUsage) -> k8s.PodUsage:
        """``pod`` with the GPUs its DRA claims ask for counted (``claim_gpus``, ``uncounted``)."""
        ...
    def element_health(self, name: ids.TopologyName) -> Mapping[health.ElementId, health.ElementHealth]:
        """Every element's effective health in topology ``name`` (empty for an unknown one)."""
        ...
    def job_by_uid(self, namespace: str, uid: str) -> job_types.JobInfo | None: ...
    def subscribe(self, callback: changes.Subscriber) -> changes.Unsubscribe: ...


class ReservedGpus(Protocol):
    """GPUs held by plans for ranks whose pods are not bound yet: the FabricTopology status
    counts them as taken (``gpus.free``)."""

    def reserved_in(self, topology: ids.TopologyName) -> Mapping[ids.NodeName, int]:
        """GPUs per node of ``topology`` held by unbound ranks; nodes holding none are absent."""
        ...


class GangsOnPath(Protocol):
    """Which gangs an element's health touches (the extender's path index): FabricTopology
    ``status.degraded[].affectedGangs`` and the topology's health Events."""

    @property
    def version(self) -> int:
        """Moves whenever a gang's path changes (the status reporter recomputes then)."""
        ...

    def affected(self, topology: ids.TopologyName, element: health.ElementId) -> tuple[list[str], int]:
        """Up to 50 ``namespace/name`` of the gangs' FabricPlacements, and how many in all."""
        ...


class Readiness(Protocol):
    """A part of the process that must be ready before ``/readyz`` says so."""

    def not_ready(self) -> str | None:
        """Why the part cannot serve yet; None once it can."""
        ...

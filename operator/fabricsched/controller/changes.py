"""What the cluster state tells its subscribers: one ``Change`` per move that matters, and
``JobInfo``, what the state keeps of a batch/v1 Job (the Job changes carry it).

``ClusterState.subscribe(callback)`` calls back synchronously with these, after the state has
moved; the extender's book and the operator's Events follow the cluster through them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fabricsched import ids
from fabricsched.controller import fabrics
from fabricsched.topology import nodes as k8s


@dataclass(frozen=True)
class JobInfo:
    """What the gang logic needs of a batch/v1 Job."""

    namespace: str
    name: str
    uid: str
    parallelism: int
    completions: int | None
    completion_mode: str
    """``NonIndexed`` or ``Indexed`` (ranks come from the completion index)."""
    finished: bool
    """A ``Complete`` or ``Failed`` condition is True: its plan can be released."""
    deleted: bool = False
    """``metadata.deletionTimestamp`` is set, or the delete event arrived."""

    @property
    def gang_size(self) -> int:
        """min(parallelism, completions); parallelism alone for a work-queue Job."""
        return self.parallelism if self.completions is None else min(self.parallelism, self.completions)

    @classmethod
    def from_manifest(cls, body: Mapping[str, Any]) -> JobInfo:
        metadata = body.get("metadata") or {}
        spec = body.get("spec") or {}
        status = body.get("status") or {}
        finished = any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
        completions = spec.get("completions")
        return cls(
            namespace=str(metadata.get("namespace") or "default"),
            name=str(metadata["name"]),
            uid=str(metadata.get("uid") or ""),
            parallelism=int(spec.get("parallelism", 1) if spec.get("parallelism") is not None else 1),
            completions=int(completions) if completions is not None else None,
            completion_mode=str(spec.get("completionMode") or "NonIndexed"),
            finished=finished,
            deleted=bool(metadata.get("deletionTimestamp")),
        )


@dataclass(frozen=True)
class PodBound:
    """A GPU pod got a node (``spec.nodeName`` set), first seen bound or newly bound."""

    pod: k8s.PodUsage


@dataclass(frozen=True)
class PodEnded:
    """A bound GPU pod stopped holding its node: finished, terminated, or deleted.

    ``deleted`` tells a pod that is gone from one that still exists in a final phase.
    """

    pod: k8s.PodUsage
    deleted: bool = False


@dataclass(frozen=True)
class JobFinished:
    job: JobInfo


@dataclass(frozen=True)
class JobDeleted:
    job: JobInfo


@dataclass(frozen=True)
class HealthChanged:
    """An element's effective health changed (after hysteresis) in one topology."""

    topology: ids.TopologyName
    change: fabrics.HealthTransition


@dataclass(frozen=True)
class TopologyChanged:
    """A FabricTopology was created, edited, deleted, or its set of nodes changed."""

    topology: ids.TopologyName
    deleted: bool = False


Change = PodBound | PodEnded | JobFinished | JobDeleted | HealthChanged | TopologyChanged
Subscriber = Callable[[Change], None]

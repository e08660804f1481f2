"""What the cluster state tells its subscribers: one ``Change`` per move that matters.

``StateView.subscribe(callback)`` calls back synchronously with these, after the state has
moved; the extender's book and the operator's health Events follow the cluster through them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fabricsched import ids
from fabricsched.ports import jobs
from fabricsched.topology import health
from fabricsched.topology import nodes as k8s


@dataclass(frozen=True)
class PodBound:
    """A GPU pod got a node (``spec.nodeName`` set), first seen bound or newly bound."""

    pod: k8s.PodUsage


@dataclass(frozen=True)
class PodEnded:
    """A bound GPU pod stopped holding its node (finished, terminated, or deleted), or an
    unbound one was deleted (``pod.node`` is None then).

    ``deleted`` tells a pod that is gone from one that still exists in a final phase.
    """

    pod: k8s.PodUsage
    deleted: bool = False


@dataclass(frozen=True)
class JobFinished:
    job: jobs.JobInfo


@dataclass(frozen=True)
class JobDeleted:
    job: jobs.JobInfo


@dataclass(frozen=True)
class HealthChanged:
    """An element's effective health changed (after hysteresis) in one topology."""

    topology: ids.TopologyName
    change: health.HealthChange


@dataclass(frozen=True)
class TopologyChanged:
    """A FabricTopology was created, edited, deleted, or its set of nodes changed."""

    topology: ids.TopologyName
    deleted: bool = False


Change = PodBound | PodEnded | JobFinished | JobDeleted | HealthChanged | TopologyChanged
Subscriber = Callable[[Change], None]
Unsubscribe = Callable[[], None]

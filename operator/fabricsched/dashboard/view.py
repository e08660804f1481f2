"""What the fabric page reads: plain frozen facts, and the ``PageSource`` that hands them out.

A source answers from memory and never blocks: ``version`` is compared with ``==`` on every
request, so it must be cheap (counters and the identities of immutable objects), and the
facts are read only when it moved.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fabricsched import ids
from fabricsched.topology import fabric, health


@dataclass(frozen=True)
class FabricFacts:
    """One topology as the engine sees it now, with what plans hold on it."""

    name: ids.TopologyName
    fabric: fabric.Fabric
    free_gpus: Mapping[ids.NodeName, int]
    """Allocatable minus what active pods hold, per host."""
    reserved_gpus: Mapping[ids.NodeName, int]
    """GPUs held by plans for ranks not bound yet; hosts holding none are absent."""
    health: Mapping[health.ElementId, health.ElementHealth]
    """The effective health of every element that is not healthy (reason, since)."""


@dataclass(frozen=True)
class GangFacts:
    """One gang with a plan (Reserved, Bound or Expired)."""

    key: ids.GangKey
    namespace: str
    name: str
    topology: ids.TopologyName
    phase: str
    size: int
    gpus_per_pod: int
    tier: str | None
    required: bool
    hosts: tuple[ids.NodeName, ...]
    """The node of every placed rank (bound or held), by rank."""
    slowdown: float
    slowdown_at_placement: float
    degraded_path: bool
    placement: str = ""
    """The gang's FabricPlacement's name (its diagnosis reads it); "" when unknown."""


@dataclass(frozen=True)
class PendingFacts:
    """A gang without a plan, and why."""

    key: ids.GangKey
    namespace: str
    name: str
    topology: ids.TopologyName | None
    reason: str
    message: str
    since: float | None = None


@dataclass(frozen=True)
class PageSnapshot:
    """Everything the page shows, at one version."""

    fabrics: Sequence[FabricFacts]
    gangs: Sequence[GangFacts] = ()
    pending: Sequence[PendingFacts] = ()
    report: Mapping[str, object] = field(default_factory=dict)
    """Extra sections of a static report (the simulator's per-job table and plots)."""


class PageSource(Protocol):
    """The process's state as the page reads it."""

    def version(self) -> Hashable:
        """Equal while nothing the page shows has changed (cheap: called per request)."""
        ...

    def snapshot(self) -> PageSnapshot:
        """The facts at the current version."""
        ...

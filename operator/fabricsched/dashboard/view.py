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
class SliceFacts:
    """A gang's slices: ``pods`` consecutive ranks inside one domain of ``tier``."""

    pods: int
    tier: str
    required: bool
    domains: tuple[str, ...] = ()
    """The domain of each slice, slice 0 first; empty when no plan keeps them (or no plan yet)."""


@dataclass(frozen=True)
class VictimFacts:
    """One workload a gang evicted: a whole gang, or a single pod."""

    namespace: str
    name: str
    priority: int
    gpus: int


@dataclass(frozen=True)
class PreemptionFacts:
    """What a gang evicted for its plan (docs/preemption.md), kept for the life of the plan."""

    victims: tuple[VictimFacts, ...]
    domain: str
    """``tier/name`` of the domain cleared (``fabric``: the whole fabric)."""
    at: float
    cleared_at: float | None = None
    """When the last victim pod was gone; None while one still terminates."""


@dataclass(frozen=True)
class PreemptedByFacts:
    """Who last preempted a gang (its next plan keeps it)."""

    preemptor: str
    """``namespace/name`` of the preempting gang."""
    priority: int
    domain: str
    at: float


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
    preferred_tier: str | None = None
    """A lower preferred tier beside a required ``tier``."""
    slices: SliceFacts | None = None
    priority: int = 0
    preemption: PreemptionFacts | None = None
    preempted_by: PreemptedByFacts | None = None
    traffic: str = "all-to-all"
    """The traffic pattern its slowdown is priced with (all-to-all or ring)."""


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

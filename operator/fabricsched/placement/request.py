"""What the engine is asked (a gang request) and what it answers (a plan, or why not)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fabricsched import ids


@dataclass(frozen=True)
class GangRequest:
    key: ids.GangKey
    pods: int
    gpus_per_pod: int
    tier: int | None = None
    """Constraint tier index; None = preferred lowest tier."""
    required: bool = False
    """True: the whole gang inside one domain of ``tier``, or no plan."""


@dataclass(frozen=True)
class PlacementOptions:
    health_aware: bool = True
    """False gives the health-blind topology best fit (the simulator's ``tas-bestfit``);
    down elements are still never used."""


@dataclass(frozen=True)
class Plan:
    ranks: tuple[ids.NodeName, ...]
    """Node of every rank, rank 0 first, in fabric order (rule 4)."""
    tier: int | None
    """Lowest tier with one domain holding the whole gang; None when it fits one host."""
    domains: Mapping[int, tuple[ids.DomainName, ...]]
    """Domains used at every tier."""
    comm_slowdown: float
    degraded_path: bool
    reasons: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class NoFit:
    """The gang cannot be placed now; ``unresolvable`` means it never could in this fabric."""

    reason: str
    unresolvable: bool = False

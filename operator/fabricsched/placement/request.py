"""What the engine is asked (a gang request) and what it answers (a plan, or why not)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from fabricsched import ids
from fabricsched.topology import fabric


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
class LocalityWait:
    """Hold a gang whose best plan now is well above its floor, for a bounded time.

    Like Slurm's ``--switches=N@timeout``: a gang whose plan's comm_slowdown is more than
    ``tolerance`` above its floor (alone in the empty healthy fabric) waits for a better plan,
    but never longer than ``timeout_s`` in all. ``placement.patience.decide`` applies it; the
    placement search itself ignores it. ``timeout_s`` 0 (the default) turns it off.
    """

    timeout_s: float = 0.0
    """Longest a gang is held, counted from when the caller's clock for it starts (the
    simulator: submission); 0 = start as soon as a plan exists."""
    tolerance: float = 0.05
    """A plan within floor x (1 + tolerance) starts at once."""

    def __post_init__(self) -> None:
        # A timeout must be finite: the wait is only safe because it always ends.
        if not (math.isfinite(self.timeout_s) and self.timeout_s >= 0):
            raise ValueError(f"locality wait timeout must be finite and >= 0, got {self.timeout_s}")
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise ValueError(f"locality wait tolerance must be finite and >= 0, got {self.tolerance}")

    @property
    def enabled(self) -> bool:
        return self.timeout_s > 0


@dataclass(frozen=True)
class PlacementOptions:
    health_aware: bool = True
    """False gives the health-blind topology best fit (the simulator's ``tas-bestfit``);
    down elements are still never used."""
    locality_wait: LocalityWait = LocalityWait()
    """Off by default; see ``placement.patience``. Plans do not depend on it."""


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
    required_tier: bool = False
    """The reason is the required tier: no domain of it holds the gang (now, or ever)."""


def gang_on(
    fab: fabric.Fabric, key: ids.GangKey, pods: int, gpus_per_pod: int, tier: str | None, required: bool
) -> GangRequest | NoFit:
    """The request for a gang whose constraint tier is named (or None): every caller builds
    its requests here, so the tier and whether it is required always reach the engine. A tier
    name the fabric does not have can never be met."""
    if tier is None:
        return GangRequest(key, pods, gpus_per_pod, None, required)
    try:
        index = fab.tier_index(tier)
    except KeyError:
        tiers = ", ".join(t.name for t in fab.tiers)
        return NoFit(f"tier {tier!r} is not a tier of this fabric ({tiers})", unresolvable=True)
    return GangRequest(key, pods, gpus_per_pod, index, required)

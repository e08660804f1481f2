"""What the engine is asked (a gang request) and what it answers (a plan, or why not)."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field

from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.topology import fabric

Pattern = api.TrafficPattern


@dataclass(frozen=True)
class GangRequest:
    key: ids.GangKey
    pods: int
    gpus_per_pod: int
    tier: int | None = None
    """Constraint tier index; None = preferred lowest tier."""
    required: bool = False
    """True: the whole gang inside one domain of ``tier``, or no plan."""
    _: KW_ONLY
    preferred_tier: int | None = None
    """With a required ``tier``: a lower tier the gang would rather be inside (only noted when
    it is not: the engine climbs lowest first anyway)."""
    slice_pods: int = 1
    """Consecutive ranks in groups of this many, each inside one domain of ``slice_tier``
    (1: no slices). The gang's size must be a multiple of it."""
    slice_tier: int | None = None
    slice_required: bool = True
    """False: slices that no plan keeps whole now are given up (and noted), not waited for."""
    pattern: Pattern = Pattern.ALL_TO_ALL
    """How its pods talk: what the capacity model prices its plans with (docs/model.md)."""

    @property
    def sliced(self) -> bool:
        return self.slice_pods > 1 and self.slice_tier is not None

    @property
    def preferred(self) -> int | None:
        """The tier the gang would rather be inside: its preferred tier, or the lower one."""
        return self.preferred_tier if self.required else self.tier


@dataclass(frozen=True)
class Slices:
    """Slices as a gang's pods ask for them: ``pods`` consecutive ranks inside one ``tier``."""

    pods: int
    tier: str
    required: bool = True


DEFAULT_HOLD_LIMIT = 2.0
"""``LocalityWait.hold_limit`` as shipped: chosen on the simulator's ladder of waits
(docs/benchmark.md "The short-wait anomaly"), where re-holding a gang that lost its fit, up to
twice the timeout from its first hold, keeps a longer wait from ever doing worse than a
shorter one."""
MAX_HOLD_LIMIT = 10.0
"""A larger limit would let one gang be held for most of a day per hour of timeout."""


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
    hold_limit: float = DEFAULT_HOLD_LIMIT
    """The longest a gang is held in all, in timeouts, counted from its first hold. A held gang
    that loses its fit (no plan when it is asked) is held afresh once it fits again, within
    this limit; 1 is one hold only, from the first plan (the rule before re-holds)."""

    def __post_init__(self) -> None:
        # A timeout must be finite: the wait is only safe because it always ends.
        if not (math.isfinite(self.timeout_s) and self.timeout_s >= 0):
            raise ValueError(f"locality wait timeout must be finite and >= 0, got {self.timeout_s}")
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise ValueError(f"locality wait tolerance must be finite and >= 0, got {self.tolerance}")
        if not (math.isfinite(self.hold_limit) and 1 <= self.hold_limit <= MAX_HOLD_LIMIT):
            raise ValueError(f"locality hold limit must be between 1 and {MAX_HOLD_LIMIT:g} timeouts, "
                             f"got {self.hold_limit}")

    @property
    def enabled(self) -> bool:
        return self.timeout_s > 0


class FitOrder(enum.StrEnum):
    """What "best fit" compares among plans equal on health, tier and comm_slowdown
    (``fabricsched run/simulate --fit-order``; docs/placement.md)."""

    TOP_DOWN = "top-down"
    """The tightest domain at every tier, top tier first, then the room the holder has left,
    then the fewest whole domains broken; a single pod takes a partly used host first, then
    best fit top down (the default)."""
    HOLDING = "holding"
    """The older rule, kept to restore it: only the room the holding domain has left; a gang on one host
    takes the tightest host anywhere, a single pod the tightest host of a partly used leaf."""


DEFAULT_FIT_ORDER = FitOrder.TOP_DOWN


@dataclass(frozen=True)
class PlacementOptions:
    health_aware: bool = True
    """False gives the health-blind topology best fit (the simulator's ``tas-bestfit``);
    down elements are still never used."""
    fit_order: FitOrder = DEFAULT_FIT_ORDER
    """The best-fit tie-break after health, tier and comm_slowdown (``FitOrder``)."""
    locality_wait: LocalityWait = LocalityWait()
    """Off by default; see ``placement.patience``. Plans do not depend on it."""


@dataclass(frozen=True)
class Previous:
    """Where a gang ran until its whole group was restarted (its released plan), rank 0 first.

    A hint, not a constraint: ``placement.previous.back`` plans the gang there again only when
    that is as good as a fresh plan. The caller decides how recent a release still counts."""

    ranks: tuple[ids.NodeName, ...]


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
    slice_domains: tuple[ids.DomainName, ...] = ()
    """The domain of the slice tier holding each slice, slice 0 first; empty when the gang has
    no slices or a preferred slice tier did not hold."""


@dataclass(frozen=True)
class NoFit:
    """The gang cannot be placed now; ``unresolvable`` means it never could in this fabric."""

    reason: str
    unresolvable: bool = False
    required_tier: bool = False
    """The reason is the required tier: no domain of it holds the gang (now, or ever)."""


def gang_on(
    fab: fabric.Fabric, key: ids.GangKey, pods: int, gpus_per_pod: int, tier: str | None, required: bool,
    *, preferred: str | None = None, slices: Slices | None = None, pattern: Pattern | None = None,
) -> GangRequest | NoFit:
    """The request for a gang whose constraint tiers are named (or None): every caller builds
    its requests here, so the tiers and whether they are required always reach the engine. A
    tier name the fabric does not have can never be met; nor can slices that do not divide the
    gang, or a preferred tier above the required one. ``pattern`` None: the fabric's default."""
    traffic = fab.traffic if pattern is None else pattern
    indexes: dict[str, int] = {}
    for name in (tier, preferred, slices.tier if slices else None):
        if name is None:
            continue
        try:
            indexes[name] = fab.tier_index(name)
        except KeyError:
            tiers = ", ".join(t.name for t in fab.tiers)
            return NoFit(f"tier {name!r} is not a tier of this fabric ({tiers})", unresolvable=True)
    index = None if tier is None else indexes[tier]
    lower = None if preferred is None else indexes[preferred]
    if lower is not None and index is not None and required and lower > index:
        return NoFit(f"preferred tier {preferred} is above required tier {tier}", unresolvable=True)
    if slices is None or slices.pods <= 1:
        return GangRequest(key, pods, gpus_per_pod, index, required, preferred_tier=lower, pattern=traffic)
    if slices.pods < 1 or pods % slices.pods:
        return NoFit(f"a gang of {pods} pods cannot be cut in slices of {slices.pods}", unresolvable=True)
    return GangRequest(key, pods, gpus_per_pod, index, required, preferred_tier=lower, slice_pods=slices.pods,
                       slice_tier=indexes[slices.tier], slice_required=slices.required, pattern=traffic)

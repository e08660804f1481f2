"""Waiting for locality: start a gang on its plan now, or hold it for a better one, bounded.

Under saturation GPUs come back one ending job at a time, and a gang started as soon as its
pods fit lands on whichever scattered hosts are free: it crosses oversubscribed uplinks and
runs stretched, holding its GPUs longer, which keeps the cluster saturated. Holding such a gang
for a while (Slurm's ``--switches=N@timeout``) lets it start near its floor instead; measured
on the simulator this both closes the gap to the floor and shortens the mean wait.

The decision is pure and cheap: the plan the engine made now, the gang's floor (``Floors``),
how long the gang has been held, how much of the fabric is free, and ``request.LocalityWait``.
Time is the caller's. The clock starts when the gang first had a plan, not at its submission:
counted from submission, a gang that queued for capacity longer than the timeout (every gang,
under saturation) was never held, so a short wait held only the gangs that arrived to free room
and left the stretched regime alone; measured on the simulator that made short waits worse
than none (docs/benchmark.md "The short-wait anomaly"). It never holds a gang past the timeout,
whatever the reason its plan is above the floor (contention that will pass, or a degraded
element that will not): the timeout is what bounds every wait.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from fabricsched import ids
from fabricsched.placement import placing, request, snapshot
from fabricsched.topology import fabric

_SLACK = 1e-9
"""Float noise allowed on the comparison with the floor (both are ratios of sums)."""

_CLOCK_SLACK_S = 1e-6
"""A wait this close to the timeout has reached it: a caller that retries at start + timeout
must not be held again by float rounding of the clock."""

FORGET_AFTER_S = 1800.0
"""A gang not asked about for this long is forgotten by ``Clocks``. The kube-scheduler retries
an unschedulable pod at least every ``podMaxInUnschedulablePodsDuration`` (5 minutes by
default), so a gang still waiting is seen again well before; a forgotten one that comes back
counts from its pods' creation anyway."""

_STRUCTURES_KEPT = 4
"""Structures whose floors ``Floors`` keeps: a structure changes only when nodes come or go."""

_SHAPES_KEPT = 1024
"""Floors kept per structure: (pods, GPUs per pod, eligible hosts) keys; the eligible hosts come
from pods' node selectors, so a bound keeps a stream of distinct selectors from growing it."""

UNSATURATED_FREE = 0.5
"""A fabric with more than this share of its (eligible) GPUs free is not saturated: capacity is
not what a gang above its floor lacks, so waiting longer rarely finds a better plan."""

UNSATURATED_CAP_S = 600.0
"""Longest hold while the fabric is not saturated (``UNSATURATED_FREE``)."""

DEFAULT_LOCALITY_WAIT = request.LocalityWait(timeout_s=14400.0, tolerance=0.05,
                                             hold_limit=request.DEFAULT_HOLD_LIMIT)
"""The shipped wait for locality: ``fabricsched run --locality-wait`` (and the chart's
``fabricsched.localityWait``) and ``fabricsched simulate``'s ``fabric`` policy both default to
it. Chosen on the simulator's load sweep (docs/benchmark.md "Waiting for locality: the
timeout"); ``0s`` turns it off, per cluster or per gang."""



@dataclass(frozen=True)
class Start:
    """Start the gang on the plan now."""

    reason: str | None = None
    """For people (FabricPlacement reasons, pod Events); None when the wait played no part."""


@dataclass(frozen=True)
class Wait:
    """Hold the gang: do not start it on this plan yet."""

    reason: str
    retry_in_s: float
    """Seconds until the timeout: the caller must ask again by then (at the latest), when the
    gang starts on whatever plan it has."""


Decision = Start | Wait


def within(slowdown: float, floor: float, tolerance: float) -> bool:
    """The slowdown is close enough to the floor (an unknown or infinite floor never holds)."""
    if not math.isfinite(floor):
        return True
    return slowdown <= floor * (1 + tolerance) + _SLACK


@dataclass(frozen=True)
class Held:
    """How long a gang has been held for locality so far."""

    this_s: float = 0.0
    """Since this hold began: its first plan, or its first plan after it lost its fit."""
    total_s: float = 0.0
    """Since its first hold."""



def decide(
    plan: request.Plan, floor: float, held: Held, wait: request.LocalityWait, free_share: float = 0.0
) -> Decision:
    """Start ``plan`` now, or hold the gang for a plan within ``wait.tolerance`` of ``floor``.

    ``floor`` is the gang's slowdown alone in the empty healthy fabric of the hosts it may use
    (``Floors.slowdown``); ``held`` how long the gang has been held so far; ``free_share`` the
    share of those hosts' GPUs free now. A gang is held only while the wait is on, its plan is
    above floor x (1 + tolerance), this hold is shorter than the timeout (capped at
    ``UNSATURATED_CAP_S`` while the fabric is not saturated), and its first hold less than
    ``wait.hold_limit`` timeouts old. A held gang loses its fit when the jobs behind it take its
    hosts (a hold reserves nothing); holding it afresh once it fits again gives it the same
    chance of a plan near its floor, and the limit keeps it from being held for ever: asked
    once its first hold is that old, it starts. The caller is told to ask again by the end of
    this hold, not by the limit: started at an arbitrary moment, a gang takes whatever is free
    then, while the next ask usually comes with capacity that came back (measured on the
    simulator's ladder of waits, docs/benchmark.md).
    """
    waited_s = held.total_s if wait.hold_limit <= 1 else held.this_s
    if not wait.enabled or within(plan.comm_slowdown, floor, wait.tolerance):
        if wait.enabled and held.total_s > 0 and plan.comm_slowdown > 1 + _SLACK:
            return Start(f"within {_pct(wait.tolerance)} of its floor {floor:.2f}x after waiting "
                         f"{held.total_s:.0f} s: {plan.comm_slowdown:.2f}x")
        return Start()
    limit = wait.hold_limit * wait.timeout_s
    if wait.hold_limit > 1 and held.total_s >= limit - _CLOCK_SLACK_S:
        return Start(f"held {held.total_s:.0f} s in all ({wait.hold_limit:g}x the timeout "
                     f"{wait.timeout_s:.0f} s) for a placement within {_pct(wait.tolerance)} of its "
                     f"floor {floor:.2f}x: starting at {plan.comm_slowdown:.2f}x")
    timeout = wait.timeout_s
    if free_share > UNSATURATED_FREE:
        timeout = min(timeout, UNSATURATED_CAP_S)
    waited = max(0.0, waited_s)
    if waited >= timeout - _CLOCK_SLACK_S:
        return Start(f"waited {waited:.0f} s (timeout {timeout:.0f} s) for a placement within "
                     f"{_pct(wait.tolerance)} of its floor {floor:.2f}x: "
                     f"starting at {plan.comm_slowdown:.2f}x")
    left = timeout - waited
    return Wait(f"waiting up to {left:.0f} s more (timeout {timeout:.0f} s) for a placement within "
                f"{_pct(wait.tolerance)} of its floor {floor:.2f}x: best now {plan.comm_slowdown:.2f}x",
                left)


def _pct(fraction: float) -> str:
    return f"{100 * fraction:g}%"


@dataclass(frozen=True, eq=False)
class _Structure:
    """What a floor depends on: tiers, bandwidth, rails, and every host's GPUs and path.

    Health is left out on purpose (the floor is in the healthy fabric), so the snapshots a
    health change rebuilds share their floors. The hash is computed once: dict lookups of the
    same key object then cost a hash and an identity check, not a walk over every host.
    """

    parts: tuple[object, ...]
    digest: int

    def __hash__(self) -> int:
        return self.digest

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Structure) and self.digest == other.digest and self.parts == other.parts


def _structure(fab: fabric.Fabric) -> _Structure:
    hosts = tuple(sorted((h.name, h.gpus, h.path) for h in fab.hosts.values()))
    tiers = tuple((t.name, t.oversubscription) for t in fab.tiers)
    parts: tuple[object, ...] = (tiers, fab.gpu_bandwidth_gbps, fab.rails, hosts)
    return _Structure(parts, hash(parts))


@dataclass
class _Floors:
    reference: fabric.Fabric
    """The structure with every element healthy, built once."""
    by_shape: dict[tuple[int, int, request.Pattern, frozenset[ids.NodeName] | None], float]


class Floors:
    """Floor slowdowns per (fabric structure, pods, GPUs per pod), computed once each.

    Per-caller state like ``capacity.Traffic`` (no global cache): each placement session
    (``session.Session``) keeps one. A floor costs one engine call on the empty healthy fabric.
    """

    def __init__(self) -> None:
        self._structures: dict[_Structure, _Floors] = {}
        self._last: tuple[fabric.Fabric, _Structure] | None = None
        """The last fabric asked about and its structure: one snapshot asks many times."""

    def slowdown(self, fab: fabric.Fabric, pods: int, gpus_per_pod: int,
                 pattern: request.Pattern = request.Pattern.ALL_TO_ALL, *,
                 eligible: frozenset[ids.NodeName] | None = None) -> float:
        """The gang's comm_slowdown alone in the empty, healthy ``fab`` (inf if it never fits),
        on the ``eligible`` hosts only when given (those its pods' node selectors allow)."""
        entry = self._entry(fab)
        shape = (pods, gpus_per_pod, pattern, eligible)
        found = entry.by_shape.get(shape)
        if found is None:
            found = floor_slowdown(entry.reference, pods, gpus_per_pod, pattern, eligible=eligible)
            if len(entry.by_shape) >= _SHAPES_KEPT:
                del entry.by_shape[next(iter(entry.by_shape))]
            entry.by_shape[shape] = found
        return found

    def _entry(self, fab: fabric.Fabric) -> _Floors:
        if self._last is not None and self._last[0] is fab:
            key = self._last[1]
        else:
            key = _structure(fab)
            self._last = (fab, key)
        entry = self._structures.get(key)
        if entry is None:
            if len(self._structures) >= _STRUCTURES_KEPT:
                del self._structures[next(iter(self._structures))]  # the oldest structure
            entry = _Floors(healthy(fab), {})
            self._structures[key] = entry
        return entry


def healthy(fab: fabric.Fabric) -> fabric.Fabric:
    """The same fabric with every element healthy: the floor's reference (same structure)."""
    ok = fabric.HealthState.HEALTHY
    hosts = {n: dataclasses.replace(h, health=1.0, state=ok) for n, h in fab.hosts.items()}
    domains = {k: dataclasses.replace(d, uplink_health=1.0, state=ok) for k, d in fab.domains.items()}
    return dataclasses.replace(fab, hosts=hosts, domains=domains)


def floor_slowdown(fab: fabric.Fabric, pods: int, gpus_per_pod: int,
                   pattern: request.Pattern = request.Pattern.ALL_TO_ALL, *,
                   eligible: frozenset[ids.NodeName] | None = None) -> float:
    """A gang's comm_slowdown alone in the empty, healthy fabric (inf if it can never fit),
    on the ``eligible`` hosts only when given.

    Health is ignored whatever ``fab`` says, so the healthy copy is only made when needed;
    ``Floors`` keeps the answers per structure.
    """
    reference = healthy(fab) if fab.unhealthy else fab
    free = {name: host.gpus for name, host in reference.hosts.items()}
    gang = request.GangRequest(ids.GangKey("floor"), pods, gpus_per_pod, pattern=pattern)
    result = placing.place(snapshot.build(reference), free, gang, candidates=eligible)
    return result.comm_slowdown if isinstance(result, request.Plan) else math.inf


def hold_for(
    floors: Floors,
    fab: fabric.Fabric,
    gang: request.GangRequest,
    plan: request.Plan,
    held: Held,
    wait: request.LocalityWait,
    free: Mapping[ids.NodeName, int] | None = None,
    eligible: frozenset[ids.NodeName] | None = None,
) -> Decision:
    """``decide`` with the floor (over ``eligible`` hosts, all when None) and the free share of
    those hosts' GPUs (``free``: GPUs free per host; None counts as saturated) looked up: what
    the simulator and the extender call."""
    if not wait.enabled:
        return Start()
    floor = floors.slowdown(fab, gang.pods, gang.gpus_per_pod, gang.pattern, eligible=eligible)
    if free is None or within(plan.comm_slowdown, floor, wait.tolerance):
        return decide(plan, floor, held, wait)  # the free share is only read for a hold
    return decide(plan, floor, held, wait, free_share(fab, free, eligible))


def free_share(fab: fabric.Fabric, free: Mapping[ids.NodeName, int],
               eligible: frozenset[ids.NodeName] | None = None) -> float:
    """The share of the (eligible) hosts' GPUs free now; 0 for no GPUs."""
    hosts = fab.hosts.values() if eligible is None else [h for h in fab.hosts.values() if h.name in eligible]
    total = sum(h.gpus for h in hosts)
    return sum(min(free.get(h.name, 0), h.gpus) for h in hosts) / total if total else 0.0


class Clocks:
    """When each gang not yet started began its hold, and its first hold: the hold rules of the
    extender and the simulator alike.

    Any pod of a held gang may be the next one the kube-scheduler asks about; the clock is the
    gang's, not the pod's. ``hold`` starts a hold (the gang has a plan it is held from);
    ``lost_fit`` ends the current hold (the gang had no plan when asked): its next plan starts a
    new one, while the first hold is kept for ``LocalityWait.hold_limit``; ``forget`` ends both
    (the gang started, or went away).
    """

    def __init__(self) -> None:
        self._started: dict[ids.GangKey, tuple[float | None, float, float]] = {}
        """gang -> (start of this hold or None after a lost fit, start of its first, last time asked)."""

    def held(self, key: ids.GangKey, now: float) -> Held:
        """How long gang ``key`` has been held by ``now``, starting no clock: nothing for a gang
        never held, nothing of this hold for one that lost its fit since it was last held."""
        known = self._started.get(key)
        if known is None:
            return Held()
        start = now if known[0] is None else known[0]
        return Held(now - start, now - known[1])

    def hold(self, key: ids.GangKey, now: float) -> None:
        """Gang ``key`` is held now: its hold starts now unless one is on, its first hold too."""
        known = self._started.get(key)
        if known is None:
            self._started[key] = (now, now, now)
        else:
            self._started[key] = (now if known[0] is None else known[0], known[1], now)

    def waited(self, key: ids.GangKey, now: float) -> Held:
        """How long gang ``key``, which has a plan now, has been held: its clock starts now if
        it has none (or lost its fit since it was last held)."""
        self.hold(key, now)
        return self.held(key, now)

    def holding(self) -> list[ids.GangKey]:
        """The gangs whose hold is on (not those that lost their fit since)."""
        return [k for k, v in self._started.items() if v[0] is not None]

    def lost_fit(self, key: ids.GangKey, now: float) -> None:
        """Gang ``key`` had no plan when asked: its current hold ends (a held gang only)."""
        known = self._started.get(key)
        if known is not None:
            self._started[key] = (None, known[1], now)

    def forget(self, key: ids.GangKey) -> None:
        self._started.pop(key, None)

    def prune(self, now: float) -> None:
        """Drop gangs not asked about for ``FORGET_AFTER_S`` (deleted while waiting)."""
        self._started = {k: v for k, v in self._started.items() if now - v[2] < FORGET_AFTER_S}

    def __len__(self) -> int:
        return len(self._started)

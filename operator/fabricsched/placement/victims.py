"""The victim search of ``preemption``: per candidate domain, the set whose eviction lets the gang fit.

Sets are ranked by (1) the highest victim priority, lowest first; (2) GPUs evicted, fewest
first; (3) workloads disrupted, fewest first; (4) progress lost (GPUs x running time), least
first; (5) the plan's own preferences: healthy path, lowest comm_slowdown, best fit (least
room left in the domain), then the domain's name.

The search is bounded, not exhaustive (the exact choice is a knapsack per domain):

1. The domains are those of the gang's tier (its required or preferred tier; with none, the
   lowest tier one domain of which can ever hold it; the whole fabric when none can). A domain
   is skipped at once when its pod slots would stay too few even with every candidate gone.
2. Criterion 1 exactly: candidates in the domain (any of their pods on its hosts) are taken
   by priority level, lowest first, until evicting every candidate up to a level lets the
   engine place the gang inside the domain.
3. Then a reprieve, as the kube-scheduler's DefaultPreemption does on one node: each victim of
   that set is kept back when the gang still fits without evicting it, most costly first. Two
   orders are tried (largest first, and smallest first, each by priority, GPUs, progress) and
   the better set by the ranking kept; the result is minimal: no victim can be spared.

Every fit is ``placing.place`` restricted to the domain's hosts (the candidates), with the
victims' GPUs given back: O(levels + 2 x candidates) engine calls per domain that passes the
slot check.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from fabricsched import ids
from fabricsched.placement import bounds, capacity, placing, reasons, request, snapshot, workloads
from fabricsched.placement.bounds import Cost
from fabricsched.placement.workloads import Admits, OnDomain, OnHost, RunningWorkload
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey
hosts_of, by_domain, by_host = workloads.hosts_of, workloads.by_domain, workloads.by_host
SLOWDOWN_FLOOR = 1.0
"""The least comm_slowdown a plan has (``capacity.comm_slowdown``: max(1, ...))."""


@dataclass(frozen=True)
class Choice:
    """Evict ``victims`` (whole workloads) and place the gang on ``plan`` inside ``domain``."""

    domain: DomainKey
    """The domain cleared; the whole fabric is ``(len(tiers), "")``."""
    victims: tuple[RunningWorkload, ...]
    """Lowest priority first."""
    plan: request.Plan
    gpus_evicted: int
    progress_lost_gpu_s: float

    @property
    def highest_priority(self) -> int:
        return max(w.priority for w in self.victims)


Found = tuple[DomainKey, frozenset[ids.NodeName], list[RunningWorkload]]
"""A domain, its hosts (the candidates among them), and its victims or its local candidates."""

class KeptIndexes(Protocol):
    """The workloads a caller keeps indexed between searches (each index of a superset of the
    pool searched, ``Admits`` telling the pool's apart): the extender keeps them from one
    decision to the next, with the domains' cost bounds."""

    def by_host(self) -> OnHost: ...

    def by_domain(self, snap: snapshot.Snapshot, tier: int) -> OnDomain: ...

    def bounds(self) -> bounds.Bounds: ...


class Indexed:
    """``KeptIndexes`` made at once from ``workloads``: the reference the kept indexes are tested against."""

    def __init__(self, workloads: Iterable[RunningWorkload]) -> None:
        self._on_host = by_host(workloads)
        self._bounds = bounds.Bounds()

    def by_host(self) -> OnHost:
        return self._on_host

    def by_domain(self, snap: snapshot.Snapshot, tier: int) -> OnDomain:
        return by_domain(snap, tier, self._on_host)

    def bounds(self) -> bounds.Bounds:
        return self._bounds



def tier_of(snap: snapshot.Snapshot, gang: request.GangRequest) -> int:
    """The tier whose domains are cleared: the gang's, else the lowest one domain of which
    could ever hold it; ``levels`` (the whole fabric) when none could."""
    fab, levels = snap.fabric, snap.tree.levels
    start = 0 if gang.tier is None else gang.tier
    if gang.required and gang.tier is not None:
        return gang.tier
    for tier in range(start, levels):
        if fab.largest_domain(tier, gang.gpus_per_pod)[1] >= gang.pods:
            return tier
    return levels


def tier_name(snap: snapshot.Snapshot, gang: request.GangRequest) -> str:
    return reasons.tier_name(snap.fabric, tier_of(snap, gang))


def search(
    snap: snapshot.Snapshot,
    free: Mapping[ids.NodeName, int],
    pool: Sequence[RunningWorkload],
    gang: request.GangRequest,
    now_s: float,
    traffic: capacity.Traffic | None,
    options: request.PlacementOptions,
    candidates: Collection[ids.NodeName] | None,
    exhaustive: bool = False,
    kept: tuple[KeptIndexes, Admits] | None = None,
) -> Choice | None:
    """The best victim set over the domains of the gang's tier; None when no domain fits.

    ``exhaustive`` makes the plan of every domain tied on criteria 1-4 (the reference the
    shortcut below is tested against: the same choice). ``kept``: the caller's indexes of a
    superset of ``pool``, and which of them ``pool`` holds (``pool`` is then not read: a pass
    over every workload saved, and each domain's bound kept while nothing under it changed)."""
    scored = _scored(snap, free, pool, gang, now_s, candidates, kept)
    if not exhaustive:
        scored.sort(key=lambda s: (s[0], s[1]))
    lowest, cheapest, deferred = _cheapest(snap, free, scored, gang, now_s, options, exhaustive)
    return _tie_broken(snap, free, lowest, cheapest, deferred, gang, now_s, traffic, options, exhaustive)


def _scored(
    snap: snapshot.Snapshot, free: Mapping[ids.NodeName, int], pool: Sequence[RunningWorkload],
    gang: request.GangRequest, now_s: float, candidates: Collection[ids.NodeName] | None,
    kept: tuple[KeptIndexes, Admits] | None,
) -> list[tuple[Cost, int, DomainKey, frozenset[ids.NodeName], list[RunningWorkload]]]:
    """Every domain of the gang's tier some victim set could clear: the lower bound of its cost,
    its position, key, hosts and local candidates (in no particular order: no step depends on it)."""
    index = snap.tree
    tier = tier_of(snap, gang)
    if candidates is None:
        indexes, admits = (Indexed(pool), None) if kept is None else kept
        on_domain, kept_bounds = indexes.by_domain(snap, tier), indexes.bounds()
        scored = []
        for n, key in enumerate(index.by_tier[tier]):
            domain = kept_bounds.of(snap, free, tier, key, on_domain.get(key, ()), admits, gang)
            cost = domain.cost(now_s) if domain.local else None
            if cost is not None:
                scored.append((cost, n, key, domain.hosts, domain.local))
        return scored
    # Some hosts are not candidates: each domain's candidates are read by host.
    allowed = frozenset(candidates)
    on_host = Indexed(pool).by_host() if kept is None else kept[0].by_host()
    scored = []
    for n, key in enumerate(index.by_tier[tier]):
        hosts = frozenset(h for h in hosts_of(snap, key) if h in allowed)
        local = list({id(w): w for h in hosts for w in on_host.get(h, ())}.values())
        if kept is not None:
            local = kept[1].among(local)
        bound = bounds.bound(snap.fabric, free, hosts, local, gang, now_s) if local else None
        if bound is not None:
            scored.append((bound, n, key, hosts, local))
    return scored


def _cheapest(
    snap: snapshot.Snapshot, free: Mapping[ids.NodeName, int],
    scored: Sequence[tuple[Cost, int, DomainKey, frozenset[ids.NodeName], list[RunningWorkload]]],
    gang: request.GangRequest, now_s: float, options: request.PlacementOptions, exhaustive: bool,
) -> tuple[Cost | None, list[Found], list[tuple[Found, int]]]:
    """Criteria 1-4 first: (the lowest cost, the domains searched at it with their victims, the
    domains not searched whose bound equals it, with their candidates and least GPUs to free).

    Each domain is searched in the order of a lower bound of its cost (an engine call each),
    and the scan stops at the first whose bound exceeds the cheapest found: it and every later
    one cost more. One whose bound equals it can tie at best: it is searched only if the
    tie-break reaches it (start times in one second tie hundreds of leaves)."""
    cheapest: list[Found] = []
    deferred: list[tuple[Found, int]] = []
    lowest: Cost | None = None
    for bound, _, key, hosts, local in scored:
        if not exhaustive and lowest is not None:
            if bound > lowest:
                break
            if bound == lowest:
                deferred.append(((key, hosts, local), bound[1]))
                continue
        found = _in_domain(snap, free, hosts, local, gang, now_s, options)
        if found is None:
            continue
        cost = _cost(found, now_s)
        if lowest is None or cost < lowest:
            lowest, cheapest = cost, []
        if cost == lowest:
            cheapest.append((key, hosts, found))
    return lowest, cheapest, deferred


def _tie_broken(
    snap: snapshot.Snapshot, free: Mapping[ids.NodeName, int], lowest: Cost | None, cheapest: list[Found],
    deferred: Sequence[tuple[Found, int]], gang: request.GangRequest, now_s: float,
    traffic: capacity.Traffic | None, options: request.PlacementOptions, exhaustive: bool,
) -> Choice | None:
    """(5) among the domains tied on criteria 1-4: the plan's path and comm_slowdown, then room
    left and name. Room and name need no plan: taken in that order, the first plan on a healthy
    path at the model's floor (comm_slowdown is never below 1) cannot be beaten, and the rest
    need no plan. A deferred domain enters that order at a lower bound of its room left, and is
    searched when it comes first."""
    fab, need = snap.fabric, gang.pods * gang.gpus_per_pod
    queue = [(_room_left(fab, free, hosts, found, need), key[1], False, i)
             for i, (key, hosts, found) in enumerate(cheapest)]
    queue += [(_least_room_left(fab, free, hosts, least, need), key[1], True, i)
              for i, ((key, hosts, _), least) in enumerate(deferred)]
    heapq.heapify(queue)
    best: tuple[tuple[object, ...], Choice] | None = None
    while queue:
        room_left, name, pending, i = heapq.heappop(queue)
        if pending:
            key, hosts, local = deferred[i][0]
            found = _in_domain(snap, free, hosts, local, gang, now_s, options)
            if found is not None and _cost(found, now_s) == lowest:
                cheapest.append((key, hosts, found))
                exact = _room_left(fab, free, hosts, found, need)
                heapq.heappush(queue, (exact, name, False, len(cheapest) - 1))
            continue
        key, hosts, found = cheapest[i]
        chosen, plan = _final(snap, free, hosts, found, gang, traffic, options)
        rank = (plan.degraded_path, round(plan.comm_slowdown, 9), room_left, name)
        if best is None or rank < best[0]:
            best = (rank, Choice(key, chosen, plan, sum(w.gpus for w in chosen),
                                 sum(w.progress(now_s) for w in chosen)))
        if not exhaustive and best[0][:2] <= (False, SLOWDOWN_FLOOR):
            break
    return None if best is None else best[1]


def _room_left(
    fab: fabric.Fabric, free: Mapping[ids.NodeName, int], hosts: Collection[ids.NodeName],
    found: Iterable[RunningWorkload], need: int,
) -> int:
    """GPUs the domain keeps free once ``found`` are evicted and the gang placed."""
    return sum(_freed_in(fab, free, hosts, found).values()) - need


def _least_room_left(
    fab: fabric.Fabric, free: Mapping[ids.NodeName, int], hosts: Collection[ids.NodeName], least: int,
    need: int,
) -> int:
    """A lower bound of ``_room_left`` for any victim set that lets the gang fit: the domain's
    free GPUs (no host above its GPUs, as ``_freed_in`` caps them), plus the fewest GPUs the
    gang's slots need freed there (``bounds.least_gpus``; 0 says nothing)."""
    now = 0
    for h in hosts:
        host, f = fab.hosts.get(h), free.get(h, 0)
        now += f if host is None else min(f, host.gpus)
    return now + least - need


def _cost(chosen: Sequence[RunningWorkload], now_s: float) -> Cost:
    """Criteria 1-4 of a victim set."""
    return (max(w.priority for w in chosen), sum(w.gpus for w in chosen), len(chosen),
            round(sum(w.progress(now_s) for w in chosen), 6))


def _freed_in(
    fab: fabric.Fabric, free: Mapping[ids.NodeName, int], hosts: Collection[ids.NodeName],
    gone: Iterable[RunningWorkload],
) -> dict[ids.NodeName, int]:
    """``_freed`` on ``hosts`` alone (the domain's), without copying the fabric's free map."""
    out = {h: free.get(h, 0) for h in hosts}
    for w in gone:
        for host, gpus in w.pods:
            if host in out and host in fab.hosts:
                out[host] = min(fab.hosts[host].gpus, out[host] + gpus)
    return out


def _freed(
    fab: fabric.Fabric, free: Mapping[ids.NodeName, int], gone: Iterable[RunningWorkload]
) -> dict[ids.NodeName, int]:
    """Free GPUs once ``gone`` are evicted; never above a host's GPUs (a caller's stale count
    must not make room that is not there)."""
    out = dict(free)
    for w in gone:
        for host, gpus in w.pods:
            if host in fab.hosts:
                out[host] = min(fab.hosts[host].gpus, out.get(host, 0) + gpus)
    return out


def _fits(
    snap: snapshot.Snapshot, free: Mapping[ids.NodeName, int], hosts: Collection[ids.NodeName],
    gone: Iterable[RunningWorkload], gang: request.GangRequest, options: request.PlacementOptions,
) -> bool:
    freed = _freed(snap.fabric, free, gone)
    return isinstance(placing.place(snap, freed, gang, None, options, hosts), request.Plan)


def _in_domain(
    snap: snapshot.Snapshot, free: Mapping[ids.NodeName, int], hosts: Collection[ids.NodeName],
    local: Sequence[RunningWorkload], gang: request.GangRequest, now_s: float,
    options: request.PlacementOptions,
) -> list[RunningWorkload] | None:
    """Steps 2 and 3 of the overview in one domain: the lowest priority level that fits, reprieved."""
    levels = sorted({w.priority for w in local})
    for level in levels:
        taken = [w for w in local if w.priority <= level]
        if not _fits(snap, free, hosts, taken, gang, options):
            continue
        best: list[RunningWorkload] | None = None
        for largest_first in (True, False):
            sign = -1 if largest_first else 1
            order = sorted(taken, key=lambda w: (-w.priority, sign * w.gpus, sign * w.progress(now_s), w.key))
            evicted = _reprieve(snap, free, hosts, order, gang, options)
            if best is None or _cost(evicted, now_s) < _cost(best, now_s):
                best = evicted
        return best
    return None


def _reprieve(
    snap: snapshot.Snapshot, free: Mapping[ids.NodeName, int], hosts: Collection[ids.NodeName],
    order: Sequence[RunningWorkload], gang: request.GangRequest, options: request.PlacementOptions,
) -> list[RunningWorkload]:
    """Keep back each victim, in ``order``, whose eviction the gang does not need."""
    evicted = list(order)
    for w in order:
        rest = [v for v in evicted if v is not w]
        if rest and _fits(snap, free, hosts, rest, gang, options):
            evicted = rest
    return evicted


def _final(
    snap: snapshot.Snapshot, free: Mapping[ids.NodeName, int], hosts: Collection[ids.NodeName],
    chosen: Sequence[RunningWorkload], gang: request.GangRequest, traffic: capacity.Traffic | None,
    options: request.PlacementOptions,
) -> tuple[tuple[RunningWorkload, ...], request.Plan]:
    """The victims lowest priority first, and the plan priced on the traffic without them."""
    fab = snap.fabric
    after = traffic.copy() if traffic is not None else None
    if after is not None:
        for w in chosen:
            ranks = [h for h, _ in w.pods if h in fab.hosts]
            if w.gang and len(ranks) > 1:
                after.remove(fab, ranks, max(1, w.pods[0][1]), w.pattern)
    plan = placing.place(snap, _freed(fab, free, chosen), gang, after, options, hosts)
    if not isinstance(plan, request.Plan):  # _in_domain tested this very fit
        raise AssertionError(f"victim set stopped fitting: {plan}")
    ordered = tuple(sorted(chosen, key=lambda w: (w.priority, w.gpus, w.key)))
    return ordered, plan


"""Lower bounds of the cost of a domain's victim set (``victims``' criteria 1-4), without the
engine: the search takes the domains in the order of their bounds, and stops at the first
whose bound is above the cheapest set found. ``Bounds`` keeps each domain's bound from one
search to the next."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from fabricsched import ids
from fabricsched.placement import request, snapshot, workloads
from fabricsched.placement.workloads import Admits, RunningWorkload
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey
Cost = tuple[int, int, int, float]
"""Criteria 1-4 of a victim set (``victims``), or a lower bound of them (``bound``)."""


def bound(
    fab: fabric.Fabric, free: Mapping[ids.NodeName, int], hosts: Collection[ids.NodeName],
    local: Sequence[RunningWorkload], gang: request.GangRequest, now_s: float,
) -> Cost | None:
    """A lower bound of the cost (criteria 1-4) of the domain's victim set; None when its pod
    slots stay too few even with every candidate gone (no set exists). ``DomainBound``."""
    return DomainBound.of(fab, free, frozenset(hosts), list(local), gang).cost(now_s)


@dataclass(frozen=True)
class DomainBound:
    """A domain's hosts, candidates and the lower bound of its victim set's cost, less the
    progress term (the one that moves with the clock):

    1. The lowest priority level whose candidates, all gone, leave slots enough (the set's
       highest priority is the level that fits, never lower: each set holds one of its level).
    2. The fewest GPUs that free the slots missing, whoever held them (each host's first slot
       costs what it lacks of one pod's GPUs, each next one a pod's GPUs).
    3. One workload. 4. The least progress of a candidate at the level of 1 (when the set is
       one workload, it is one of them; when it is more, 3 is already below).
    """

    hosts: frozenset[ids.NodeName]
    local: list[RunningWorkload]
    level: int | None
    """None: no set exists."""
    least_gpus: int
    least_progress: tuple[RunningWorkload, ...]
    """The candidates at ``level`` one of which has the least progress at any time."""

    @classmethod
    def of(
        cls, fab: fabric.Fabric, free: Mapping[ids.NodeName, int], hosts: frozenset[ids.NodeName],
        local: list[RunningWorkload], gang: request.GangRequest,
    ) -> DomainBound:
        by_level: dict[int, list[RunningWorkload]] = {}
        for w in local:
            at = by_level.get(w.priority)
            if at is None:
                by_level[w.priority] = [w]
            else:
                at.append(w)
        # Pod slots with every candidate up to each level gone, counted as they go (``_freed_in``'s
        # caps: no host above its GPUs); a necessary condition for a set at that level.
        g = gang.gpus_per_pod
        slots = sum(free.get(h, 0) // g for h in hosts)
        freed: dict[ids.NodeName, int] = {}
        for level in sorted(by_level):
            for w in by_level[level]:
                for host, gpus in w.pods:
                    if host in hosts and host in fab.hosts:
                        before = freed.get(host)
                        if before is None:
                            before = free.get(host, 0)
                        after = freed[host] = min(fab.hosts[host].gpus, before + gpus)
                        slots += after // g - before // g
            if slots >= gang.pods:
                return cls(hosts, local, level, least_gpus(fab, free, hosts, gang),
                           _least_progress(by_level[level]))
        return cls(hosts, local, None, 0, ())

    def cost(self, now_s: float) -> Cost | None:
        if self.level is None:
            return None
        return self.level, self.least_gpus, 1, min(round(w.progress(now_s), 6) for w in self.least_progress)


def _least_progress(workloads: Sequence[RunningWorkload]) -> tuple[RunningWorkload, ...]:
    """Those of ``workloads`` no other of which has as few GPUs and started as late: the least
    progress at any time is one of theirs (a few, one per GPU count at most)."""
    for w in workloads:
        if w.started_s is None:
            return (w,)  # no progress at all
    out: list[RunningWorkload] = []
    latest = -math.inf
    for w in sorted(workloads, key=lambda w: (w.gpus, -(w.started_s or 0.0))):
        if w.started_s is not None and w.started_s > latest:
            out.append(w)
            latest = w.started_s
    return tuple(out)


class Bounds:
    """Each domain's ``DomainBound`` kept from one search to the next, made again only for a
    domain whose candidates (the kept list, by identity), free GPUs, admitted pool or gang
    shape changed: after a decision most of a fabric's hundreds of leaves did not. One entry
    per domain of the fabric, all forgotten when the fabric changes."""

    def __init__(self) -> None:
        self._fabric: fabric.Fabric | None = None
        self._kept: dict[tuple[int, DomainKey], tuple[Sequence[RunningWorkload], tuple[object, ...],
                                                      DomainBound]] = {}

    def of(
        self, snap: snapshot.Snapshot, free: Mapping[ids.NodeName, int], tier: int, key: DomainKey,
        found: Sequence[RunningWorkload], admits: Admits | None, gang: request.GangRequest,
    ) -> DomainBound:
        """The bound of domain ``key`` of ``tier`` whose workloads are ``found`` (those
        ``admits`` lets go are its candidates; all of them without it)."""
        fab = snap.fabric
        if fab is not self._fabric:
            self._fabric, self._kept = fab, {}
        below = workloads.hosts_of(snap, key)
        stamp = (admits, gang.pods, gang.gpus_per_pod, tuple(map(free.get, below)))
        kept = self._kept.get((tier, key))
        if kept is not None and kept[0] is found and kept[1] == stamp:
            return kept[2]
        local = list(found) if admits is None else admits.among(found)
        made = DomainBound.of(fab, free, frozenset(below), local, gang)
        self._kept[(tier, key)] = (found, stamp, made)
        return made


def least_gpus(
    fab: fabric.Fabric, free: Mapping[ids.NodeName, int], hosts: Collection[ids.NodeName],
    gang: request.GangRequest,
) -> int:
    """GPUs that must be freed in ``hosts`` for the gang's pod slots (0 when a host's count is
    out of its range, as a stale count can be: the bound then says nothing)."""
    g = gang.gpus_per_pod
    missing, firsts, more = gang.pods, [], 0
    for h in hosts:
        host = fab.hosts.get(h)
        f = free.get(h, 0)
        if host is None or not 0 <= f <= host.gpus:
            return 0
        slots, most = f // g, host.gpus // g
        missing -= slots
        if most > slots:
            firsts.append((slots + 1) * g - f)
            more += most - slots - 1
    if missing <= 0 or missing > len(firsts) + more:
        return 0
    firsts.sort()
    return sum(firsts[:missing]) + g * max(0, missing - len(firsts))

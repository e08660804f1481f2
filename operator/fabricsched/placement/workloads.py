"""The running workloads the victim search picks from, and which of them it may evict: the
indexes it reads them through (by host, by domain) are made here, once per search or kept by
the caller (``victims.KeptIndexes``)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from fabricsched import ids
from fabricsched.placement import capacity, snapshot
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey


@dataclass(frozen=True)
class RunningWorkload:
    """A workload running on the fabric's hosts: a whole gang, or a single pod."""

    key: ids.GangKey
    priority: int
    pods: tuple[tuple[ids.NodeName, int], ...]
    """(host, GPUs) of every pod that holds GPUs on the fabric's hosts."""
    started_s: float | None
    """When its first pod started; None: none has, so it has no progress to lose."""
    gang: bool = True
    """A gang (every pod of it is evicted together) rather than a single pod."""
    protected: bool = False
    """A PodDisruptionBudget covering its pods does not allow evicting all of them now."""
    kueue: bool = False
    """Managed by Kueue (label ``kueue.x-k8s.io/queue-name``)."""
    opted_out: bool = False
    """Its namespace keeps it out of preemption."""
    pattern: capacity.Pattern = capacity.ALL_TO_ALL
    """Its traffic pattern: a ring's demand follows ``pods`` as its rank order."""

    @functools.cached_property
    def gpus(self) -> int:
        return sum(g for _, g in self.pods)

    def progress(self, now_s: float) -> float:
        """GPU-seconds of work since it started: what eviction throws away at worst."""
        return 0.0 if self.started_s is None else self.gpus * max(0.0, now_s - self.started_s)



@dataclass(frozen=True)
class Admits:
    """Which workloads the search may evict: priority below ``below``, not protected by a
    PodDisruptionBudget, not in a namespace that opts out, not Kueue's unless ``evict_kueue``."""

    below: int
    evict_kueue: bool = False

    def among(self, workloads: Iterable[RunningWorkload]) -> list[RunningWorkload]:
        below, evict_kueue = self.below, self.evict_kueue  # inline: 25,000 workloads at 5,000 nodes
        return [w for w in workloads
                if w.priority < below and not (w.protected or w.opted_out or (w.kueue and not evict_kueue))]



OnHost = Mapping[ids.NodeName, Sequence["RunningWorkload"]]
"""``by_host``: host -> the workloads with a pod there."""
OnDomain = Mapping[DomainKey, Sequence["RunningWorkload"]]
"""``by_domain``: a tier's domain -> the workloads with a pod in it."""


def hosts_of(snap: snapshot.Snapshot, key: DomainKey) -> Sequence[ids.NodeName]:
    """The hosts of a domain of ``snap``'s tree (every host for the whole fabric's key)."""
    fab = snap.fabric
    return fab.domains[key].hosts if key in fab.domains else snap.tree.order


def by_domain(
    snap: snapshot.Snapshot, tier: int, on_host: OnHost, keys: Iterable[DomainKey] | None = None,
) -> dict[DomainKey, list[RunningWorkload]]:
    """Domain of ``tier`` (only ``keys`` when given) -> the workloads of ``on_host`` with a pod
    there, each once (none: an empty list)."""
    return {key: list({id(w): w for h in hosts_of(snap, key) for w in on_host.get(h, ())}.values())
            for key in (snap.tree.by_tier[tier] if keys is None else keys)}


def by_host(workloads: Iterable[RunningWorkload]) -> dict[ids.NodeName, list[RunningWorkload]]:
    """Host -> the workloads with a pod there (each once): a domain's candidates are read from
    its hosts, not found by a pass over every workload (the fabric's thousands)."""
    out: dict[ids.NodeName, list[RunningWorkload]] = {}
    for w in workloads:
        pods = w.pods
        if len(pods) == 1:  # most workloads are a lone pod
            host = pods[0][0]
            at = out.get(host)
            if at is None:
                out[host] = [w]
            else:
                at.append(w)
            continue
        for host in dict.fromkeys(h for h, _ in pods):
            out.setdefault(host, []).append(w)
    return out

"""The running workloads indexed for the victim search, kept from one decision to the next
(``placement.victims.KeptIndexes``): which workloads have a pod on each host, and in each domain
of a tier, and each domain's cost bound. At 5,000 nodes the maps are passes over 25,000
workloads; after a few workloads changed they are brought up to date for those alone
(tests/unit/extender/decide/test_running_index.py compares them with the maps made afresh)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Generic, Protocol, TypeVar

from fabricsched import ids
from fabricsched.placement import bounds, preemption, snapshot, workloads
from fabricsched.topology import fabric

K = TypeVar("K")
V = TypeVar("V")
Moves = tuple[workloads.OnHost, workloads.OnHost, frozenset[ids.NodeName]]
"""A host map, the one followed from it, and the hosts whose lists changed between."""
MAX_MOVES = 16


class HasWorkload(Protocol):
    @property
    def workload(self) -> preemption.RunningWorkload: ...


class KeptMaps:
    """``victims.KeptIndexes`` of the running index's last candidates (of every priority)."""

    def __init__(self) -> None:
        self._for: Mapping[ids.GangKey, HasWorkload] | None = None
        """The candidates the host map is for."""
        self._on_host: workloads.OnHost = {}
        self._moves: list[Moves] = []
        """The host maps followed since the last one made afresh, oldest first."""
        self._on_domain: dict[int, tuple[workloads.OnHost, fabric.Fabric, workloads.OnDomain]] = {}
        """Tier -> (the host map and the fabric it is for, its domain map)."""
        self._domain_of: dict[int, tuple[fabric.Fabric, dict[ids.NodeName, fabric.DomainKey]]] = {}
        self._bounds = bounds.Bounds()

    def follow(
        self, candidates: Mapping[ids.GangKey, HasWorkload],
        derived: tuple[Mapping[ids.GangKey, HasWorkload], frozenset[ids.GangKey]] | None,
    ) -> None:
        """The maps brought to ``candidates``; ``derived``: the candidates they were made from
        and the keys made again since (past a quarter of them changed, new maps are as cheap)."""
        if candidates is self._for:
            return
        last = self._for
        if derived is not None and last is not None and derived[0] is last and (
                len(derived[1]) <= len(candidates) // 4 + 64):
            on_host, hosts = _moved_hosts(last, self._on_host, candidates, derived[1])
            self._moves = [*self._moves[-(MAX_MOVES - 1):], (self._on_host, on_host, hosts)]
        else:
            on_host = workloads.by_host(c.workload for c in candidates.values())
            self._moves = []
        self._for, self._on_host = candidates, on_host

    def by_host(self) -> workloads.OnHost:
        return self._on_host

    def by_domain(self, snap: snapshot.Snapshot, tier: int) -> workloads.OnDomain:
        """Domain of ``tier`` -> the workloads with a pod in it: made again only for the domains
        of the hosts whose lists changed since the last call for this tier and fabric."""
        on_host, fab = self._on_host, snap.fabric
        cached = self._on_domain.get(tier)
        if cached is not None and cached[0] is on_host and cached[1] is fab:
            return cached[2]
        moved = self._hosts_moved_since(cached[0]) if cached is not None and cached[1] is fab else None
        if cached is None or moved is None or len(moved) > len(fab.hosts) // 4:
            out: workloads.OnDomain = workloads.by_domain(snap, tier, on_host)
        else:
            domain_of = self._domains(snap, tier)
            again = {domain_of[h] for h in moved if h in domain_of}
            out = {**cached[2], **workloads.by_domain(snap, tier, on_host, again)}
        self._on_domain[tier] = (on_host, fab, out)
        return out

    def bounds(self) -> bounds.Bounds:
        return self._bounds

    def _hosts_moved_since(self, base: workloads.OnHost) -> set[ids.NodeName] | None:
        """The hosts whose lists changed from ``base`` to the current map; None when the moves
        kept do not reach back to it."""
        for i, (before, _, _) in enumerate(self._moves):
            if before is base:
                return set().union(*(hosts for _, _, hosts in self._moves[i:]))
        return None

    def _domains(self, snap: snapshot.Snapshot, tier: int) -> dict[ids.NodeName, fabric.DomainKey]:
        """Host -> its domain of ``tier``, once per fabric."""
        made = self._domain_of.get(tier)
        if made is None or made[0] is not snap.fabric:
            found = {h: key for key in snap.tree.by_tier[tier] for h in workloads.hosts_of(snap, key)}
            made = self._domain_of[tier] = (snap.fabric, found)
        return made[1]


def _moved_hosts(
    last: Mapping[ids.GangKey, HasWorkload], on_host: workloads.OnHost,
    candidates: Mapping[ids.GangKey, HasWorkload], changed: frozenset[ids.GangKey],
) -> tuple[workloads.OnHost, frozenset[ids.NodeName]]:
    """``on_host`` (of ``last``) with the ``changed`` workloads taken out and put in again as
    ``candidates`` has them; a new dict whose changed lists are new (the map handed out before
    stays); and the hosts whose lists changed."""
    lists: CopiedOnWrite[ids.NodeName, preemption.RunningWorkload] = CopiedOnWrite(on_host)
    at = lists.at
    for key in changed:
        before, after = last.get(key), candidates.get(key)
        if before is after:
            continue
        if before is not None:
            for host in dict.fromkeys(h for h, _ in before.workload.pods):
                at(host)[:] = [w for w in at(host) if w is not before.workload]
        if after is not None:
            for host in dict.fromkeys(h for h, _ in after.workload.pods):
                at(host).append(after.workload)
    return lists.done(), frozenset(lists.copied)


class CopiedOnWrite(Generic[K, V]):
    """A new dict of lists over ``last``, each list copied the first time it is changed: what
    was handed out before stays as it was. Lists left empty are dropped at the end."""

    def __init__(self, last: Mapping[K, Sequence[V]]) -> None:
        self.out: dict[K, list[V]] = dict(last)  # type: ignore[arg-type]  # copied before a change
        self.copied: set[K] = set()

    def at(self, key: K) -> list[V]:
        if key not in self.copied:
            self.copied.add(key)
            self.out[key] = list(self.out.get(key, ()))
        return self.out[key]

    def done(self) -> dict[K, list[V]]:
        for key in self.copied:
            if not self.out[key]:
                del self.out[key]
        return self.out

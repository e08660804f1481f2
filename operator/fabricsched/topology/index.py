"""The incremental fabric index of one FabricTopology, and its lazily rebuilt snapshot.

The operator sees one node event at a time on clusters of 10,000 nodes: rebuilding the whole
fabric per event would cost tens of milliseconds. ``FabricIndex`` instead keeps per-tier
membership and parent counts that one node changes in O(tiers), and remembers which hosts and
domains are dirty. ``snapshot()`` rebuilds only those records (bottom-up, so a domain's host
list is its children's lists concatenated, never re-sorted) and returns an immutable
``fabric.Fabric`` that the placement engine runs on (the snapshot pattern, STYLE.md 2).

Conflicts are kept incrementally too: a domain is conflicted while the nodes under it name more
than one parent; every node under a conflicted domain is left out of the snapshot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.topology import conflicts, fabric, health, nodes


@dataclass(frozen=True)
class BuildResult:
    fabric: fabric.Fabric
    """The snapshot, graph included."""
    conflicts: tuple[conflicts.ConflictInfo, ...]
    """What was left out and why: missingTierLabel, then multipleParents."""


@dataclass(frozen=True)
class _Entry:
    gpus: int
    path: tuple[ids.DomainName, ...] | None
    """Domain at every tier, lowest first; None when a tier label is missing."""


def natural_key(name: str) -> tuple[str | int, ...]:
    """Sort ``gpu-2`` before ``gpu-10``: fabric order should read the way admins number racks."""
    return tuple(int(p) if i % 2 else p for i, p in enumerate(re.split(r"(\d+)", name)))


def aggregate(
    records: Mapping[int | None, health.ElementHealth], rails: int
) -> tuple[fabric.HealthState, float]:
    """One element's state and capacity from its whole-element record and its per-rail records.

    A rail carries 1/R of the element's bandwidth, so rail r at capacity c leaves
    (R - 1 + c) / R; a whole-element record caps every rail. A host with one rail down is
    degraded, not down: NCCL routes that GPU's traffic over another rail (PXN), slower.
    """
    whole = records.get(None)
    cap_whole = whole.capacity if whole else 1.0
    rail_records = {r: rec for r, rec in records.items() if r is not None and 0 <= r < rails}
    if rail_records:
        capacity = sum(
            min(cap_whole, rail_records[r].capacity if r in rail_records else 1.0) for r in range(rails)
        ) / rails
    else:
        capacity = cap_whole
    if capacity <= 0.0:
        return fabric.HealthState.DOWN, 0.0
    unhealthy = any(rec.state is not fabric.HealthState.HEALTHY for rec in records.values())
    return (fabric.HealthState.DEGRADED if unhealthy or capacity < 1.0 else fabric.HealthState.HEALTHY,
            capacity)


class FabricIndex:
    """Mutable per-topology state: nodes in, snapshots out. Not thread-safe; one owner."""

    def __init__(self, spec: api.FabricTopologySpec) -> None:
        self.spec = spec
        self.tiers = tuple(
            fabric.Tier(ids.TierName(t.name), t.node_label, t.oversubscription) for t in spec.tiers
        )
        self._tier_of = {t.name: i for i, t in enumerate(spec.tiers)}
        n = len(self.tiers)
        self._entries: dict[ids.NodeName, _Entry] = {}
        self._missing: dict[ids.NodeName, list[tuple[str, str]]] = {}
        self._members: list[dict[ids.DomainName, set[ids.NodeName]]] = [{} for _ in range(n)]
        self._parents: list[dict[ids.DomainName, dict[ids.DomainName, int]]] = [{} for _ in range(n)]
        """Tier t domain -> its parents at tier t+1 -> node count (tiers below the top only)."""
        self._children: list[dict[ids.DomainName, dict[ids.DomainName, int]]] = [{} for _ in range(n)]
        """Tier t domain -> its children at tier t-1 -> node count (tiers above 0 only)."""
        self._conflicted: set[fabric.DomainKey] = set()
        self._node_health: dict[ids.NodeName, dict[int | None, health.ElementHealth]] = {}
        self._domain_health: dict[fabric.DomainKey, dict[int | None, health.ElementHealth]] = {}
        self._applied: dict[health.ElementId, health.ElementHealth] = {}
        """Every record ``set_health`` holds now, by element (what ``apply_health`` diffs against)."""
        # Snapshot cache.
        self._hosts: dict[ids.NodeName, fabric.Host] = {}
        self._domains: dict[fabric.DomainKey, fabric.Domain] = {}
        self._excluded: set[ids.NodeName] = set()
        self._dirty_hosts: set[ids.NodeName] = set()
        self._dirty_domains: set[fabric.DomainKey] = set()
        self._snapshot: BuildResult | None = None
        self._structure_id: object = object()
        """Renewed when hosts or domains change (not health): ``fabric.Fabric.structure_id``."""

    # -- node membership ------------------------------------------------------------------

    def set_node(self, node: nodes.NodeInfo, gpus: int | None = None) -> bool:
        """Add or update a node this topology selects, with ``gpus`` GPUs (default: its
        allocatable ``spec.gpuResource``); True when the fabric changed."""
        gpus = node.gpus(self.spec.gpu_resource) if gpus is None else gpus
        if gpus <= 0:
            return self.remove_node(node.name)
        values = [node.labels.get(t.node_label, "") for t in self.tiers]
        missing = [(str(t.name), t.node_label) for t, v in zip(self.tiers, values, strict=True) if not v]
        path = None if missing else tuple(ids.DomainName(v) for v in values)
        entry = _Entry(gpus, path)
        old = self._entries.get(node.name)
        if old == entry:
            return False
        if old is not None:
            self._unlink(node.name, old)
        self._entries[node.name] = entry
        if missing:
            self._missing[node.name] = missing
        else:
            self._missing.pop(node.name, None)
        self._link(node.name, entry)
        self._snapshot = None
        return True

    def remove_node(self, name: ids.NodeName) -> bool:
        old = self._entries.pop(name, None)
        if old is None:
            return False
        self._missing.pop(name, None)
        self._unlink(name, old)
        self._snapshot = None
        return True

    def node_names(self) -> Iterable[ids.NodeName]:
        return self._entries.keys()

    def _link(self, name: ids.NodeName, entry: _Entry) -> None:
        self._structure_id = object()
        self._dirty_hosts.add(name)
        if entry.path is None:
            return
        path = entry.path
        for t, domain in enumerate(path):
            self._members[t].setdefault(domain, set()).add(name)
            self._dirty_domains.add((t, domain))
            if t + 1 < len(path):
                self._count(self._parents[t], domain, path[t + 1], +1)
                self._count(self._children[t + 1], path[t + 1], domain, +1)
                self._recheck(t, domain)

    def _unlink(self, name: ids.NodeName, entry: _Entry) -> None:
        self._structure_id = object()
        self._dirty_hosts.add(name)
        if entry.path is None:
            return
        path = entry.path
        for t, domain in enumerate(path):
            members = self._members[t][domain]
            members.discard(name)
            if not members:
                del self._members[t][domain]
            self._dirty_domains.add((t, domain))
            if t + 1 < len(path):
                self._count(self._parents[t], domain, path[t + 1], -1)
                self._count(self._children[t + 1], path[t + 1], domain, -1)
                self._recheck(t, domain)

    @staticmethod
    def _count(table: dict[ids.DomainName, dict[ids.DomainName, int]], key: ids.DomainName,
               other: ids.DomainName, delta: int) -> None:
        counts = table.setdefault(key, {})
        value = counts.get(other, 0) + delta
        if value:
            counts[other] = value
        else:
            counts.pop(other, None)
            if not counts:
                del table[key]

    def _recheck(self, tier: int, domain: ids.DomainName) -> None:
        if len(self._parents[tier].get(domain, ())) > 1:
            self._conflicted.add((tier, domain))
        else:
            self._conflicted.discard((tier, domain))

    # -- health ---------------------------------------------------------------------------

    def apply_health(self, effective: Mapping[health.ElementId, health.ElementHealth]) -> bool:
        """Make the index carry exactly ``effective`` (a tracker's view: every element not in it
        is healthy); True when some element changed, so the next snapshot is a new fabric."""
        changed = False
        for element in effective.keys() | self._applied.keys():
            record = effective.get(element)
            if self._applied.get(element) != record:
                self.set_health(element, record)
                changed = True
        return changed

    def set_health(self, element: health.ElementId, record: health.ElementHealth | None) -> None:
        """The effective health of one element (None = healthy); unknown domains are kept for later."""
        if record is None:
            self._applied.pop(element, None)
        else:
            self._applied[element] = record
        if element.kind == "node":
            table = self._node_health.setdefault(ids.NodeName(element.name), {})
            self._put(table, element.rail, record)
            if not table:
                del self._node_health[ids.NodeName(element.name)]
            self._dirty_hosts.add(ids.NodeName(element.name))
        else:
            tier = self._tier_of.get(element.tier or "")
            if tier is None:
                return
            key = (tier, ids.DomainName(element.name))
            dtable = self._domain_health.setdefault(key, {})
            self._put(dtable, element.rail, record)
            if not dtable:
                del self._domain_health[key]
            self._dirty_domains.add(key)
        self._snapshot = None

    @staticmethod
    def _put(table: dict[int | None, health.ElementHealth], rail: int | None,
             record: health.ElementHealth | None) -> None:
        if record is None:
            table.pop(rail, None)
        else:
            table[rail] = record

    # -- snapshot -------------------------------------------------------------------------

    def conflicts(self) -> tuple[conflicts.ConflictInfo, ...]:
        found = [conflicts.missing_tier_label(n, m) for n, m in self._missing.items()]
        found.sort(key=lambda c: natural_key(c.node or ""))
        for tier, domain in sorted(self._conflicted, key=lambda k: (k[0], natural_key(k[1]))):
            found.append(conflicts.multiple_parents(
                self.tiers[tier].name, domain, self.tiers[tier + 1].name,
                {str(p): c for p, c in self._parents[tier][domain].items()}))
        return tuple(found)

    def snapshot(self) -> BuildResult:
        """The immutable fabric as of now; cheap when nothing changed since the last call."""
        if self._snapshot is not None:
            return self._snapshot
        self._update_exclusions()
        for name in self._dirty_hosts:
            self._rebuild_host(name)
        self._dirty_hosts.clear()
        for key in sorted(self._dirty_domains, key=lambda k: k[0]):
            self._rebuild_domain(key)
        self._dirty_domains.clear()
        built = fabric.Fabric(
            tiers=self.tiers,
            hosts=dict(self._hosts),
            domains=dict(self._domains),
            gpu_bandwidth_gbps=self.spec.gpu_bandwidth_gbps,
            rails=self.spec.rails,
            traffic=self.spec.traffic or api.TrafficPattern.ALL_TO_ALL,
            structure_id=self._structure_id,
        )
        self._snapshot = BuildResult(built, self.conflicts())
        return self._snapshot

    def _update_exclusions(self) -> None:
        excluded: set[ids.NodeName] = set()
        for tier, domain in self._conflicted:
            excluded.update(self._members[tier].get(domain, ()))
        if excluded != self._excluded:
            self._structure_id = object()
        for name in excluded ^ self._excluded:
            self._dirty_hosts.add(name)
            entry = self._entries.get(name)
            if entry is not None and entry.path is not None:
                self._dirty_domains.update(enumerate(entry.path))
        self._excluded = excluded

    def _rebuild_host(self, name: ids.NodeName) -> None:
        entry = self._entries.get(name)
        if entry is None or entry.path is None or name in self._excluded:
            self._hosts.pop(name, None)
            return
        state, capacity = aggregate(self._node_health.get(name, {}), self.spec.rails)
        self._hosts[name] = fabric.Host(name, entry.gpus, entry.path, capacity, state)

    def _rebuild_domain(self, key: fabric.DomainKey) -> None:
        tier, name = key
        if key in self._conflicted:
            self._domains.pop(key, None)
            return
        if tier == 0:
            hosts = sorted((h for h in self._members[0].get(name, ()) if h in self._hosts), key=natural_key)
            children: list[ids.DomainName] = []
            gpus = sum(self._hosts[h].gpus for h in hosts)
        else:
            below = self._children[tier].get(name, ())
            children = sorted((c for c in below if (tier - 1, c) in self._domains), key=natural_key)
            hosts = [h for c in children for h in self._domains[(tier - 1, c)].hosts]
            gpus = sum(self._domains[(tier - 1, c)].gpus for c in children)
        if not hosts:
            self._domains.pop(key, None)
            return
        parents = self._parents[tier].get(name)
        parent = next(iter(parents)) if parents else None
        state, capacity = aggregate(self._domain_health.get(key, {}), self.spec.rails)
        self._domains[key] = fabric.Domain(tier, name, parent, tuple(hosts), tuple(children), gpus,
                                           capacity, state)

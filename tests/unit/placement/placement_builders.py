"""Builders for the placement engine's tests: a fluent builder of ``fabric.Fabric`` objects.

    FabricBuilder(tiers=[("leaf", 2.0), ("spine", 1.0)]).spine("s1").leaf("l1", hosts=4, gpus=8)

builds the records directly (no nodes, no CRD), so engine tests depend on the snapshot only.
Hosts are named ``<leaf>-h<i>``. A module with its own name rather than ``conftest``: with a
conftest in every test folder, ``from conftest import`` finds whichever was loaded last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fabricsched import ids
from fabricsched.placement import request
from fabricsched.topology import fabric


@dataclass
class _HostSpec:
    gpus: int
    path: list[str]
    health: float = 1.0
    state: fabric.HealthState = fabric.HealthState.HEALTHY


@dataclass
class _DomainHealth:
    health: float = 1.0
    state: fabric.HealthState = fabric.HealthState.HEALTHY


@dataclass
class FabricBuilder:
    tiers: Sequence[tuple[str, float]] = (("leaf", 2.0), ("spine", 1.0))
    gpu_bandwidth_gbps: float = 400.0
    _hosts: dict[str, _HostSpec] = field(default_factory=dict)
    _parents: dict[tuple[int, str], str | None] = field(default_factory=dict)
    _current: dict[int, str] = field(default_factory=dict)
    _health: dict[tuple[int, str], _DomainHealth] = field(default_factory=dict)

    def _tier(self, name: str) -> int:
        return [t for t, _ in self.tiers].index(name)

    def _parent_of(self, tier: int) -> str | None:
        if tier + 1 >= len(self.tiers):
            return None
        if tier + 1 not in self._current:
            self.at(self.tiers[tier + 1][0], f"{self.tiers[tier + 1][0]}0")
        return self._current[tier + 1]

    def at(self, tier_name: str, name: str) -> FabricBuilder:
        """Enter (creating it if needed) domain ``name`` of an upper tier; later domains go below it."""
        tier = self._tier(tier_name)
        key = (tier, name)
        if key not in self._parents:
            self._parents[key] = self._parent_of(tier)
        self._current[tier] = name
        for lower in [t for t in self._current if t < tier]:
            del self._current[lower]
        return self

    def spine(self, name: str) -> FabricBuilder:
        return self.at("spine", name)

    def core(self, name: str) -> FabricBuilder:
        return self.at("core", name)

    def leaf(self, name: str, hosts: int = 4, gpus: int = 8) -> FabricBuilder:
        """A lowest-tier domain with ``hosts`` hosts of ``gpus`` GPUs, under the current parents."""
        self._parents[(0, name)] = self._parent_of(0)
        self._current[0] = name
        for i in range(hosts):
            self.host(f"{name}-h{i}", gpus)
        return self

    def host(self, name: str, gpus: int = 8) -> FabricBuilder:
        """One more host in the current leaf (or in the whole fabric when there are no tiers)."""
        path = [self._current[0]] if self.tiers else []
        for tier in range(1, len(self.tiers)):
            parent = self._parents[(tier - 1, path[-1])]
            assert parent is not None
            path.append(parent)
        self._hosts[name] = _HostSpec(gpus, path)
        return self

    def degrade_host(self, name: str, health: float = 0.5) -> FabricBuilder:
        spec = self._hosts[name]
        spec.health, spec.state = health, fabric.HealthState.DEGRADED
        return self

    def down_host(self, name: str) -> FabricBuilder:
        spec = self._hosts[name]
        spec.health, spec.state = 0.0, fabric.HealthState.DOWN
        return self

    def degrade(self, tier_name: str, name: str, health: float = 0.5) -> FabricBuilder:
        self._health[(self._tier(tier_name), name)] = _DomainHealth(health, fabric.HealthState.DEGRADED)
        return self

    def down(self, tier_name: str, name: str) -> FabricBuilder:
        self._health[(self._tier(tier_name), name)] = _DomainHealth(0.0, fabric.HealthState.DOWN)
        return self

    def build(self) -> fabric.Fabric:
        tiers = tuple(fabric.Tier(ids.TierName(n), f"example.com/{n}", o) for n, o in self.tiers)
        hosts = {
            ids.NodeName(n): fabric.Host(ids.NodeName(n), s.gpus, tuple(ids.DomainName(p) for p in s.path),
                                         s.health, s.state)
            for n, s in self._hosts.items()
        }
        ordered = sorted(hosts.values(), key=lambda h: (tuple(reversed(h.path)), h.name))
        domains: dict[fabric.DomainKey, fabric.Domain] = {}
        for (tier, name), parent in self._parents.items():
            below = tuple(h.name for h in ordered if h.path[tier] == name)
            children = tuple(sorted(ids.DomainName(n) for (t, n), p in self._parents.items()
                                    if t == tier - 1 and p == name))
            health = self._health.get((tier, name), _DomainHealth())
            domains[(tier, ids.DomainName(name))] = fabric.Domain(
                tier, ids.DomainName(name), None if parent is None else ids.DomainName(parent), below,
                children, sum(hosts[h].gpus for h in below), health.health, health.state)
        return fabric.Fabric(tiers, hosts, domains, self.gpu_bandwidth_gbps)


def all_free(fab: fabric.Fabric, used: Mapping[str, int] | None = None) -> dict[ids.NodeName, int]:
    """Every GPU free, minus ``used`` GPUs per host."""
    used = used or {}
    return {n: h.gpus - used.get(n, 0) for n, h in fab.hosts.items()}


def gang(pods: int, gpus: int = 8, tier: int | None = None, required: bool = False) -> request.GangRequest:
    return request.GangRequest(ids.GangKey(f"g{pods}x{gpus}"), pods, gpus, tier, required)


def per_host(ranks: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in ranks:
        counts[r] = counts.get(r, 0) + 1
    return counts

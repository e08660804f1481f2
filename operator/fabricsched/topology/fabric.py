"""The fabric snapshot: hosts, switch domains per tier, and their health.

A ``Fabric`` is immutable and built once per change that matters (see ``building``);
free GPUs, reservations and running traffic are per-decision state kept apart from it
(``placement``), so the same snapshot serves many decisions.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from fabricsched import ids
from fabricsched.api import topology as api

HealthState = api.LinkState
"""State of one fabric element: the API's own enum (spec.links, status), one type end to end."""

_SEVERITY = {HealthState.HEALTHY: 0, HealthState.DEGRADED: 1, HealthState.DOWN: 2}


def severity(state: HealthState) -> int:
    """0 healthy, 1 degraded, 2 down: states ordered from best to worst."""
    return _SEVERITY[state]

DomainKey = tuple[int, ids.DomainName]
"""(tier index, domain name): domain names are unique within a tier, not across tiers."""


@dataclass(frozen=True)
class Tier:
    name: ids.TierName
    node_label: str
    oversubscription: float = 1.0
    """Downlink over uplink bandwidth of every domain of this tier (2.0 = 2:1)."""


@dataclass(frozen=True)
class Host:
    name: ids.NodeName
    gpus: int
    """Allocatable GPUs of the host (never 0: GPU-less nodes are not part of a fabric)."""
    path: tuple[ids.DomainName, ...]
    """The host's domain at every tier, lowest tier first."""
    health: float = 1.0
    """Capacity fraction of the host's fabric access links: 1 healthy, 0 down."""
    state: HealthState = HealthState.HEALTHY

    @property
    def down(self) -> bool:
        """The host's fabric access links carry nothing."""
        return self.health <= 0 or self.state is HealthState.DOWN

    @property
    def degraded(self) -> bool:
        """Degraded or down: anything but a fully healthy access link."""
        return self.health < 1 or self.state is not HealthState.HEALTHY


@dataclass(frozen=True)
class Domain:
    tier: int
    """Index into ``Fabric.tiers`` (0 = lowest, e.g. leaf)."""
    name: ids.DomainName
    parent: ids.DomainName | None
    """The domain one tier up, or None at the top tier."""
    hosts: tuple[ids.NodeName, ...]
    """Every host below this domain, in fabric order (sorted by path, then name)."""
    children: tuple[ids.DomainName, ...]
    """Domains one tier down (empty at tier 0, whose children are ``hosts``)."""
    gpus: int
    """Total allocatable GPUs below the domain."""
    uplink_health: float = 1.0
    """Capacity fraction of the domain's uplinks: 1 healthy, 0 down."""
    state: HealthState = HealthState.HEALTHY

    @property
    def key(self) -> DomainKey:
        return (self.tier, self.name)

    @property
    def down(self) -> bool:
        """The domain's uplinks carry nothing (traffic that leaves it cannot flow)."""
        return self.uplink_health <= 0 or self.state is HealthState.DOWN

    @property
    def degraded(self) -> bool:
        """Degraded or down uplinks."""
        return self.uplink_health < 1 or self.state is not HealthState.HEALTHY


@dataclass(frozen=True)
class Fabric:
    """One FabricTopology's hosts and domains, with health merged from every source."""

    tiers: tuple[Tier, ...]
    hosts: Mapping[ids.NodeName, Host]
    domains: Mapping[DomainKey, Domain]
    gpu_bandwidth_gbps: float = 400.0
    rails: int = 1
    traffic: api.TrafficPattern = api.TrafficPattern.ALL_TO_ALL
    """The pattern a gang that names none is priced with (``spec.traffic``)."""
    structure_id: object = field(default_factory=object, compare=False, repr=False)
    """Shared by the snapshots of one structure (hosts, GPUs, paths, domains) that differ in
    health only: ``index.FabricIndex`` keeps it across health changes, so the engine's tree
    (``placement.snapshot``) is reused. A fabric built any other way has its own."""

    def domain_of(self, host: ids.NodeName, tier: int) -> Domain:
        return self.domains[(tier, self.hosts[host].path[tier])]

    def home_of(self, hosts: Iterable[ids.NodeName]) -> DomainKey | None:
        """The lowest domain holding every host in ``hosts`` (None: they span the top tier)."""
        paths = [self.hosts[h].path for h in hosts]
        for tier in range(len(self.tiers)):
            names = {path[tier] for path in paths}
            if len(names) == 1:
                return (tier, next(iter(names)))
        return None

    def tier_domains(self, tier: int) -> Iterator[Domain]:
        return (d for d in self.domains.values() if d.tier == tier)

    def empty_slots(self, gpus_per_pod: int, hosts: Iterable[ids.NodeName] | None = None) -> int:
        """Pods of ``gpus_per_pod`` GPUs that ``hosts`` (default: every host) hold when empty."""
        names = self.hosts if hosts is None else hosts
        return sum(self.hosts[h].gpus // gpus_per_pod for h in names)

    def largest_domain(self, tier: int, gpus_per_pod: int) -> tuple[DomainKey | None, int]:
        """The domain of ``tier`` holding the most such pods when empty (the first by name on a
        tie), and how many; ``(None, 0)`` when the tier has no domain."""
        best: tuple[DomainKey | None, int] = (None, 0)
        for key in sorted(k for k in self.domains if k[0] == tier):
            held = self.empty_slots(gpus_per_pod, self.domains[key].hosts)
            if best[0] is None or held > best[1]:
                best = (key, held)
        return best

    def tier_index(self, name: str) -> int:
        for i, tier in enumerate(self.tiers):
            if tier.name == name:
                return i
        raise KeyError(f"no tier named {name!r} (tiers: {', '.join(t.name for t in self.tiers)})")

    def uplink_capacity_gbps(self, key: DomainKey) -> float:
        """C_d = downlink / oversubscription x uplink health (docs/design.md, capacity model)."""
        domain = self.domains[key]
        downlink = domain.gpus * self.gpu_bandwidth_gbps
        return downlink / self.tiers[domain.tier].oversubscription * domain.uplink_health

    @functools.cached_property
    def degraded_hosts(self) -> tuple[ids.NodeName, ...]:
        """Hosts whose access link is degraded or down, by name (computed once per snapshot)."""
        return tuple(sorted(n for n, h in self.hosts.items() if h.degraded))

    @functools.cached_property
    def degraded_domains(self) -> tuple[DomainKey, ...]:
        """Domains whose uplinks are degraded or down, by key (computed once per snapshot)."""
        return tuple(sorted(k for k, d in self.domains.items() if d.degraded))

    @property
    def unhealthy(self) -> bool:
        """Some element is degraded or down."""
        return bool(self.degraded_hosts or self.degraded_domains)

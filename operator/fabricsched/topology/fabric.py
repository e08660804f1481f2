"""The fabric snapshot: hosts, switch domains per tier, and their health.

A ``Fabric`` is immutable and built once per change that matters (see ``building``);
free GPUs, reservations and running traffic are per-decision state kept apart from it
(``placement``), so the same snapshot serves many decisions.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import networkx as nx

from fabricsched import ids


class HealthState(enum.StrEnum):
    """State of one fabric element, ordered from best to worst."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DOWN = "down"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


_SEVERITY = {HealthState.HEALTHY: 0, HealthState.DEGRADED: 1, HealthState.DOWN: 2}

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


@dataclass(frozen=True)
class Fabric:
    """One FabricTopology's hosts and domains, with health merged from every source."""

    tiers: tuple[Tier, ...]
    hosts: Mapping[ids.NodeName, Host]
    domains: Mapping[DomainKey, Domain]
    gpu_bandwidth_gbps: float = 400.0
    rails: int = 1

    def domain_of(self, host: ids.NodeName, tier: int) -> Domain:
        return self.domains[(tier, self.hosts[host].path[tier])]

    def tier_domains(self, tier: int) -> Iterator[Domain]:
        return (d for d in self.domains.values() if d.tier == tier)

    def tier_index(self, name: str) -> int:
        for i, tier in enumerate(self.tiers):
            if tier.name == name:
                return i
        raise KeyError(f"no tier named {name!r} (tiers: {', '.join(t.name for t in self.tiers)})")

    def uplink_capacity_gbps(self, key: DomainKey) -> float:
        """C_d = downlink / oversubscription x uplink health (DESIGN.md, capacity model)."""
        domain = self.domains[key]
        downlink = domain.gpus * self.gpu_bandwidth_gbps
        return downlink / self.tiers[domain.tier].oversubscription * domain.uplink_health

    def with_graph(self) -> Fabric:
        """Kept for callers that want the graph built eagerly; returns the same snapshot."""
        _ = self.graph
        return self

    @functools.cached_property
    def graph(self) -> nx.DiGraph:
        """Root -> top-tier domains -> ... -> leaves -> hosts, built on first use (the engine
        works on the mappings; the graph serves inspection and tools). Node ids are
        ``("host", name)``, ``("domain", tier, name)`` and ``("root",)``, each with its record."""
        graph = nx.DiGraph()
        root = ("root",)
        graph.add_node(root)
        for domain in self.domains.values():
            graph.add_node(("domain", domain.tier, domain.name), record=domain)
        for domain in self.domains.values():
            parent = root if domain.parent is None else ("domain", domain.tier + 1, domain.parent)
            graph.add_edge(parent, ("domain", domain.tier, domain.name))
        for host in self.hosts.values():
            graph.add_node(("host", host.name), record=host)
            if self.tiers:
                graph.add_edge(("domain", 0, host.path[0]), ("host", host.name))
            else:
                graph.add_edge(root, ("host", host.name))
        return graph

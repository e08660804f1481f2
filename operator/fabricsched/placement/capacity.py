"""The capacity model (docs/model.md): off-domain demand, uplink load, comm_slowdown.

Per-pod bandwidth b = gpus_per_pod x gpuBandwidthGbps. A gang of P > 1 pods with n pods inside
domain d offers demand D to d's uplinks whenever 0 < n < P; D depends on its traffic pattern:

* all-to-all (the default, the worst case for a fabric): D = n x b x (P - n) / (P - 1);
* ring (rank i sends b to rank i + 1, the last to rank 0): D = b x the ring edges that leave d.
  A ring leaves a domain as often as it enters it, and C_d is one direction's capacity (as the
  all-to-all D is one direction's traffic), so this is b x half the edges with one end in d:
  b for ranks contiguous in d, which the engine's rank order makes them.

A domain's load is the sum of that demand over running gangs, divided by its uplink capacity
C_d = downlink / oversubscription x uplink health.

``Traffic`` is per-decision state (like free GPUs): the simulator and the extender add a gang
when it starts and remove it when it ends; the engine reads it to prefer quiet uplinks.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey
Pattern = api.TrafficPattern
ALL_TO_ALL = Pattern.ALL_TO_ALL
RING = Pattern.RING

_EPSILON = 1e-9


def pods_per_domain(fab: fabric.Fabric, ranks: Iterable[ids.NodeName]) -> dict[DomainKey, int]:
    """How many of the gang's pods sit below every domain it touches, at every tier."""
    counts: dict[DomainKey, int] = {}
    for name, pods in collections.Counter(ranks).items():  # ranks repeat hosts: count once
        for tier, domain in enumerate(fab.hosts[name].path):
            key = (tier, domain)
            counts[key] = counts.get(key, 0) + pods
    return counts


def ring_exits(fab: fabric.Fabric, ranks: Sequence[ids.NodeName]) -> dict[DomainKey, int]:
    """Ring edges (rank i to rank i + 1, the last to rank 0) leaving each domain, per domain
    they leave; consecutive ranks on one host leave nothing (they talk over NVLink)."""
    exits: dict[DomainKey, int] = {}
    if len(ranks) < 2:
        return exits
    hosts = fab.hosts
    for here, there in zip(ranks, (*ranks[1:], ranks[0]), strict=True):
        if here == there:
            continue
        for tier, (mine, theirs) in enumerate(zip(hosts[here].path, hosts[there].path, strict=True)):
            if mine != theirs:
                key = (tier, mine)
                exits[key] = exits.get(key, 0) + 1
    return exits


def pod_bandwidth_gbps(fab: fabric.Fabric, gpus_per_pod: int) -> float:
    return gpus_per_pod * fab.gpu_bandwidth_gbps


def demand_gbps(pods_inside: int, pods: int, pod_bandwidth: float, pattern: Pattern = ALL_TO_ALL) -> float:
    """D from pods per domain: zero when the domain holds none or all of the gang; for a ring,
    the demand of ranks contiguous in the domain (one edge out)."""
    if pods <= 1 or pods_inside <= 0 or pods_inside >= pods:
        return 0.0
    if pattern == RING:
        return pod_bandwidth
    return pods_inside * pod_bandwidth * (pods - pods_inside) / (pods - 1)


def gang_demand(
    fab: fabric.Fabric, ranks: Sequence[ids.NodeName], gpus_per_pod: int, pattern: Pattern = ALL_TO_ALL
) -> dict[DomainKey, float]:
    """Off-domain demand (Gbps) of a gang on every domain it spans partially; a ring's follows
    its rank order (``ranks``: the node of every rank, rank 0 first)."""
    pods = len(ranks)
    b = pod_bandwidth_gbps(fab, gpus_per_pod)
    if pattern == RING:
        return {key: b * edges for key, edges in ring_exits(fab, ranks).items()}
    out: dict[DomainKey, float] = {}
    for key, n in pods_per_domain(fab, ranks).items():
        if n < pods:
            out[key] = demand_gbps(n, pods, b)
    return out


@dataclass
class Traffic:
    """Offered off-domain load (Gbps) per domain from the gangs running now.

    Mutable on purpose: it is per-decision state, updated as gangs start and end; ``copy``
    before a what-if. A gang being placed is never in it: its own demand is added on top.
    """

    load: dict[DomainKey, float] = field(default_factory=dict)

    def add(self, fab: fabric.Fabric, ranks: Sequence[ids.NodeName], gpus_per_pod: int,
            pattern: Pattern = ALL_TO_ALL) -> None:
        self.add_demand(gang_demand(fab, ranks, gpus_per_pod, pattern))

    def add_demand(self, demand: Mapping[DomainKey, float]) -> None:
        """``add`` with the gang's ``gang_demand`` computed already (callers that keep it)."""
        load = self.load
        for key, gbps in demand.items():
            load[key] = load.get(key, 0.0) + gbps

    def remove(self, fab: fabric.Fabric, ranks: Sequence[ids.NodeName], gpus_per_pod: int,
               pattern: Pattern = ALL_TO_ALL) -> None:
        for key, gbps in gang_demand(fab, ranks, gpus_per_pod, pattern).items():
            left = self.load.get(key, 0.0) - gbps
            if left > _EPSILON:
                self.load[key] = left
            else:
                # Float sums never return to exactly zero; drop the key so an idle fabric is empty.
                self.load.pop(key, None)

    def copy(self) -> Traffic:
        return Traffic(dict(self.load))

    def __bool__(self) -> bool:
        return bool(self.load)


Capacities = Mapping[DomainKey, float]
"""C_d per domain, as ``snapshot.Snapshot`` keeps them; None below: computed on the spot."""


def uplink_capacity_gbps(fab: fabric.Fabric, key: DomainKey, health_aware: bool = True) -> float:
    """C_d; health-blind, a degraded uplink counts as whole (a down one still carries nothing)."""
    if health_aware:
        return fab.uplink_capacity_gbps(key)
    domain = fab.domains[key]
    if domain.down:
        return 0.0
    return domain.gpus * fab.gpu_bandwidth_gbps / fab.tiers[domain.tier].oversubscription


def domain_load(
    fab: fabric.Fabric, key: DomainKey, own_gbps: float, traffic: Traffic | None, health_aware: bool = True,
    caps: Capacities | None = None,
) -> float:
    """rho_d with the gang's own demand on top of the running traffic; inf when C_d is 0.

    ``caps`` must be the capacities of ``fab`` for ``health_aware``."""
    existing = traffic.load.get(key, 0.0) if traffic is not None else 0.0
    offered = existing + own_gbps
    if offered <= 0:
        return 0.0
    cap = caps[key] if caps is not None else uplink_capacity_gbps(fab, key, health_aware)
    return math.inf if cap <= 0 else offered / cap


def slowdown_of_counts(
    fab: fabric.Fabric,
    counts: Mapping[DomainKey, int],
    pods: int,
    gpus_per_pod: int,
    traffic: Traffic | None,
    health_aware: bool = True,
    caps: Capacities | None = None,
    pattern: Pattern = ALL_TO_ALL,
) -> float:
    """The domain part of comm_slowdown from pods per domain (hosts left out): what the
    engine compares between candidate plans before it picks hosts (whose rank order keeps a
    ring's ranks contiguous in every domain)."""
    b = pod_bandwidth_gbps(fab, gpus_per_pod)
    worst = 1.0
    for key, n in counts.items():
        if 0 < n < pods:
            demand = demand_gbps(n, pods, b, pattern)
            worst = max(worst, domain_load(fab, key, demand, traffic, health_aware, caps))
    return worst


def comm_slowdown(
    fab: fabric.Fabric, ranks: Sequence[ids.NodeName], gpus_per_pod: int, traffic: Traffic | None = None,
    caps: Capacities | None = None, pattern: Pattern = ALL_TO_ALL,
) -> float:
    """max(1, load of every partially spanned domain, 1/health of every host when > 1 host).

    ``traffic`` must not already hold this gang. inf when the path has a down element. A
    ring is priced on its rank order as given.
    """
    if pattern == RING:
        worst = 1.0
        for key, gbps in gang_demand(fab, ranks, gpus_per_pod, RING).items():
            worst = max(worst, domain_load(fab, key, gbps, traffic, True, caps))
    else:
        counts = pods_per_domain(fab, ranks)
        worst = slowdown_of_counts(fab, counts, len(ranks), gpus_per_pod, traffic, True, caps)
    hosts = set(ranks)
    if len(hosts) > 1:
        for name in hosts:
            health = fab.hosts[name].health
            worst = max(worst, math.inf if health <= 0 else 1.0 / health)
    return worst


def degraded_elements(fab: fabric.Fabric, ranks: Sequence[ids.NodeName]) -> list[str]:
    """The degraded or down elements on a gang's path, named for a reason string."""
    found: list[str] = []
    hosts = sorted(set(ranks))
    if len(hosts) > 1:
        for name in hosts:
            host = fab.hosts[name]
            if host.degraded:
                found.append(f"host {name} link {'down' if host.down else 'degraded'}")
    pods = len(ranks)
    for key, n in sorted(pods_per_domain(fab, ranks).items()):
        domain = fab.domains[key]
        if n < pods and domain.degraded:
            state = "down" if domain.down else "degraded"
            found.append(f"{fab.tiers[key[0]].name} {key[1]} uplinks {state}")
    return found


def on_degraded_path(fab: fabric.Fabric, ranks: Sequence[ids.NodeName]) -> bool:
    """A host of a multi-host gang, or a partially spanned domain's uplinks, is not healthy."""
    return bool(degraded_elements(fab, ranks))


def uses_down(fab: fabric.Fabric, ranks: Sequence[ids.NodeName]) -> bool:
    """Traffic over a down element: a down host of a multi-host gang, or the down uplinks of a
    domain the gang spans partially (placement never does this; the simulator counts it)."""
    hosts = set(ranks)
    if len(hosts) > 1 and any(fab.hosts[h].down for h in hosts):
        return True
    pods = len(ranks)
    return any(n < pods and fab.domains[key].down for key, n in pods_per_domain(fab, ranks).items())

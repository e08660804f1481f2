"""The capacity model (DESIGN.md "Capacity model"): off-domain demand, uplink load, comm_slowdown.

Per-pod bandwidth b = gpus_per_pod x gpuBandwidthGbps. A gang of P > 1 pods with n pods inside
domain d offers D = n x b x (P - n) / (P - 1) to d's uplinks whenever 0 < n < P (all-to-all,
the worst case for a fabric). A domain's load is the sum of that demand over running gangs,
divided by its uplink capacity C_d = downlink / oversubscription x uplink health.

``Traffic`` is per-decision state (like free GPUs): the simulator and the extender add a gang
when it starts and remove it when it ends; the engine reads it to prefer quiet uplinks.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fabricsched import ids
from fabricsched.placement import request, tree
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey

_EPSILON = 1e-9


def pods_per_domain(fab: fabric.Fabric, ranks: Iterable[ids.NodeName]) -> dict[DomainKey, int]:
    """How many of the gang's pods sit below every domain it touches, at every tier."""
    counts: dict[DomainKey, int] = {}
    for name, pods in collections.Counter(ranks).items():  # ranks repeat hosts: count once
        for tier, domain in enumerate(fab.hosts[name].path):
            key = (tier, domain)
            counts[key] = counts.get(key, 0) + pods
    return counts


def pod_bandwidth_gbps(fab: fabric.Fabric, gpus_per_pod: int) -> float:
    return gpus_per_pod * fab.gpu_bandwidth_gbps


def demand_gbps(pods_inside: int, pods: int, pod_bandwidth: float) -> float:
    """D = n x b x (P - n) / (P - 1): zero when the domain holds none or all of the gang."""
    if pods <= 1 or pods_inside <= 0 or pods_inside >= pods:
        return 0.0
    return pods_inside * pod_bandwidth * (pods - pods_inside) / (pods - 1)


def gang_demand(
    fab: fabric.Fabric, ranks: Sequence[ids.NodeName], gpus_per_pod: int
) -> dict[DomainKey, float]:
    """Off-domain demand (Gbps) of a gang on every domain it spans partially."""
    pods = len(ranks)
    b = pod_bandwidth_gbps(fab, gpus_per_pod)
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

    def add(self, fab: fabric.Fabric, ranks: Sequence[ids.NodeName], gpus_per_pod: int) -> None:
        self.add_demand(gang_demand(fab, ranks, gpus_per_pod))

    def add_demand(self, demand: Mapping[DomainKey, float]) -> None:
        """``add`` with the gang's ``gang_demand`` computed already (callers that keep it)."""
        load = self.load
        for key, gbps in demand.items():
            load[key] = load.get(key, 0.0) + gbps

    def remove(self, fab: fabric.Fabric, ranks: Sequence[ids.NodeName], gpus_per_pod: int) -> None:
        for key, gbps in gang_demand(fab, ranks, gpus_per_pod).items():
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


def uplink_capacity_gbps(fab: fabric.Fabric, key: DomainKey, health_aware: bool = True) -> float:
    """C_d; health-blind, a degraded uplink counts as whole (a down one still carries nothing)."""
    if health_aware:
        return fab.uplink_capacity_gbps(key)
    domain = fab.domains[key]
    if tree.domain_down(domain):
        return 0.0
    return domain.gpus * fab.gpu_bandwidth_gbps / fab.tiers[domain.tier].oversubscription


def _capacities(fab: fabric.Fabric, health_aware: bool) -> dict[DomainKey, float]:
    """``uplink_capacity_gbps`` of every domain, once per snapshot the engine works on (it
    asks thousands of times per decision); other callers get them computed on the spot."""
    index = tree.built(fab)
    memo: dict[object, object] = index.memo if index is not None else {}
    found: dict[DomainKey, float] | None = memo.get(("capacity", health_aware))  # type: ignore[assignment]
    if found is None:
        found = {key: uplink_capacity_gbps(fab, key, health_aware) for key in fab.domains}
        memo[("capacity", health_aware)] = found
    return found


def domain_load(
    fab: fabric.Fabric, key: DomainKey, own_gbps: float, traffic: Traffic | None, health_aware: bool = True
) -> float:
    """rho_d with the gang's own demand on top of the running traffic; inf when C_d is 0."""
    existing = traffic.load.get(key, 0.0) if traffic is not None else 0.0
    offered = existing + own_gbps
    if offered <= 0:
        return 0.0
    cap = _capacities(fab, health_aware)[key]
    return math.inf if cap <= 0 else offered / cap


def slowdown_of_counts(
    fab: fabric.Fabric,
    counts: Mapping[DomainKey, int],
    pods: int,
    gpus_per_pod: int,
    traffic: Traffic | None,
    health_aware: bool = True,
) -> float:
    """The domain part of comm_slowdown from pods per domain (hosts left out): what the
    engine compares between candidate plans before it picks hosts."""
    b = pod_bandwidth_gbps(fab, gpus_per_pod)
    worst = 1.0
    for key, n in counts.items():
        if 0 < n < pods:
            worst = max(worst, domain_load(fab, key, demand_gbps(n, pods, b), traffic, health_aware))
    return worst


def comm_slowdown(
    fab: fabric.Fabric, ranks: Sequence[ids.NodeName], gpus_per_pod: int, traffic: Traffic | None = None
) -> float:
    """max(1, load of every partially spanned domain, 1/health of every host when > 1 host).

    ``traffic`` must not already hold this gang. inf when the path has a down element.
    """
    worst = slowdown_of_counts(fab, pods_per_domain(fab, ranks), len(ranks), gpus_per_pod, traffic)
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
            if tree.host_degraded(host):
                found.append(f"host {name} link {'down' if tree.host_down(host) else 'degraded'}")
    pods = len(ranks)
    for key, n in sorted(pods_per_domain(fab, ranks).items()):
        domain = fab.domains[key]
        if n < pods and tree.domain_degraded(domain):
            state = "down" if tree.domain_down(domain) else "degraded"
            found.append(f"{fab.tiers[key[0]].name} {key[1]} uplinks {state}")
    return found


def on_degraded_path(fab: fabric.Fabric, ranks: Sequence[ids.NodeName]) -> bool:
    """A host of a multi-host gang, or a partially spanned domain's uplinks, is not healthy."""
    return bool(degraded_elements(fab, ranks))


def healthy(fab: fabric.Fabric) -> fabric.Fabric:
    """The same fabric with every element healthy: the floor's reference. Build it once per
    snapshot when calling ``floor_slowdown`` often."""
    ok = fabric.HealthState.HEALTHY
    hosts = {n: dataclasses.replace(h, health=1.0, state=ok) for n, h in fab.hosts.items()}
    domains = {k: dataclasses.replace(d, uplink_health=1.0, state=ok) for k, d in fab.domains.items()}
    return fabric.Fabric(fab.tiers, hosts, domains, fab.gpu_bandwidth_gbps, fab.rails)


def floor_slowdown(fab: fabric.Fabric, pods: int, gpus_per_pod: int) -> float:
    """A gang's comm_slowdown alone in the empty, healthy fabric (inf if it can never fit).

    Health is ignored whatever ``fab`` says, so the healthy copy is only made when needed.
    """
    # placing builds on this module; importing it at call time keeps the dependency one-way.
    from fabricsched.placement import placing

    index = tree.of(fab)
    reference = healthy(fab) if index.degraded_hosts or index.degraded_domains else fab
    free = {name: host.gpus for name, host in reference.hosts.items()}
    gang = request.GangRequest(ids.GangKey("floor"), pods, gpus_per_pod)
    result = placing.place(reference, free, gang)
    return result.comm_slowdown if isinstance(result, request.Plan) else math.inf

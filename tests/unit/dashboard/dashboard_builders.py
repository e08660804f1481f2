"""Builders of the fabric page tests: the demo fabric (2 spines x 4 leaves x 4 hosts of 8 GPUs,
one leaf's uplinks and one host's link degraded) as the page's view, and gangs on it."""

from __future__ import annotations

from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.cluster import samples
from fabricsched.dashboard import view
from fabricsched.topology import building, fabric, health, nodes

T0 = 1_700_000_000.0


def record(element: health.ElementId, capacity: float, reason: str) -> health.ElementHealth:
    observed = health.Observation(element, fabric.HealthState.DEGRADED, capacity, "spec.links", reason)
    return health.ElementHealth(element, fabric.HealthState.DEGRADED, capacity, T0, None, (observed,))


def demo_facts(host_name: str = samples.DEMO_DEGRADED_HOST) -> view.FabricFacts:
    spec = api.FabricTopologySpec.model_validate(samples.demo_topology()["spec"])
    infos = [nodes.NodeInfo.from_manifest(m) for m in samples.demo_nodes()]
    leaf = health.ElementId.domain("leaf", samples.DEMO_DEGRADED_LEAF)
    host = health.ElementId.node(host_name)
    effective = {
        leaf: record(leaf, 0.25, "4 of 16 uplinks flapping"),
        host: record(host, 0.5, "<script>alert(1)</script>"),
    }
    fab = building.build_fabric(spec, infos, effective).fabric
    free = {n: h.gpus for n, h in fab.hosts.items()}
    return view.FabricFacts(ids.TopologyName("demo"), fab, free, {}, effective)


def gang_on(facts: view.FabricFacts, hosts: list[str], name: str = "train") -> view.GangFacts:
    return view.GangFacts(
        key=ids.gang_key("team", name, "u1"), namespace="team", name=name, topology=facts.name,
        phase="Bound", size=len(hosts), gpus_per_pod=8, tier="leaf", required=False,
        hosts=tuple(ids.NodeName(h) for h in hosts), slowdown=1.2, slowdown_at_placement=1.0,
        degraded_path=True,
    )

"""Nodes + FabricTopologies -> which nodes form which fabric, the fabric snapshot, free GPUs.

These are the whole-cluster, from-scratch entry points (the simulator, tests, an operator
resync). The operator's per-event path uses the same pieces incrementally: ``Membership`` for
one node against every topology, ``index.FabricIndex`` for one topology's fabric.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.topology import conflicts, fabric, health, index, nodes, selectors

BuildResult = index.BuildResult


@dataclass(frozen=True)
class Assignment:
    members: Mapping[ids.TopologyName, tuple[ids.NodeName, ...]]
    """Nodes of every topology (every topology has an entry), in natural name order."""
    conflicts: Mapping[ids.TopologyName, tuple[conflicts.ConflictInfo, ...]]
    """multipleTopologies conflicts, listed under every topology that selected the node."""

    def topology_of(self, node: ids.NodeName) -> ids.TopologyName | None:
        for name, members in self.members.items():
            if node in members:
                return name
        return None


class Membership:
    """Which FabricTopology claims a node: one node event costs O(topologies x selector size)."""

    def __init__(self, topologies: Mapping[ids.TopologyName, api.FabricTopologySpec]) -> None:
        self._rules = {
            name: (selectors.Selector.compile(spec.node_selector), spec.gpu_resource)
            for name, spec in topologies.items()
        }

    def claims(self, node: nodes.NodeInfo) -> list[ids.TopologyName]:
        """Every topology whose selector matches the node and that finds its GPU resource on it."""
        return sorted(
            name
            for name, (selector, resource) in self._rules.items()
            if node.gpus(resource) > 0 and selector.matches(node.labels)
        )

    def owner(self, node: nodes.NodeInfo) -> tuple[ids.TopologyName | None, conflicts.ConflictInfo | None]:
        """The one topology the node belongs to, or a multipleTopologies conflict (then no owner)."""
        claims = self.claims(node)
        if len(claims) == 1:
            return claims[0], None
        if not claims:
            return None, None
        return None, conflicts.multiple_topologies(node.name, list(claims))


def assign_nodes(
    topologies: Mapping[ids.TopologyName, api.FabricTopologySpec], nodes: Iterable[nodes.NodeInfo]
) -> Assignment:
    """Split the cluster's GPU nodes between topologies; a node two of them select belongs to none."""
    membership = Membership(topologies)
    members: dict[ids.TopologyName, list[ids.NodeName]] = {name: [] for name in topologies}
    found: dict[ids.TopologyName, list[conflicts.ConflictInfo]] = {name: [] for name in topologies}
    for node in nodes:
        claims = membership.claims(node)
        if len(claims) == 1:
            members[claims[0]].append(node.name)
        elif claims:
            conflict = conflicts.multiple_topologies(node.name, list(claims))
            for name in claims:
                found[name].append(conflict)
    return Assignment(
        members={k: tuple(sorted(v, key=index.natural_key)) for k, v in members.items()},
        conflicts={
            k: tuple(sorted(v, key=lambda c: index.natural_key(c.node or ""))) for k, v in found.items()
        },
    )


def build_fabric(
    spec: api.FabricTopologySpec,
    nodes: Iterable[nodes.NodeInfo],
    health: Mapping[health.ElementId, health.ElementHealth],
) -> BuildResult:
    """The fabric of ``spec`` over ``nodes`` (those its selector matches and that have GPUs).

    Pass the topology's members from ``assign_nodes`` when several topologies exist, so nodes in
    a multipleTopologies conflict stay out. Nodes lacking a tier label and domains under two
    parents are reported in ``conflicts`` and left out, never guessed.
    """
    selector = selectors.Selector.compile(spec.node_selector)
    built = index.FabricIndex(spec)
    for node in nodes:
        if selector.matches(node.labels):
            built.set_node(node)
    for element, record in health.items():
        built.set_health(element, record)
    return built.snapshot()


def free_gpus(
    fabric: fabric.Fabric, pods: Iterable[nodes.PodUsage], resource: str
) -> dict[ids.NodeName, int]:
    """Allocatable GPUs of every host minus the requests of active pods bound to it (floor 0)."""
    used: dict[ids.NodeName, int] = {}
    for pod in pods:
        if pod.active and pod.node in fabric.hosts:
            assert pod.node is not None
            used[pod.node] = used.get(pod.node, 0) + pod.requests.get(resource, 0)
    return {name: max(0, host.gpus - used.get(name, 0)) for name, host in fabric.hosts.items()}

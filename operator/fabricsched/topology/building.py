"""Nodes + one FabricTopology -> the fabric snapshot, from scratch (the simulator, tests).

The operator's per-event path uses the same piece incrementally: ``index.FabricIndex``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fabricsched.api import topology as api
from fabricsched.topology import claims, dra, health, index, nodes, selectors

BuildResult = index.BuildResult


def build_fabric(
    spec: api.FabricTopologySpec,
    nodes: Iterable[nodes.NodeInfo],
    health: Mapping[health.ElementId, health.ElementHealth],
    devices: dra.DeviceIndex | None = None,
) -> BuildResult:
    """The fabric of ``spec`` over ``nodes`` (those its selector matches and that have GPUs).

    Pass only the topology's own nodes when several topologies exist, so nodes in a
    multipleTopologies conflict stay out. Nodes lacking a tier label and domains under two
    parents are reported in ``conflicts`` and left out, never guessed. With ``spec.draGpus``, a
    node without the allocatable GPU resource counts its GPU devices in ``devices``.
    """
    selector = selectors.Selector.compile(spec.node_selector)
    built = index.FabricIndex(spec)
    found = devices if devices is not None else dra.DeviceIndex()
    for node in nodes:
        if selector.matches(node.labels):
            built.set_node(node, claims.host_gpus(spec.dra_gpus, spec.gpu_resource, node, found))
    for element, record in health.items():
        built.set_health(element, record)
    return built.snapshot()

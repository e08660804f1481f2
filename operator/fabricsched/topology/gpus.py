"""Free GPUs: one representation, a map from host to GPUs free (never below 0), and the two
ways it is made. The operator keeps the map current per node (``controller.state``), the
simulator per placement; both, and the status and the extender, go through these."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fabricsched import ids
from fabricsched.topology import fabric, nodes

Free = dict[ids.NodeName, int]
"""GPUs free per host of a fabric, never negative."""


def free_of(fab: fabric.Fabric, used: Mapping[ids.NodeName, int]) -> Free:
    """Allocatable GPUs of every host minus those ``used`` on it (floor 0)."""
    return {name: max(0, host.gpus - used.get(name, 0)) for name, host in fab.hosts.items()}


def free_after(free: Mapping[ids.NodeName, int], reserved: Mapping[ids.NodeName, int]) -> Free:
    """``free`` once ``reserved`` (GPUs held for plans, per node) is taken out (floor 0); nodes
    outside ``free`` are not in the answer."""
    out = dict(free)
    for node, held in reserved.items():
        if node in out:
            out[node] = max(0, out[node] - held)
    return out


def used_by(pods: Iterable[nodes.PodUsage], resource: str) -> dict[ids.NodeName, int]:
    """GPUs of ``resource`` that active bound pods request, per node."""
    used: dict[ids.NodeName, int] = {}
    for pod in pods:
        if pod.active and pod.node is not None:
            used[pod.node] = used.get(pod.node, 0) + pod.requests.get(resource, 0)
    return used

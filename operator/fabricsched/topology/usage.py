"""GPUs in use per node, kept incrementally from pod events.

``building.free_gpus`` recomputes from every pod (fine for the simulator and tests); the
operator sees one pod event at a time among tens of thousands of pods, so it keeps this running
tally instead: one event costs O(1), and ``free`` is O(hosts).
"""

from __future__ import annotations

from collections.abc import Mapping

from fabricsched import ids
from fabricsched.topology import fabric, nodes


class GpuUsage:
    def __init__(self, resource: str) -> None:
        self.resource = resource
        self._pods: dict[str, tuple[ids.NodeName, int]] = {}
        """pod key -> (node, GPUs) of active pods that request the resource."""
        self._used: dict[ids.NodeName, int] = {}

    @staticmethod
    def key(pod: nodes.PodUsage) -> str:
        return pod.uid or f"{pod.namespace}/{pod.name}"

    def set_pod(self, pod: nodes.PodUsage) -> None:
        """Record the pod's current state; an inactive or GPU-less pod holds nothing."""
        self.remove_pod(self.key(pod))
        gpus = pod.requests.get(self.resource, 0)
        if pod.active and gpus > 0 and pod.node is not None:
            self._pods[self.key(pod)] = (pod.node, gpus)
            self._used[pod.node] = self._used.get(pod.node, 0) + gpus

    def remove_pod(self, key: str) -> None:
        held = self._pods.pop(key, None)
        if held is None:
            return
        node, gpus = held
        left = self._used[node] - gpus
        if left:
            self._used[node] = left
        else:
            del self._used[node]

    def used(self, node: ids.NodeName) -> int:
        return self._used.get(node, 0)

    def free(self, fabric: fabric.Fabric) -> dict[ids.NodeName, int]:
        """Same answer as ``building.free_gpus`` over the pods recorded so far."""
        used: Mapping[ids.NodeName, int] = self._used
        return {name: max(0, host.gpus - used.get(name, 0)) for name, host in fabric.hosts.items()}

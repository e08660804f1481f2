"""A topology as the engine sees it at one state generation, and the free-GPU map it is cut from.

``FreeMap`` is the incremental part: the free GPUs of every host of one fabric, moved one node
at a time as pods bind and end (``ClusterState`` does), and rebuilt over all hosts only when
the fabric itself is rebuilt. A ``TopologySnapshot`` holds the map as it was when taken:
the map is shared copy-on-write, so a snapshot costs no pass over the hosts and never changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.topology import conflicts, fabric


@dataclass(frozen=True)
class TopologySnapshot:
    """One topology as the engine sees it at one state generation. Immutable; share freely."""

    name: ids.TopologyName
    spec: api.FabricTopologySpec
    fabric: fabric.Fabric
    free_gpus: Mapping[ids.NodeName, int]
    """Allocatable minus what active pods hold, per host of the fabric (never below 0)."""
    conflicts: tuple[conflicts.ConflictInfo, ...]
    """Nodes and domains left out of ``fabric``, and why."""
    generation: int
    """``ClusterState.generation`` when the snapshot was taken."""


class FreeMap:
    """Free GPUs per host of one fabric, kept current as pods bind and end.

    ``free`` is handed to snapshots as is; once one holds it (``shared``), the next change
    copies it first, so a snapshot never sees a later bind.
    """

    def __init__(self, fab: fabric.Fabric, resource: str, free: dict[ids.NodeName, int]) -> None:
        self.fabric = fab
        """The fabric ``free`` was computed for: a new fabric (other hosts or GPU counts) means
        a rebuild."""
        self.resource = resource
        self.free = free
        self.shared = False

    def set(self, node: ids.NodeName, value: int) -> None:
        if self.free.get(node) == value:
            return
        if self.shared:
            self.free = dict(self.free)
            self.shared = False
        self.free[node] = value

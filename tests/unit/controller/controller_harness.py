"""Builders of the controller unit tests: a ``ClusterState`` on a clock the test moves.

The default topology, ``ib``: topograph labels (tier-0 leaf, tier-1 spine), nodes selected by
``gpu=yes``, recovery after 3 s. ``Harness.fabric(...)`` adds 8-GPU nodes leaf by leaf.
"""

from __future__ import annotations

import copy
from typing import Any

import builders
from fabricsched.controller import state
from fabricsched.ports import changes
from timing import Clock

RECOVER_S = 3


def topology_body(name: str = "ib", generation: int = 1, uid: str = "uid-ib",
                  status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """A FabricTopology object as a watch event carries it."""
    body_spec: dict[str, Any] = {
        "nodeSelector": {"matchLabels": {"gpu": "yes"}},
        "tiers": [{"name": "leaf", "nodeLabel": builders.TOPOGRAPH.format(0)},
                  {"name": "spine", "nodeLabel": builders.TOPOGRAPH.format(1)}],
        "health": {"recoverAfterSeconds": RECOVER_S},
    }
    body_spec.update(spec)
    body: dict[str, Any] = {
        "apiVersion": "fabricsched.io/v1alpha1", "kind": "FabricTopology",
        "metadata": {"name": name, "generation": generation, "uid": uid}, "spec": body_spec,
    }
    if status is not None:
        body["status"] = copy.deepcopy(status)
    return body


def gpu_node(name: str, leaf: str = "l1", spine: str = "s1", gpus: int = 8) -> builders.NodeBuilder:
    return builders.make_node(name).leaf(leaf).spine(spine).gpus(gpus).label("gpu", "yes")


class Harness:
    def __init__(self) -> None:
        self.clock = Clock()
        self.state = state.ClusterState(self.clock)
        self.changes: list[changes.Change] = []
        self.state.subscribe(self.changes.append)

    def fabric(self, leaves: dict[str, int], spine: str = "s1") -> list[str]:
        """Add ``count`` nodes under each leaf, named ``<leaf>-h<i>``."""
        names = []
        for leaf, count in leaves.items():
            for i in range(count):
                name = f"{leaf}-h{i}"
                self.state.apply_node(gpu_node(name, leaf, spine).build())
                names.append(name)
        return names

    def of(self, kind: type[changes.Change]) -> list[Any]:
        return [c for c in self.changes if isinstance(c, kind)]

"""Helpers shared by the end-to-end tests and their fixtures (polling is ``waiting.wait_for``'s,
at this module's pace)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

E2E_ENV = "FABRICSCHED_E2E"
TOPOLOGY = os.environ.get("FABRICSCHED_E2E_TOPOLOGY", "kind")
GROUP, VERSION = "fabricsched.io", "v1alpha1"
HEALTH_LABEL = "fabricsched.io/fabric-health"

TIMEOUT_S = 120.0
INTERVAL_S = 1.0
"""``waiting.wait_for`` at a real cluster's pace: pods start, images pull, nodes report."""


@dataclass(frozen=True)
class Host:
    name: str
    leaf: str
    spine: str
    gpus: int


@dataclass(frozen=True)
class Fabric:
    """The hosts of the topology under test, as their labels place them."""

    hosts: tuple[Host, ...]
    gpu_resource: str

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    def leaves(self, spine: str | None = None) -> dict[str, list[Host]]:
        found: dict[str, list[Host]] = {}
        for h in self.hosts:
            if spine is None or h.spine == spine:
                found.setdefault(h.leaf, []).append(h)
        return found

    def spines(self) -> dict[str, list[Host]]:
        found: dict[str, list[Host]] = {}
        for h in self.hosts:
            found.setdefault(h.spine, []).append(h)
        return found

    @property
    def gpus_per_host(self) -> int:
        counts = {h.gpus for h in self.hosts}
        assert len(counts) == 1, f"the tests assume hosts of one size, got {sorted(counts)}"
        return counts.pop()


def topology_object(custom_objects: Any) -> dict[str, Any]:
    found: dict[str, Any] = custom_objects.get_cluster_custom_object(
        GROUP, VERSION, "fabrictopologies", TOPOLOGY)
    return found


def degraded_nodes(custom_objects: Any) -> set[str]:
    status = topology_object(custom_objects).get("status", {})
    return {r["node"] for r in status.get("degraded", []) if r.get("kind") == "node" and r.get("node")}

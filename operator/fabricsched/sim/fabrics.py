"""Sample fabrics for the simulator: nodes (as ``kubectl get nodes -o yaml`` prints them) and a topology.

A layout lists tiers from the top down, each with how many domains sit under one domain of the
tier above (the top tier: how many in all) and its oversubscription; hosts hang under the
lowest tier. Names sort in fabric order (``gpu-0001`` under ``l00`` under ``s0``), so reading a
placement's node names tells where it sits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fabricsched.api import topology as api

TIER_LABEL = "fabric.topograph.run/tier-{}"
GPU_PRESENT = "nvidia.com/gpu.present"
_TIMESTAMP = "2026-01-01T00:00:00Z"


@dataclass(frozen=True)
class TierShape:
    name: str
    count: int
    """Domains of this tier under one domain of the tier above (top tier: in all)."""
    oversubscription: float = 1.0
    prefix: str = ""
    """Domain name prefix; default the tier name's first letter."""
    label: str = ""
    """Node label naming the domain; default Topograph's ``fabric.topograph.run/tier-N``."""


@dataclass(frozen=True)
class FabricLayout:
    tiers: tuple[TierShape, ...]
    """Top tier first (the order people draw fabrics), unlike ``spec.tiers`` (lowest first)."""
    hosts_per_leaf: int
    gpus_per_host: int = 8
    gpu_bandwidth_gbps: float = 400.0
    recover_after_seconds: int = 300


PRESETS: dict[str, FabricLayout] = {
    # Classic 2-tier leaf-spine: 16 leaves of 16 hosts, 2:1 oversubscribed leaf uplinks, one spine layer.
    "leaf-spine": FabricLayout((TierShape("spine", 1), TierShape("leaf", 16, 2.0)), hosts_per_leaf=16),
    # 3-tier: 8 spine blocks of 4 leaves of 8 hosts; leaves and spine blocks both 2:1 to the tier above.
    "three-tier": FabricLayout(
        (TierShape("core", 1), TierShape("spine", 8, 2.0), TierShape("leaf", 4, 2.0)), hosts_per_leaf=8),
    # GB200 NVL72: 16 racks of 18 hosts x 4 GPUs, each rack one NVLink domain (nvidia.com/gpu.clique,
    # the lowest tier), 4 racks per 2:1 leaf, one spine layer.
    "nvl72": FabricLayout(
        (TierShape("spine", 1), TierShape("leaf", 4, 2.0),
         TierShape("nvlink", 4, prefix="nvl", label=api.NVLINK_CLIQUE_LABEL)),
        hosts_per_leaf=18, gpus_per_host=4),
}


def _tier_label(layout: FabricLayout, level: int) -> str:
    """Node label of the tier at ``level`` (top tier first): its own, or Topograph's switch tier
    number counted over the tiers below it that have none (an NVLink tier is no switch tier)."""
    below = sum(1 for shape in layout.tiers[level + 1:] if not shape.label)
    return layout.tiers[level].label or TIER_LABEL.format(below)


def parse_layout(text: str, hosts_per_leaf: int, gpus_per_host: int = 8) -> FabricLayout:
    """``"spine:1,leaf:63:2.0"`` (top tier first, NAME:COUNT[:OVERSUBSCRIPTION])."""
    tiers: list[TierShape] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        fields = part.split(":")
        try:
            if len(fields) not in (2, 3):
                raise ValueError
            tiers.append(TierShape(fields[0], int(fields[1]), float(fields[2]) if len(fields) == 3 else 1.0))
        except ValueError:
            raise ValueError(f"bad tier {part!r}; expected NAME:COUNT[:OVERSUBSCRIPTION]") from None
    if not tiers or any(t.count < 1 or t.oversubscription <= 0 for t in tiers):
        raise ValueError(f"bad layout {text!r}: at least one tier, counts >= 1")
    return FabricLayout(tuple(tiers), hosts_per_leaf, gpus_per_host)


def _node(name: str, labels: dict[str, str], gpus: int) -> dict[str, Any]:
    resources = {"cpu": "96", "memory": "2113921680Ki", "nvidia.com/gpu": str(gpus), "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **labels},
            "name": name,
        },
        "spec": {},
        "status": {
            "allocatable": dict(resources),
            "capacity": dict(resources),
            "conditions": [{
                "lastHeartbeatTime": _TIMESTAMP, "lastTransitionTime": _TIMESTAMP,
                "message": "kubelet is posting ready status", "reason": "KubeletReady",
                "status": "True", "type": "Ready",
            }],
        },
    }


def node_list(layout: FabricLayout) -> dict[str, Any]:
    """A v1 List of Nodes, laid out depth-first so host numbers follow the fabric."""
    depth = len(layout.tiers)
    items: list[dict[str, Any]] = []
    counters = [0] * depth

    def walk(level: int, path: Sequence[str]) -> None:
        if level == depth:
            for _ in range(layout.hosts_per_leaf):
                name = f"gpu-{len(items) + 1:04d}"
                # path is top tier first; label tier-0 is the lowest tier.
                labels = {_tier_label(layout, i): d for i, d in enumerate(path)}
                items.append(_node(name, {GPU_PRESENT: "true", **labels}, layout.gpus_per_host))
            return
        shape = layout.tiers[level]
        prefix = shape.prefix or shape.name[0]
        for _ in range(shape.count):
            domain = f"{prefix}{counters[level]:02d}"
            counters[level] += 1
            walk(level + 1, [*path, domain])

    walk(0, [])
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


def topology(layout: FabricLayout, name: str) -> dict[str, Any]:
    """The FabricTopology manifest matching ``node_list(layout)``."""
    tiers = [
        {"name": shape.name, "nodeLabel": _tier_label(layout, i),
         **({"oversubscription": shape.oversubscription} if shape.oversubscription != 1.0 else {})}
        for i, shape in enumerate(layout.tiers)
    ]
    spec: dict[str, Any] = {
        "nodeSelector": {"matchLabels": {GPU_PRESENT: "true"}},
        "gpuResource": "nvidia.com/gpu",
        "tiers": list(reversed(tiers)),
        "gpuBandwidthGbps": layout.gpu_bandwidth_gbps,
        "health": {"degradedCapacity": 0.5, "recoverAfterSeconds": layout.recover_after_seconds},
    }
    api.FabricTopologySpec.model_validate(spec)  # what we write must read back
    return {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name}, "spec": spec}

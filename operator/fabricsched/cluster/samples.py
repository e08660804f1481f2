"""Sample fabrics: Node manifests of a leaf-spine GPU cluster, and its FabricTopology.

Pure: returns plain dicts (what ``kubectl get nodes -o yaml`` would show); the demo's
``examples/demo-nodes.yaml`` and ``examples/demo-topology.yaml`` are written from here
(``python -m fabricsched.cluster.samples --write examples/``) and a unit test keeps them equal.
``--fabric 3x5x10 --out FILE`` writes any other size (spines x leaves per spine x hosts per leaf).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

GPU_RESOURCE = "nvidia.com/gpu"
LINK_CONDITION = "FabricLinkDegraded"
"""The Node condition a FabricTopology reads as "this host's fabric link is degraded" by default."""
DEMO_DEGRADED_LEAF = "l07"
"""The demo leaf whose uplinks are degraded (FabricTopology ``spec.links``)."""
DEMO_DEGRADED_HOST = "gpu-022"
"""The demo host whose own fabric link is degraded (a ``FabricLinkDegraded=True`` condition); in
leaf l06 under spine s2, next to the degraded leaf, so a gang needing two leaves of s2 has to
step around both."""


@dataclass(frozen=True)
class LabelPreset:
    """Node label keys naming a host's leaf and spine."""

    leaf: str
    spine: str


TOPOGRAPH = LabelPreset(leaf="fabric.topograph.run/tier-0", spine="fabric.topograph.run/tier-1")
"""The labels NVIDIA's topograph-style discovery puts on nodes (tier-0 = leaf, tier-1 = spine)."""


@dataclass(frozen=True)
class HostShape:
    """Resources of every sample host; capacity and allocatable are equal (no system reserve)."""

    cpu: str = "96"
    memory: str = "1Ti"
    pods: str = "110"


def node_name(index: int) -> str:
    """``gpu-017``: 1-based, three digits, in fabric order (spine, then leaf, then host)."""
    return f"gpu-{index:03d}"


def leaf_name(index: int) -> str:
    return f"l{index:02d}"


def spine_name(index: int) -> str:
    return f"s{index}"


def sample_fabric(
    spines: int = 2, leaves_per_spine: int = 4, hosts_per_leaf: int = 4, gpus: int = 8,
    label_preset: LabelPreset = TOPOGRAPH, shape: HostShape = HostShape(),
) -> list[dict[str, Any]]:
    """Node manifests of ``spines x leaves_per_spine x hosts_per_leaf`` GPU hosts."""
    if min(spines, leaves_per_spine, hosts_per_leaf, gpus) < 1:
        raise ValueError("spines, leaves_per_spine, hosts_per_leaf and gpus must all be >= 1")
    resources = {"cpu": shape.cpu, "memory": shape.memory, "pods": shape.pods, GPU_RESOURCE: str(gpus)}
    manifests: list[dict[str, Any]] = []
    for s in range(spines):
        for leaf in range(leaves_per_spine):
            leaf_index = s * leaves_per_spine + leaf + 1
            for _ in range(hosts_per_leaf):
                name = node_name(len(manifests) + 1)
                manifests.append({
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": {
                            "kubernetes.io/hostname": name,
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                            "nvidia.com/gpu.present": "true",
                            "nvidia.com/gpu.count": str(gpus),
                            label_preset.leaf: leaf_name(leaf_index),
                            label_preset.spine: spine_name(s + 1),
                        },
                    },
                    "spec": {},
                    "status": {"capacity": dict(resources), "allocatable": dict(resources)},
                })
    return manifests


def degrade_link(manifest: dict[str, Any], message: str) -> dict[str, Any]:
    """``manifest`` with a ``FabricLinkDegraded=True`` condition, as a NIC health agent would set it."""
    degraded = {**manifest, "status": dict(manifest["status"])}
    degraded["status"]["conditions"] = [
        *degraded["status"].get("conditions", []),
        {"type": LINK_CONDITION, "status": "True", "reason": "SymbolErrors", "message": message},
    ]
    return degraded


def demo_nodes() -> list[dict[str, Any]]:
    """The demo fabric (``sample_fabric()``) with ``DEMO_DEGRADED_HOST``'s link degraded."""
    return [
        degrade_link(m, "symbol errors on mlx5_2") if m["metadata"]["name"] == DEMO_DEGRADED_HOST else m
        for m in sample_fabric()
    ]


def node_list(manifests: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Wrap manifests the way ``kubectl get nodes -o yaml`` does."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": list(manifests)}


def demo_topology(name: str = "demo", label_preset: LabelPreset = TOPOGRAPH,
                  degraded_leaf: str = DEMO_DEGRADED_LEAF) -> dict[str, Any]:
    """A FabricTopology for ``sample_fabric()``: leaf 2:1 oversubscribed, one leaf's uplinks degraded."""
    return {
        "apiVersion": "fabricsched.io/v1alpha1",
        "kind": "FabricTopology",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {"nvidia.com/gpu.present": "true"}},
            "gpuResource": GPU_RESOURCE,
            "tiers": [
                {"name": "leaf", "nodeLabel": label_preset.leaf, "oversubscription": 2.0},
                {"name": "spine", "nodeLabel": label_preset.spine},
            ],
            "gpuBandwidthGbps": 400,
            "links": [
                {"tier": "leaf", "domain": degraded_leaf, "state": "degraded", "capacity": 0.25,
                 "reason": "4 of 16 uplinks flapping"},
            ],
        },
    }


def demo_files() -> dict[str, str]:
    """File name -> content of the demo examples (32 nodes: 2 spines x 4 leaves x 4 hosts x 8 GPUs,
    one leaf's uplinks and one host's link degraded)."""
    header = "# Generated by `python -m fabricsched.cluster.samples --write examples/`; do not edit.\n"
    return {
        "demo-nodes.yaml": header + yaml.safe_dump(node_list(demo_nodes()), sort_keys=False),
        "demo-topology.yaml": header + yaml.safe_dump(demo_topology(), sort_keys=False),
    }


def _shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() and len(p) <= 6 and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected SPINESxLEAVESxHOSTS, e.g. 3x5x10, got {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fabricsched.cluster.samples",
                                     description="Write sample node and topology manifests.")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path, metavar="DIR", help="write the demo examples into DIR")
    mode.add_argument("--fabric", type=_shape, metavar="SxLxH",
                      help="a NodeList of S spines x L leaves per spine x H hosts per leaf (to --out)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per host with --fabric (default: 8)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="output file of --fabric")
    args = parser.parse_args(argv)
    if args.fabric:
        if args.out is None:
            parser.error("--fabric needs --out FILE")
        spines, leaves, hosts = args.fabric
        manifests = sample_fabric(spines, leaves, hosts, gpus=args.gpus)
        args.out.write_text(yaml.safe_dump(node_list(manifests), sort_keys=False))
        print(f"wrote {args.out} ({len(manifests)} nodes)")
        return 0
    args.write.mkdir(parents=True, exist_ok=True)
    for file_name, content in demo_files().items():
        (args.write / file_name).write_text(content)
        print(f"wrote {args.write / file_name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

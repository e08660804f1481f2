"""Topology state at cluster scale: build, then one node event at a time.

    python bench/topology_bench.py [--nodes 10000] [--pods 50000] [--changes 1000] [--seed 1]

Feeds the operator's own cluster state (``controller.state.ClusterState``: node parsing,
topology membership, ``FabricIndex``, ``HealthTracker``, free GPUs per node) a 3-tier fabric's
node and pod manifests, then label/condition changes one node event at a time, exactly as the
operator's watch handlers do, and prints build time, per-change p50/p99, one lazy snapshot
rebuild, the status build and peak RSS.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
from typing import Any

from benchstats import percentile
from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.controller import state
from fabricsched.topology import status

LEAF, SPINE, CORE = (f"fabric.topograph.run/tier-{i}" for i in range(3))
TOPOLOGY = "bench"


def node_manifest(i: int, leaf_size: int = 8, leaves_per_spine: int = 16, spines_per_core: int = 8,
                  extra: dict[str, str] | None = None, degraded: bool = False) -> dict[str, Any]:
    leaf = i // leaf_size
    spine = leaf // leaves_per_spine
    labels = {"kubernetes.io/hostname": f"gpu-{i}", "nvidia.com/gpu.present": "true",
              LEAF: f"l{leaf}", SPINE: f"s{spine}", CORE: f"c{spine // spines_per_core}", **(extra or {})}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": f"gpu-{i}", "labels": labels},
        "status": {
            "allocatable": {"cpu": "96", "memory": "1966080Mi", "nvidia.com/gpu": "8"},
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": ""},
                {"type": "FabricLinkDegraded", "status": "True" if degraded else "False",
                 "reason": "PortErrors", "message": "symbol errors on mlx5_2" if degraded else ""},
            ],
        },
    }


def pod_manifest(j: int, node: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"p{j}", "namespace": "train", "uid": f"u{j}",
                     "labels": {"fabricsched.io/gang": f"g{j // 8}"}},
        "spec": {"nodeName": f"gpu-{node}", "schedulerName": "fabricsched",
                 "containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"},
    }


class Clock:
    """The operator's clock, set by the bench (health hysteresis counts in it)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--changes", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    spec = api.FabricTopologySpec.model_validate({"tiers": [
        {"name": "leaf", "nodeLabel": LEAF, "oversubscription": 2.0},
        {"name": "spine", "nodeLabel": SPINE}, {"name": "core", "nodeLabel": CORE}]})

    node_bodies = [node_manifest(i) for i in range(args.nodes)]
    pod_bodies = [pod_manifest(j, rng.randrange(args.nodes)) for j in range(args.pods)]
    clock = Clock()
    cluster = state.ClusterState(clock)
    start = time.perf_counter()
    topology_body = {"metadata": {"name": TOPOLOGY, "generation": 1}, "spec": spec.to_wire()}
    cluster.apply_topology(TOPOLOGY, topology_body)
    for body in node_bodies:
        cluster.apply_node(body)
    for body in pod_bodies:
        cluster.apply_pod(body)
    topology = cluster.topologies[ids.TopologyName(TOPOLOGY)]
    built = topology.build()
    build_s = time.perf_counter() - start

    timings = []
    for k in range(args.changes):
        i = rng.randrange(args.nodes)
        kind = k % 4
        if kind == 0:
            body = node_manifest(i, degraded=True)
        elif kind == 1:
            body = node_manifest(i)
        elif kind == 2:
            body = node_manifest(i, extra={api.HEALTH_LABEL: "down"})
        else:
            body = node_manifest(i, extra={"team": f"t{k}"})
        clock.now = float(k)
        t0 = time.perf_counter()
        cluster.apply_node(body)
        timings.append(time.perf_counter() - t0)
    timings.sort()

    t0 = time.perf_counter()
    built = topology.build()
    snapshot_s = time.perf_counter() - t0
    taken = cluster.snapshot(ids.TopologyName(TOPOLOGY))
    assert taken is not None
    t0 = time.perf_counter()
    out = status.build_status(built, topology.health(), taken.free_gpus, 1e9)
    status_s = time.perf_counter() - t0
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux

    p50 = percentile(timings, 50) * 1e3
    p99 = percentile(timings, 99) * 1e3
    print(f"nodes={args.nodes} pods={args.pods} changes={args.changes} "
          f"hosts={len(built.fabric.hosts)} domains={len(built.fabric.domains)} "
          f"degraded={out.degraded_count}")
    print(f"build (parse + index + health + usage + first snapshot): {build_s * 1e3:.0f} ms")
    print(f"per change (the operator's node event): p50 {p50:.3f} ms  p99 {p99:.3f} ms  "
          f"max {timings[-1] * 1e3:.3f} ms")
    print(f"snapshot after {args.changes} changes (lazy): {snapshot_s * 1e3:.0f} ms")
    print(f"status build: {status_s * 1e3:.0f} ms")
    print(f"peak RSS: {rss_kib / 1024:.0f} MiB")
    return 0 if p99 < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())

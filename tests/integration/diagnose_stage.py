"""Helpers of ``test_diagnose``: a 4-rank Indexed Job placed on the session cluster with its
FabricTopology and FabricPlacement, and the six scenarios backfilled into a real Prometheus.

The job is placed by the cluster's default scheduler (8 GPUs a pod, 8 a node: one rank a node,
on this test's nodes only); its FabricPlacement is then written as the extender writes one
(ranks, domains, owner reference to the Job, status Bound), so ``diagnose`` reads the objects it
reads in production. The history is what ``fabricsched diagnose-scenario`` writes, backfilled
with ``promtool tsdb create-blocks-from openmetrics`` before Prometheus starts on loopback;
scenario k owns its own 30-minute window in the last four hours, so one Prometheus holds all six.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clusterkit import Cluster, NodeFactory, wait_for

from fabricsched.cluster import samples
from fabricsched.diagnose import scenarios, timefmt

SCRIPTS = Path(sys.executable).parent
GROUP = "/apis/fabricsched.io/v1alpha1"
RANKS = 4
MINUTES = 30
SPACING_S = 40 * 60
STEP_METRIC = 'train_step_seconds{job="train"}'


@dataclass(frozen=True)
class Placed:
    namespace: str
    job: str
    topology: str
    hosts: list[tuple[str, str]]
    """(node, leaf) in rank order."""
    pods: dict[str, tuple[str, str]]
    """Node -> (namespace, pod)."""


def place_job(cluster: Cluster, node_factory: NodeFactory, namespace: str) -> Placed:
    """Two leaves of two hosts, a topology over them, the Job, its pods bound, its FabricPlacement."""
    node_factory(2, leaf="l01")
    node_factory(2, leaf="l02")
    topology = f"diag-{node_factory.group}"
    cluster.api.call(
        "POST",
        f"{GROUP}/fabrictopologies",
        {
            "apiVersion": "fabricsched.io/v1alpha1",
            "kind": "FabricTopology",
            "metadata": {"name": topology},
            "spec": {
                "nodeSelector": {"matchLabels": node_factory.selector},
                "tiers": [
                    {"name": "leaf", "nodeLabel": samples.TOPOGRAPH.leaf},
                    {"name": "spine", "nodeLabel": samples.TOPOGRAPH.spine},
                ],
            },
        },
    )
    job = cluster.api.call("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", _job(node_factory.selector))
    pods = wait_for("the Job's 4 pods bound", lambda: _bound(cluster, namespace), timeout=60)
    labels = {
        n["metadata"]["name"]: n["metadata"]["labels"]
        for n in cluster.api.call("GET", "/api/v1/nodes", None)["items"]
    }
    hosts = [(p["spec"]["nodeName"], labels[p["spec"]["nodeName"]][samples.TOPOGRAPH.leaf]) for p in pods]
    placement = _placement(job, topology, hosts)
    created = cluster.api.call("POST", f"{GROUP}/namespaces/{namespace}/fabricplacements", placement)
    created["status"] = {
        "phase": "Bound",
        "boundRanks": list(range(RANKS)),
        "commSlowdown": 1.0,
        "degradedPath": False,
        "reasons": ["fits 2 leaves under spine s1"],
    }
    cluster.api.call("PUT", f"{GROUP}/namespaces/{namespace}/fabricplacements/train/status", created)
    return Placed(
        namespace,
        "train",
        topology,
        hosts,
        {p["spec"]["nodeName"]: (namespace, p["metadata"]["name"]) for p in pods},
    )


def _job(selector: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "annotations": {"fabricsched.io/step-time-metric": STEP_METRIC}},
        "spec": {
            "completionMode": "Indexed",
            "completions": RANKS,
            "parallelism": RANKS,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": dict(selector),
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "trainer",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                }
            },
        },
    }


def _bound(cluster: Cluster, namespace: str) -> list[dict[str, Any]] | None:
    pods = cluster.api.call("GET", f"/api/v1/namespaces/{namespace}/pods", None)["items"]
    if len(pods) < RANKS or not all(p["spec"].get("nodeName") for p in pods):
        return None
    return sorted(
        pods, key=lambda p: int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
    )


def _placement(job: Mapping[str, Any], topology: str, hosts: Sequence[tuple[str, str]]) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": "fabricsched.io/v1alpha1",
        "kind": "FabricPlacement",
        "metadata": {
            "name": "train",
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"]}
            ],
        },
        "spec": {
            "gang": "train",
            "jobUID": meta["uid"],
            "size": RANKS,
            "gpusPerPod": 8,
            "tier": {"name": "leaf", "policy": "preferred"},
            "topology": topology,
            "domains": {"leaf": sorted({leaf for _, leaf in hosts}), "spine": ["s1"]},
            "ranks": [{"rank": r, "node": node} for r, (node, _) in enumerate(hosts)],
        },
    }


def find_promtool_or_skip() -> Path:
    found = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").is_file() else None)
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true and promtool is missing (apt-get install -y prometheus)", pytrace=False)
        pytest.skip("the diagnose tests need promtool: apt-get install -y prometheus")
    return Path(found)


def windows(now: float) -> dict[str, tuple[float, float]]:
    """Scenario -> its (start, end): the last one ends a few minutes ago, each 40 minutes apart."""
    last = math.floor(now / 60) * 60 - 5 * 60
    count = len(scenarios.SCENARIOS)
    return {
        name: (end - MINUTES * 60, end)
        for k, name in enumerate(scenarios.SCENARIOS)
        for end in [last - (count - 1 - k) * SPACING_S]
    }


def backfill(promtool: Path, workdir: Path, placed: Placed, spans: Mapping[str, tuple[float, float]]) -> None:
    """Each scenario through ``fabricsched diagnose-scenario`` and promtool into ``workdir/data``."""
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    for name, (_, end) in spans.items():
        path = workdir / f"{name}.om"
        argv = [
            str(SCRIPTS / "fabricsched"),
            "diagnose-scenario",
            name,
            "--end",
            str(timefmt.rfc3339(end)),
            "--minutes",
            str(MINUTES),
            "-o",
            str(path),
        ]
        argv += [f"--host={node}={leaf}" for node, leaf in placed.hosts]
        argv += [f"--pod={node}={ns}/{pod}" for node, (ns, pod) in placed.pods.items()]
        subprocess.run(argv, check=True, capture_output=True, timeout=60)
        subprocess.run(
            [str(promtool), "tsdb", "create-blocks-from", "openmetrics", str(path), str(data)],
            check=True,
            capture_output=True,
            timeout=120,
        )


def diagnose(*args: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    argv = [str(SCRIPTS / "fabricsched"), "diagnose", *args, f"--kubeconfig={kubeconfig}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=dict(os.environ))


def now() -> float:
    return time.time()

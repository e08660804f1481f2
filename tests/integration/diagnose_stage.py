"""Helpers of ``test_diagnose``: the demo's ``train-6`` placed by fabricsched on the demo fabric,
and the six scenarios backfilled for its real hosts into a real Prometheus.

The cluster is the shared harness's (``harness.fabric_cluster``: the local control plane, the
fabricsched kube-scheduler and ``fabricsched run`` with its page): the Job of
examples/demo-jobs/2-train-6.yaml (6 pods of 8 GPUs, with a step-time annotation added) is
scheduled by fabricsched, which writes its FabricPlacement, so ``diagnose`` reads the objects it
reads in production. The history is what ``fabricsched diagnose-scenario`` writes for those
hosts, backfilled with ``promtool tsdb create-blocks-from openmetrics`` before Prometheus starts
on loopback; scenario k owns its own 30-minute window in the last four hours, so one Prometheus
holds all six.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import REPO, Fabric
from waiting import wait_for

from fabricsched.diagnose import scenarios, timefmt

SCRIPTS = Path(sys.executable).parent
NAMESPACE, JOB = "train", "train-6"
RANKS = 6
MINUTES = 30
SPACING_S = 40 * 60
STEP_METRIC = 'train_step_seconds{job="train"}'


@dataclass(frozen=True)
class Placed:
    namespace: str
    job: str
    hosts: list[tuple[str, str]]
    """(node, leaf) in rank order."""
    pods: dict[str, tuple[str, str]]
    """Node -> (namespace, pod)."""


def place_train_6(fabric: Fabric) -> Placed:
    """The demo's train-6 in namespace train, placed by fabricsched, its FabricPlacement Bound."""
    fabric.api.call("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    account = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"
    wait_for("ServiceAccount train/default", lambda: fabric.api.request("GET", account)[0] == 200)
    job: dict[str, Any] = yaml.safe_load((REPO / "examples" / "demo-jobs" / "2-train-6.yaml").read_text())
    job["metadata"]["annotations"] = {"fabricsched.io/step-time-metric": STEP_METRIC}
    fabric.api.call("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", job)
    nodes = fabric.placed(NAMESPACE, JOB, RANKS)
    wait_for(
        "train-6's FabricPlacement Bound",
        lambda: ((fabric.placement(NAMESPACE, JOB) or {}).get("status") or {}).get("phase") == "Bound",
        timeout=60,
    )
    pods = {
        p["spec"]["nodeName"]: (NAMESPACE, p["metadata"]["name"])
        for p in fabric.pods(NAMESPACE)
        if p["metadata"]["labels"].get("job-name") == JOB
    }
    return Placed(NAMESPACE, JOB, [(n, fabric.leaf_of[n]) for n in nodes], pods)


def kubectl(fabric: Fabric, *args: str) -> None:
    argv = [str(fabric.plane.binaries.kubectl), f"--kubeconfig={fabric.plane.kubeconfig}", *args]
    subprocess.run(argv, capture_output=True, check=True, timeout=60)


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


def page_diagnosis(fabric: Fabric, gang: str, since: str = "1h") -> tuple[int, dict[str, Any]]:
    """The fabric page's ``/api/diagnose`` answer for ``gang``: (status, JSON body)."""
    query = urllib.parse.urlencode({"gang": gang, "since": since})
    try:
        with urllib.request.urlopen(f"{fabric.operator.url}/api/diagnose?{query}", timeout=90) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")

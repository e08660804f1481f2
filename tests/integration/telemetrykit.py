"""Helpers of the telemetry tests (test_telemetry, test_telemetry_access): the timing budget of a
degradation, the FabricTopology read from a Prometheus, ``fabricsched run`` against the session
cluster, and readers of the topology's status.

Timing budget of a degradation: one scrape for Prometheus to see the counter move, then
``degradeAfter`` (N) firing evaluations, one more interval for the evaluation that straddles the
change, and one status write: (N + 1) x interval + scrape + status interval, plus a fixed
allowance for a loaded two-core CI machine.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from clusterkit import Cluster
from harness import running_operator
from waiting import wait_for

from fabricsched.api import placement as placement_api
from fabricsched.api import topology as api

INTERVAL_S = 1
DEGRADE_AFTER = 2
RECOVER_AFTER_S = 4
STATUS_INTERVAL_S = 1.0
ALLOWANCE_S = 4.0
DEGRADE_BUDGET_S = (DEGRADE_AFTER + 1) * INTERVAL_S + 1.0 + STATUS_INTERVAL_S + ALLOWANCE_S
LEAF_RULE = {
    "name": "leaf-uplink-errors", "target": "domain", "targetLabel": "leaf", "tier": "leaf",
    "query": 'sum by (leaf) (increase(fabric_switch_port_errors_total{role="uplink"}[5s]))',
    "comparison": ">", "threshold": 0,
}


def apply_crds(cluster: Cluster, repo_root: Path) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(repo_root / "crds"))
    for crd in (api.PLURAL, placement_api.PLURAL):
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=120s", f"crd/{crd}.{api.GROUP}")


def topology_manifest(name: str, selector: dict[str, str], prometheus_url: str) -> dict[str, Any]:
    """A two-tier FabricTopology over ``selector``'s nodes, its health read from ``prometheus_url``."""
    return {
        "apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": selector},
            "tiers": [{"name": "leaf", "nodeLabel": "fabric.topograph.run/tier-0"},
                      {"name": "spine", "nodeLabel": "fabric.topograph.run/tier-1"}],
            "health": {"recoverAfterSeconds": RECOVER_AFTER_S, "prometheus": {
                "url": prometheus_url, "intervalSeconds": INTERVAL_S, "timeoutSeconds": 2,
                "degradeAfter": DEGRADE_AFTER, "defaultRules": {"window": "5s"}, "rules": [LEAF_RULE]}},
        },
    }


@contextlib.contextmanager
def operator(cluster: Cluster, workdir: Path, args: Sequence[str] = ()) -> Iterator[subprocess.Popen[bytes]]:
    """``fabricsched run`` against the test cluster on free ports, until the block ends; ``args``
    are more flags (the Prometheus allow-list: without one no Prometheus is asked)."""
    flags = [f"--status-interval={STATUS_INTERVAL_S}", *args]
    with running_operator(cluster.kubeconfig, workdir, flags) as running:
        assert running.process is not None
        yield running.process


def status_of(custom_objects: Any, name: str) -> dict[str, Any]:
    obj = custom_objects.get_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL, name)
    return dict(obj.get("status") or {})


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or () if c["type"] == ctype), None)


def record(status: dict[str, Any], kind: str, name: str) -> dict[str, Any] | None:
    key = "node" if kind == "node" else "domain"
    return next((r for r in status.get("degraded") or () if r["kind"] == kind and r.get(key) == name), None)


def timed(what: str, check: Callable[[], Any], timeout: float) -> tuple[Any, float]:
    started = time.monotonic()
    result = wait_for(what, check, timeout=timeout, interval=0.2)
    return result, time.monotonic() - started

"""`helm upgrade` from the previous chart to this one, on the local control plane.

The previous chart is the one at ``PREVIOUS`` (main before the reliability work), taken from git
into a temporary folder. It is installed for real (kwok runs no kubelet and the cluster has no
node for it, so its pod never starts: what is tested is what helm and the API server do with the
objects). A gang's FabricPlacement exists throughout. The upgrade is done as docs/install.md
says: the new CRDs applied first (helm never upgrades a chart's ``crds/``), then ``helm upgrade``.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartkit import CHART, REPO, Helm
from clusterkit import Cluster

from fabricsched.api import placement as api
from fabricsched.cluster import binaries

pytestmark = pytest.mark.integration

PREVIOUS = "ce81c4a"
"""The commit whose chart is the previous version."""
RELEASE = "upgrade-test"
CRD = f"{api.PLURAL}.{api.GROUP}"


def previous_chart(into: Path) -> Path:
    """The chart folder as it was at ``PREVIOUS``, extracted from git."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS, "charts/fabricsched"],
            capture_output=True, check=True, timeout=60,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.fail(f"the previous chart ({PREVIOUS}) cannot be read from git: {e}", pytrace=False)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "charts" / "fabricsched"


def placement(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{api.GROUP}/{api.VERSION}", "kind": "FabricPlacement",
        "metadata": {"name": "running", "namespace": namespace},
        "spec": {"gang": "running", "jobUID": "", "size": 2, "gpusPerPod": 8,
                 "tier": {"name": "leaf", "policy": "preferred"}, "topology": "ib-test",
                 "domains": {"leaf": ["l01"]},
                 "ranks": [{"rank": 0, "node": "gpu-001"}, {"rank": 1, "node": "gpu-002"}]},
    }


def test_helm_upgrade_from_the_previous_chart_keeps_running_gangs_and_serves_the_new_crds(
    cluster: Cluster, namespace: str, tools: binaries.Binaries, tmp_path: Path
) -> None:
    assert tools.helm is not None
    helm = Helm(tools.helm, tmp_path)
    kube = ("--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace)
    old = previous_chart(tmp_path / "previous")
    helm.run("install", RELEASE, str(old), *kube)
    try:
        path = f"/apis/{api.GROUP}/{api.VERSION}/namespaces/{namespace}/{api.PLURAL}"
        created = cluster.api.call("POST", path, placement(namespace))
        status = {"phase": "Bound", "boundRanks": [0, 1], "commSlowdown": 1.0, "reasons": ["fits leaf l01"]}
        running = cluster.api.call("PATCH", f"{path}/running/status", {"status": status},
                                   "application/merge-patch+json")
        assert running["metadata"]["uid"] == created["metadata"]["uid"]

        # The documented upgrade: the new CRDs first, then the chart.
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))
        helm.run("upgrade", RELEASE, str(CHART), *kube, "--reset-then-reuse-values")

        history = yaml.safe_load(helm.run("history", RELEASE, *kube, "-o", "yaml").stdout)
        assert [h["status"] for h in history][-1] == "deployed" and len(history) == 2
        after = cluster.api.call("GET", f"{path}/running")
        # The running gang is untouched: same object, same version, same plan and status.
        assert after["metadata"]["uid"] == running["metadata"]["uid"]
        assert after["metadata"]["resourceVersion"] == running["metadata"]["resourceVersion"]
        assert after["spec"] == running["spec"] and after["status"] == running["status"]
        # The API server serves the new chart's schema.
        served = cluster.api.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}")
        shipped = next(d for d in yaml.safe_load_all((CHART / "crds" / f"{CRD}.yaml").read_text()) if d)
        assert _schemas(served) == _schemas(shipped)
        # And the objects added since the previous chart exist (the wake-up Role).
        roles = cluster.api.call("GET", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles")
        assert f"{RELEASE}-fabricsched-wakeup" in {r["metadata"]["name"] for r in roles["items"]}
    finally:
        helm.run("uninstall", RELEASE, *kube, check=False)


def _schemas(crd: dict[str, Any]) -> dict[str, Any]:
    return {v["name"]: v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"]}

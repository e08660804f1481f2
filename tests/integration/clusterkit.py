"""Helpers of the integration tests: the binaries check, the cluster handle, namespaces, the
node factory, and polling (``wait_for``, from ``waiting``).

A module of its own (not conftest) so test modules can import the types they annotate with.
"""

from __future__ import annotations

import datetime
import itertools
import os
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
from waiting import wait_for as wait_for

from fabricsched.cluster import binaries, controlplane, errors, kwok, nodes, rest, samples

GROUP_LABEL = "fabricsched.io/test-group"
"""Label ``node_factory`` puts on its nodes: select it to schedule onto this test's nodes only."""


def find_binaries_or_skip(needed_by: str = "integration tests") -> binaries.Binaries:
    """The built control plane binaries; without them the test skips naming ``make tools``,
    or fails under ``CI=true``, so a CI run can never pass by skipping everything."""
    try:
        return binaries.find()
    except errors.MissingBinaries as e:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and the control plane binaries are missing: {e}", pytrace=False)
        pytest.skip(f"{needed_by} need the control plane binaries; run `make tools`. ({e})")


@dataclass
class Cluster:
    plane: controlplane.ControlPlane
    api: rest.Client
    """Admin JSON client."""

    @property
    def dir(self) -> Path:
        return self.plane.dir

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this cluster; output captured as text."""
        argv = [str(self.plane.binaries.kubectl), f"--kubeconfig={self.kubeconfig}", *args]
        return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=60)


def stop_process(process: subprocess.Popen[Any], timeout: float = 15.0) -> None:
    """SIGTERM, and SIGKILL if it is still running after ``timeout`` s; returns once it is gone."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def new_namespace(api: rest.Client, prefix: str) -> str:
    """A fresh namespace whose default ServiceAccount exists (pods are admitted only then)."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    api.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    account = f"/api/v1/namespaces/{name}/serviceaccounts/default"
    wait_for(f"ServiceAccount {name}/default", lambda: api.request("GET", account)[0] == 200)
    return name


def create_nodes(api: rest.Client, manifests: Sequence[Mapping[str, Any]]) -> list[str]:
    """``nodes.create``, back once kwok holds the Lease of every new node.

    kwok plays a pod only on a node whose Lease it holds, and looks the Lease up in its own
    cache: a pod bound to a node whose Lease kwok had just created, but not yet seen come back,
    is skipped and nothing plays it later (kwok v0.8.0). Pods created after this are safe."""
    names = nodes.create(api, manifests, datetime.datetime.now(datetime.UTC))
    leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"

    def held() -> bool:
        items = api.call("GET", leases).get("items") or []
        return set(names) <= {i["metadata"]["name"] for i in items if i["spec"].get("holderIdentity")}
    wait_for("kwok to hold the new nodes' Leases", held)
    return names


class NodeFactory:
    """Creates GPU nodes with topograph leaf/spine labels and this test's group label.

    ``node_factory(3, gpus=4, leaf="l02")`` returns the three new names. Select
    ``{GROUP_LABEL: node_factory.group}`` to schedule onto this test's nodes only.
    """

    def __init__(self, api: rest.Client) -> None:
        self.api = api
        self.group = uuid.uuid4().hex[:8]
        self.created: list[str] = []
        self._serial = itertools.count(1)

    @property
    def selector(self) -> dict[str, str]:
        return {GROUP_LABEL: self.group}

    def __call__(self, count: int = 1, gpus: int = 8, *, leaf: str = "l01", spine: str = "s1",
                 labels: Mapping[str, str] | None = None) -> list[str]:
        manifests = []
        for _ in range(count):
            manifest = samples.sample_fabric(1, 1, 1, gpus=gpus)[0]
            name = f"n-{self.group}-{next(self._serial):03d}"
            manifest["metadata"]["name"] = name
            manifest["metadata"]["labels"].update({
                "kubernetes.io/hostname": name, samples.TOPOGRAPH.leaf: leaf,
                samples.TOPOGRAPH.spine: spine, GROUP_LABEL: self.group, **(labels or {}),
            })
            manifests.append(manifest)
        names = create_nodes(self.api, manifests)
        self.created.extend(names)
        return names


class Kubelet(Protocol):
    def __call__(self, namespace: str, name: str, phase: kwok.Phase) -> dict[str, Any]: ...


def install_crds(plane: controlplane.ControlPlane) -> None:
    """fabricsched's CRDs (``crds/``) applied to ``plane``, back once both are served."""
    crds = Path(__file__).resolve().parents[2] / "crds"
    subprocess.run([str(plane.binaries.kubectl), f"--kubeconfig={plane.kubeconfig}", "apply", "--server-side",
                    "-f", str(crds)], check=True, capture_output=True, timeout=60)
    api = plane.client()
    try:
        for crd in ("fabrictopologies", "fabricplacements"):
            wait_for(f"CRD {crd}",
                     lambda crd=crd: api.request("GET", f"/apis/fabricsched.io/v1alpha1/{crd}")[0] == 200)
    finally:
        api.close()

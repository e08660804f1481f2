"""Helpers of the integration tests: the cluster handle, node factory and polling.

A module of its own (not conftest) so test modules can import the types they annotate with.
"""

from __future__ import annotations

import datetime
import itertools
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from fabricsched.cluster import controlplane, nodes, rest, samples
from fabricsched.cluster import kubelet as stand_in_kubelet

GROUP_LABEL = "fabricsched.io/test-group"
"""Label ``node_factory`` puts on its nodes: select it to schedule onto this test's nodes only."""


@dataclass
class Cluster:
    plane: controlplane.ControlPlane
    api: rest.Client
    """Admin JSON client (also what the stand-in kubelet uses)."""

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


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2) -> Any:
    """Poll until ``check`` returns something truthy; fail the test naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}", pytrace=False)
        time.sleep(interval)


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
        names = nodes.create(self.api, manifests, datetime.datetime.now(datetime.UTC))
        self.created.extend(names)
        return names


class Kubelet(Protocol):
    def __call__(self, namespace: str, name: str, phase: stand_in_kubelet.Phase) -> dict[str, Any]: ...

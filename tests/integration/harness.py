"""A cluster with fabricsched running: the one bring-up of every integration test that needs the
fabricsched kube-scheduler calling a real extender.

``plane_with_fabricsched`` starts a control plane of its own (the session cluster has only the
default scheduler) with the second kube-scheduler from the shipped template, applies the CRDs
and makes the ``fabricsched run`` handle on free ports (the extender's port is chosen first: the
scheduler's configuration names it); the test adds nodes and topologies and starts the operator.
``fabric_cluster`` does all of it for the usual case: a sample fabric of kwok hosts (2 spines x
2 leaves x 4 hosts of 8 GPUs unless told otherwise) or the demo fabric, its FabricTopology, and
the operator started. Both tear down in reverse: operator, client, plane.

conftest.py's ``fabric`` and ``ns`` fixtures wrap ``fabric_cluster`` once per module (module
scope: a test module's tests share one control plane); modules whose fabric differs make their
own module fixture with it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from clusterkit import create_nodes, find_binaries_or_skip, install_crds, new_namespace, stop_process
from waiting import wait_for

from fabricsched.cluster import admission, commands, controlplane, kwok, processes, rest, samples

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = "ib-test"
GPU = "nvidia.com/gpu"
PLACEMENTS = "/apis/fabricsched.io/v1alpha1/namespaces/{ns}/fabricplacements"
TOPOLOGIES = "/apis/fabricsched.io/v1alpha1/fabrictopologies"
SAMPLE_SHAPE = (2, 2, 4)
"""Spines, leaves per spine, hosts per leaf of the usual sample fabric: 16 hosts of 8 GPUs."""


def trainer_spec(gpus: int) -> dict[str, Any]:
    """The pod spec of one training rank, scheduled by fabricsched."""
    return {
        "schedulerName": "fabricsched",
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "train",
                "image": "trainer:1",
                "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}},
            }
        ],
    }


class Operator:
    """``fabricsched run`` as a subprocess on known ports, restartable (the SIGKILL tests kill it).

    ``args`` are more flags (the list may grow before ``start``); with ``dashboard_port`` the
    fabric page is served too, at ``url``."""

    def __init__(self, kubeconfig: Path, log_dir: Path, extender_port: int, health_port: int,
                 args: Sequence[str] = (), dashboard_port: int | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.args = list(args)
        self.log_dir = log_dir
        self.extender_port, self.health_port = extender_port, health_port
        self.dashboard_port = dashboard_port
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = itertools.count(1)

    @property
    def extender_url(self) -> str:
        return f"http://127.0.0.1:{self.extender_port}"

    @property
    def url(self) -> str:
        """The fabric page's address."""
        assert self.dashboard_port is not None, "started without a dashboard port"
        return f"http://127.0.0.1:{self.dashboard_port}"

    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "fabricsched.cli", "run", f"--kubeconfig={self.kubeconfig}",
                f"--extender-address=127.0.0.1:{self.extender_port}",
                f"--health-address=127.0.0.1:{self.health_port}"]
        if self.dashboard_port is not None:
            argv.append(f"--dashboard-address=127.0.0.1:{self.dashboard_port}")
        return [*argv, *self.args]

    def start(self) -> None:
        path = self.log_dir / f"fabricsched-run-{next(self.starts)}.log"
        with path.open("wb") as log:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        wait_for("fabricsched run ready", self._ready, timeout=60)

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            pytest.fail(f"fabricsched run exited: {self.log_tail()}", pytrace=False)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as r:
                ready = r.status == 200
            with urllib.request.urlopen(f"{self.extender_url}/openapi.json", timeout=2) as r:
                return ready and r.status == 200
        except OSError:
            return False

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)

    def log_tail(self) -> str:
        logs = sorted(self.log_dir.glob("fabricsched-run-*.log"))
        return processes.log_tail(logs[-1], 40) if logs else ""


@contextlib.contextmanager
def running_operator(kubeconfig: Path, log_dir: Path, args: Sequence[str] = ()) -> Iterator[Operator]:
    """``fabricsched run`` on free ports, ready, until the block ends (for a cluster without the
    fabricsched scheduler: nothing calls its extender)."""
    extender_port, health_port = processes.free_ports(2)
    operator = Operator(kubeconfig, log_dir, extender_port, health_port, args)
    try:
        operator.start()
        yield operator
    finally:
        operator.stop()


class Fabric:
    """A cluster with fabricsched running: API client, the hosts' leaves and spines, the operator."""

    def __init__(self, plane: controlplane.ControlPlane, api: rest.Client, operator: Operator) -> None:
        self.plane, self.api, self.operator = plane, api, operator
        self.topology = TOPOLOGY
        """The FabricTopology the status checks read (the last one ``add_topology`` made)."""
        self.leaf_of: dict[str, str] = {}
        self.spine_of: dict[str, str] = {}

    def add_nodes(self, manifests: Sequence[dict[str, Any]]) -> list[str]:
        """kwok nodes from ``manifests`` (topograph leaf and spine labels), recorded by host."""
        for m in manifests:
            labels = m["metadata"]["labels"]
            self.leaf_of[m["metadata"]["name"]] = labels[samples.TOPOGRAPH.leaf]
            self.spine_of[m["metadata"]["name"]] = labels[samples.TOPOGRAPH.spine]
        return create_nodes(self.api, manifests)

    def add_topology(self, manifest: dict[str, Any]) -> None:
        self.api.call("POST", TOPOLOGIES, manifest)
        self.topology = manifest["metadata"]["name"]

    def namespace(self) -> str:
        return new_namespace(self.api, "x")

    def job(
        self,
        namespace: str,
        name: str,
        pods: int,
        gpus: int = 8,
        annotations: dict[str, str] | None = None,
        placement: dict[str, Any] | None = None,
    ) -> None:
        """An Indexed Job; ``placement`` is merged into the pod spec (nodeSelector, affinity)."""
        spec = {**trainer_spec(gpus), **(placement or {})}
        template = {"metadata": {"annotations": annotations or {}}, "spec": spec}
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "parallelism": pods,
                "completions": pods,
                "completionMode": "Indexed",
                "backoffLimit": 0,
                "template": template,
            },
        }
        self.api.call("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body)

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api.call("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
        return items

    def placed(self, namespace: str, job: str, pods: int) -> list[str]:
        """Nodes of the Job's pods by rank, once all are bound; marks them Running."""

        def bound() -> list[str] | None:
            found = {
                int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): p
                for p in self.pods(namespace)
                if p["metadata"]["labels"].get("job-name") == job
            }
            if len(found) < pods or not all(p["spec"].get("nodeName") for p in found.values()):
                return None
            for p in found.values():
                if p["status"].get("phase") == "Pending":
                    kwok.finish(self.api, namespace, p["metadata"]["name"], "Running")
            return [found[r]["spec"]["nodeName"] for r in range(pods)]

        result: list[str] = wait_for(f"{pods} pods of {namespace}/{job} bound", bound, timeout=60)
        return result

    def placement(self, namespace: str, name: str) -> dict[str, Any] | None:
        status, body = self.api.request("GET", PLACEMENTS.format(ns=namespace) + f"/{name}")
        return body if status == 200 else None

    def topology_status(self) -> dict[str, Any]:
        found: dict[str, Any] = self.api.call("GET", f"{TOPOLOGIES}/{self.topology}").get("status") or {}
        return found

    def settled(self) -> bool:
        """Every GPU free, none reserved, every element healthy: what the topology's status
        shows once the extender has let go of the last test's gangs (it counts reserved GPUs
        as taken) and the operator has applied the last health change."""
        status = self.topology_status()
        gpus = status.get("gpus") or {}
        return bool(gpus.get("total")) and gpus.get("free") == gpus["total"] and not status.get("degraded")

    def unhealthy(self, kind: str, name: str) -> bool:
        """The topology's status lists the node (kind node) or domain (kind domain): the state
        the extender decides on has the change (the status is computed from that state)."""
        key = "node" if kind == "node" else "domain"
        records = self.topology_status().get("degraded", [])
        return any(r.get("kind") == kind and r.get(key) == name for r in records)

    def label_health(self, node: str, state: str | None) -> None:
        patch = {"metadata": {"labels": {"fabricsched.io/fabric-health": state}}}
        self.api.call("PATCH", f"/api/v1/nodes/{node}", patch, rest.MERGE_PATCH)

    def set_links(self, links: list[dict[str, Any]]) -> None:
        self.api.call("PATCH", f"{TOPOLOGIES}/{self.topology}", {"spec": {"links": links}}, rest.MERGE_PATCH)

    def clean(self, namespace: str) -> None:
        self.api.request(
            "DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs", {"propagationPolicy": "Background"}
        )
        for pod in self.pods(namespace):  # at once, as a kubelet confirming the kill would
            kwok.delete_now(self.api, namespace, pod["metadata"]["name"])
        self.api.request("DELETE", f"/api/v1/namespaces/{namespace}")

    def release(self, namespace: str, timeout: float = 60.0) -> None:
        """``namespace`` cleaned, its pods gone, and the fabric settled: the next test starts
        with every GPU free, no reservation left and a healthy fabric."""
        self.clean(namespace)
        wait_for("pods gone", lambda: not self.pods(namespace), timeout=60)
        wait_for("every GPU free and healthy in the topology's status", self.settled, timeout=timeout)


F = TypeVar("F", bound=Fabric)


def leaf_changes(fabric: Fabric, placed: list[str]) -> int:
    """How often consecutive ranks change leaf."""
    return sum(1 for a, b in itertools.pairwise(placed) if fabric.leaf_of[a] != fabric.leaf_of[b])


@contextlib.contextmanager
def plane_with_fabricsched(
    root: Path,
    operator_args: Sequence[str] = (),
    dashboard: bool = False,
    kind: Callable[[controlplane.ControlPlane, rest.Client, Operator], F] = Fabric,  # type: ignore[assignment]
    dra: bool = False,
) -> Iterator[F]:
    """A control plane with the fabricsched kube-scheduler and fabricsched's CRDs, no node yet,
    the operator made (not started) with ``operator_args``; ``kind`` builds the handle; with
    ``dra``, the scheduler lists no managedResources (every pod reaches the extender)."""
    find_binaries_or_skip()
    ports = processes.free_ports(3 if dashboard else 2)
    extender_port, health_port = ports[:2]
    scheduler = commands.fabricsched_scheduler(f"http://127.0.0.1:{extender_port}", dra=dra)
    plane = controlplane.up(root / "cluster", extra_schedulers=[scheduler])
    api = plane.client()
    operator = Operator(plane.kubeconfig, root, extender_port, health_port, operator_args,
                        ports[2] if dashboard else None)
    try:
        install_crds(plane)
        yield kind(plane, api, operator)
    finally:
        operator.stop()
        api.close()
        plane.down()


@contextlib.contextmanager
def fabric_cluster(
    root: Path,
    operator_args: Sequence[str] = (),
    *,
    shape: tuple[int, int, int] = SAMPLE_SHAPE,
    demo: bool = False,
    topology: str = TOPOLOGY,
    recover_after_s: int | None = 0,
    dashboard: bool = False,
    kind: Callable[[controlplane.ControlPlane, rest.Client, Operator], F] = Fabric,  # type: ignore[assignment]
    webhook: bool = False,
) -> Iterator[F]:
    """``plane_with_fabricsched`` with its fabric and the operator running: the sample fabric of
    ``shape`` (links all healthy) or, with ``demo``, the demo fabric with its degraded links; the
    FabricTopology ``topology`` over it, ``recoverAfterSeconds`` set unless None; with
    ``webhook``, the namespace opt-in webhook registered (``cluster up``'s way, on a free
    loopback port) and served by the operator."""
    with plane_with_fabricsched(root, operator_args, dashboard, kind) as fabric:
        spines, leaves, hosts = shape
        fabric.add_nodes(samples.demo_nodes() if demo
                         else samples.sample_fabric(spines=spines, leaves_per_spine=leaves,
                                                    hosts_per_leaf=hosts, gpus=8))
        manifest = samples.demo_topology(topology)
        if not demo:
            manifest["spec"]["links"] = []
        if recover_after_s is not None:
            manifest["spec"]["health"] = {"recoverAfterSeconds": recover_after_s}
        fabric.add_topology(manifest)
        if webhook:
            url = f"https://127.0.0.1:{processes.free_ports(1)[0]}"
            fabric.operator.args += admission.register(fabric.plane.dir, fabric.api, url).run_flags()
        fabric.operator.start()
        yield fabric

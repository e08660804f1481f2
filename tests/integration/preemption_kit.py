"""The preemption tests' cluster: the control plane with fabricsched's scheduler, the CRDs, 16
kwok hosts of 8 GPUs (2 spines x 2 leaves x 4 hosts), PriorityClasses and ``fabricsched run``.

Workloads are Indexed Jobs run by the real Job controller; an evicted pod is replaced (the
Job's ``podFailurePolicy`` ignores ``DisruptionTarget``, as docs/preemption.md advises).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clusterkit import create_nodes, find_binaries_or_skip, new_namespace, stop_process
from waiting import wait_for

from fabricsched.cluster import commands, controlplane, kwok, processes, rest, samples

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = "ib-preempt"
GPU = "nvidia.com/gpu"
CLASSES = {"low": (100, "PreemptLowerPriority"), "mid": (500, "PreemptLowerPriority"),
           "high": (1000, "PreemptLowerPriority"), "polite": (1000, "Never")}


class Fabric:
    """The module's cluster: API client, node layout, the ``fabricsched run`` process."""

    def __init__(self, plane: controlplane.ControlPlane, api: rest.Client, root: Path, ports: tuple[int, int],
                 leaf_of: dict[str, str]) -> None:
        self.plane, self.api, self.root, self.leaf_of = plane, api, root, leaf_of
        self.extender_port, self.health_port = ports
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.terminating_since: dict[str, float] = {}
        """Pod UID -> when ``terminate`` first saw it terminating (its grace period runs from then)."""
        self.disruptions: dict[str, str] = {}
        """Pod UID -> the reason of its DisruptionTarget condition, for every pod seen terminating."""

    # --- fabricsched run ---------------------------------------------------------------

    def start(self, *extra: str) -> None:
        """The module's ``fabricsched run`` (``extra``: more flags, for one test)."""
        self.process = self.spawn(self.extender_port, self.health_port, *extra)
        self.ready(self.process, self.health_port)

    def spawn(self, extender_port: int, health_port: int, *extra: str,
              pod_name: str = "") -> subprocess.Popen[bytes]:
        """One ``fabricsched run`` on these loopback ports (``pod_name``: a replica's identity)."""
        self.starts += 1
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **({"POD_NAME": pod_name} if pod_name else {})}
        with (self.root / f"fabricsched-run-{self.starts}.log").open("wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "fabricsched.cli", "run", f"--kubeconfig={self.plane.kubeconfig}",
                 f"--extender-address=127.0.0.1:{extender_port}",
                 f"--health-address=127.0.0.1:{health_port}", "--dashboard-address=", *extra],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )

    def _ready(self, process: subprocess.Popen[bytes] | None, health_port: int) -> bool:
        assert process is not None
        if process.poll() is not None:
            pytest.fail(f"fabricsched run exited: {self.log_tail()}", pytrace=False)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def ready(self, process: subprocess.Popen[bytes], health_port: int) -> None:
        wait_for("fabricsched run ready", lambda: self._ready(process, health_port), timeout=60)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)

    def lease_holder(self) -> str:
        """Who holds fabricsched's Lease (``--leader-elect``); empty before anyone does."""
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/fabricsched"
        status, body = self.api.request("GET", path)
        return str((body.get("spec") or {}).get("holderIdentity") or "") if status == 200 else ""

    def log_tail(self) -> str:
        return processes.log_tail(self.root / f"fabricsched-run-{self.starts}.log", 40)

    def api_waits_ms(self) -> list[float]:
        """Of each decision the running process logged, the milliseconds it waited for the API
        (budgets and namespace labels)."""
        text = (self.root / f"fabricsched-run-{self.starts}.log").read_text(errors="replace")
        return [float(m) for m in re.findall(r"ms, ([0-9.]+) of them waiting for the API[;)]", text)]

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))

    # --- workloads ---------------------------------------------------------------------

    def namespace(self) -> str:
        return new_namespace(self.api, "p")

    def job(self, namespace: str, name: str, pods: int, gpus: int = 8, priority: str = "low",
            leaf: str | None = None, grace: int = 0) -> None:
        """An Indexed Job of ``pods`` ranks; ``leaf``: a required-tier gang (one leaf); ``grace``:
        its pods' termination grace period (a trainer checkpointing before it stops)."""
        annotations = {"fabricsched.io/required-tier": "leaf"} if leaf else {}
        spec = {
            "schedulerName": "fabricsched", "restartPolicy": "Never", "priorityClassName": f"pt-{priority}",
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "train", "image": "trainer:1",
                            "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}],
        }
        body = {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {
                "parallelism": pods, "completions": pods, "completionMode": "Indexed", "backoffLimit": 6,
                "podFailurePolicy": {"rules": [{"action": "Ignore",
                                                "onPodConditions": [{"type": "DisruptionTarget"}]}]},
                # ``app``: a label no gang convention reads, as budgets usually select on.
                "template": {"metadata": {"labels": {"app": name}, "annotations": annotations}, "spec": spec},
            },
        }
        self.api.call("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body)

    def gang_pod(self, namespace: str, gang: str, rank: int, size: int, gated: bool) -> None:
        """Rank ``rank`` of a low-priority required-leaf gang named by label; ``gated``: held back
        by a scheduling gate (it cannot bind yet)."""
        spec: dict[str, Any] = {
            "schedulerName": "fabricsched", "restartPolicy": "Never", "priorityClassName": "pt-low",
            "containers": [{"name": "train", "image": "trainer:1",
                            "resources": {"requests": {GPU: "8"}, "limits": {GPU: "8"}}}]}
        if gated:
            spec["schedulingGates"] = [{"name": "fabricsched.io/test-hold"}]
        self.api.call("POST", f"/api/v1/namespaces/{namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{gang}-{rank}", "labels": {"fabricsched.io/gang": gang},
                         "annotations": {"fabricsched.io/gang-size": str(size),
                                         "fabricsched.io/rank": str(rank),
                                         "fabricsched.io/required-tier": "leaf"}},
            "spec": spec})

    def budget(self, namespace: str, job: str, min_available: int) -> None:
        """A PodDisruptionBudget over the Job's pods by their ``app`` label (no gang convention
        reads it), once the disruption controller has read it
        (``minAvailable``: the controller computes ``maxUnavailable`` only for scalable owners,
        which a Job is not)."""
        path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
        self.api.call("POST", path, {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": job},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": job}}}})

        def current() -> bool:
            found = self.api.call("GET", f"{path}/{job}")
            return bool(found.get("status", {}).get("observedGeneration") == found["metadata"]["generation"])

        wait_for(f"PodDisruptionBudget {job} observed", current)

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api.call("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
        return items

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return [p for p in self.pods(namespace) if (p["metadata"].get("labels") or {}).get("job-name") == job
                and not p["metadata"].get("deletionTimestamp")]

    def placed(self, namespace: str, job: str, pods: int, timeout: float = 60) -> list[str]:
        """Nodes of the Job's pods by rank, once all are bound; marks them Running."""

        def bound() -> list[str] | None:
            self.terminate(namespace)
            found = {int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): p
                     for p in self.job_pods(namespace, job)}
            if len(found) < pods or not all(p["spec"].get("nodeName") for p in found.values()):
                return None
            for p in found.values():
                if p["status"].get("phase") == "Pending":
                    kwok.finish(self.api, namespace, p["metadata"]["name"], "Running")
            return [found[r]["spec"]["nodeName"] for r in range(pods)]

        result: list[str] = wait_for(f"{pods} pods of {namespace}/{job} bound", bound, timeout=timeout)
        return result

    def terminate(self, namespace: str) -> int:
        """Play the kubelet for evicted pods: once its termination grace period has run (from
        when it was first seen terminating), a terminating pod's containers stop (phase Failed,
        so the Job controller drops its finalizer) and it is removed. kwok's own delete stage
        cannot do this: the Job's finalizer keeps the pod until it has ended. Returns how many."""
        ended = 0
        now = time.monotonic()
        for pod in self.pods(namespace):
            name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
            ended_already = pod["status"].get("phase") in ("Succeeded", "Failed")
            if not pod["metadata"].get("deletionTimestamp") or ended_already:
                continue
            for condition in pod["status"].get("conditions") or ():
                if condition.get("type") == "DisruptionTarget":
                    self.disruptions[uid] = str(condition.get("reason"))
            since = self.terminating_since.setdefault(uid, now)
            if now - since < int(pod["spec"].get("terminationGracePeriodSeconds") or 0):
                continue
            self.api.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                             {"status": {"phase": "Failed"}}, rest.MERGE_PATCH)
            kwok.delete_now(self.api, namespace, name)
            ended += 1
        return ended

    def pod_group(self, namespace: str, name: str, pods: int, priority: str) -> None:
        """A native gang (scheduling.k8s.io/v1beta1 PodGroup of ``minCount`` ``pods``) of the
        class ``pt-<priority>``, and its pods of 8 GPUs naming it."""
        path = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{namespace}/podgroups"
        self.api.call("POST", path, {
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": name},
            "spec": {"priorityClassName": f"pt-{priority}",
                     "schedulingPolicy": {"gang": {"minCount": pods}}}})
        for i in range(pods):
            spec = {"schedulerName": "fabricsched", "restartPolicy": "Never",
                    "priorityClassName": f"pt-{priority}", "schedulingGroup": {"podGroupName": name},
                    "containers": [{"name": "train", "image": "trainer:1",
                                    "resources": {"requests": {GPU: "8"}, "limits": {GPU: "8"}}}]}
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-{i}"}, "spec": spec}
            self.api.call("POST", f"/api/v1/namespaces/{namespace}/pods", pod)

    def uids(self, namespace: str, job: str) -> set[str]:
        return {p["metadata"]["uid"] for p in self.job_pods(namespace, job) if p["spec"].get("nodeName")}

    def placement(self, namespace: str, name: str) -> dict[str, Any] | None:
        status, body = self.api.request(
            "GET", f"/apis/fabricsched.io/v1alpha1/namespaces/{namespace}/fabricplacements/{name}")
        return body if status == 200 else None

    def events(self, namespace: str, reason: str) -> list[dict[str, Any]]:
        items = self.api.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
        return [e for e in items if e.get("reason") == reason]

    def overcommitted(self) -> dict[str, int]:
        """Nodes whose bound live pods ask for more GPUs than the node has (must stay empty)."""
        used: dict[str, int] = {}
        for pod in self.api.call("GET", "/api/v1/pods")["items"]:
            node = pod["spec"].get("nodeName")
            if not node or pod["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            for c in pod["spec"]["containers"]:
                requests = c.get("resources", {}).get("requests") or {}
                used[node] = used.get(node, 0) + int(requests.get(GPU, 0))
        return {n: g for n, g in used.items() if g > 8}

    def explain(self, namespace: str, job: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "fabricsched.cli", "explain", f"--kubeconfig={self.plane.kubeconfig}",
             f"{namespace}/{job}", "-o", "json"],
            capture_output=True, text=True, timeout=60, env={**os.environ},
        )
        assert done.returncode == 0, done.stderr
        found: dict[str, Any] = json.loads(done.stdout)
        return found

    def clean(self, namespace: str) -> None:
        self.api.request("DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs",
                         {"propagationPolicy": "Background"})
        for pod in self.pods(namespace):
            kwok.delete_now(self.api, namespace, pod["metadata"]["name"])
        self.api.request("DELETE", f"/api/v1/namespaces/{namespace}")
        wait_for("pods gone", lambda: not self.pods(namespace), timeout=60)


@contextlib.contextmanager
def preemption_cluster(root: Path) -> Iterator[Fabric]:
    find_binaries_or_skip()
    ports = processes.free_ports(2)
    scheduler = commands.fabricsched_scheduler(f"http://127.0.0.1:{ports[0]}")
    plane = controlplane.up(root / "cluster", extra_schedulers=[scheduler])
    api = plane.client()
    fabric: Fabric | None = None
    try:
        subprocess.run([str(plane.binaries.kubectl), f"--kubeconfig={plane.kubeconfig}", "apply",
                        "--server-side", "-f", str(REPO / "crds")],
                       check=True, capture_output=True, timeout=60)
        for crd in ("fabrictopologies", "fabricplacements"):
            wait_for(f"CRD {crd}", lambda crd=crd: api.request(
                "GET", f"/apis/fabricsched.io/v1alpha1/{crd}")[0] == 200)
        for name, (value, policy) in CLASSES.items():
            api.call("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": f"pt-{name}"}, "value": value, "preemptionPolicy": policy})
        manifests = samples.sample_fabric(spines=2, leaves_per_spine=2, hosts_per_leaf=4, gpus=8)
        create_nodes(api, manifests)
        topology = samples.demo_topology(TOPOLOGY)
        topology["spec"]["links"] = []
        api.call("POST", "/apis/fabricsched.io/v1alpha1/fabrictopologies", topology)
        leaf_of = {m["metadata"]["name"]: m["metadata"]["labels"][samples.TOPOGRAPH.leaf] for m in manifests}
        fabric = Fabric(plane, api, root, ports, leaf_of)
        fabric.start()
        yield fabric
    finally:
        if fabric is not None:
            fabric.stop()
        api.close()
        plane.down()

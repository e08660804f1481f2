"""Helpers of test_untrusted_inputs.py: hostile DRA objects, JobSet ranks and gates, and counting
what fabricsched writes (Events and status writes) while a test runs.

``WriteCounter`` watches FabricPlacements of one namespace and the FabricTopologies with the
kubernetes client in a thread and counts every ADDED/MODIFIED it sees per object: each is one
write the API server accepted (a watch sees every resourceVersion of an object, unlike polling).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from typing import Any

from harness import GPU, Fabric

from fabricsched.cluster import rest

RESOURCE = "/apis/resource.k8s.io/v1"
GROUP, VERSION = "fabricsched.io", "v1alpha1"
HOLD = "fabricsched.io/test-hold"
GPUS_PER_NODE = 8


def strings(value: object) -> Iterator[str]:
    """Every string in a JSON document, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def admitted(fabric: Fabric, path: str, body: dict[str, Any]) -> str:
    """The API server's answer to ``body`` under ``dryRun=All`` (validated, never stored):
    ``admitted`` or the start of its refusal."""
    status, answer = fabric.api.request("POST", f"{path}?dryRun=All", body)
    if status == 201:
        return "admitted"
    message = answer.get("message", "") if isinstance(answer, dict) else str(answer)
    return f"{status}: {message[-160:]}"


def rule(name: str, pool: str, device: str, key: str, value: str, effect: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": name},
            "spec": {"deviceSelector": {"driver": "dra.net", "pool": pool, "device": device},
                     "taint": {"key": key, "value": value, "effect": effect}}}


def nic(name: str, rdma: str, taints: list[dict[str, str]]) -> dict[str, Any]:
    attributes = {"dra.net/rdmaDevice": {"string": rdma}, "dra.net/rdma": {"bool": True}}
    return {"name": name, "attributes": attributes, "taints": taints}


def nic_slice(node: str, rdma: str, taints: list[dict[str, str]], more: int = 0,
              more_taints: int = 0) -> dict[str, Any]:
    """One RDMA NIC of ``node`` as DRANET publishes it, its name ``rdma``, tainted with ``taints``;
    and ``more`` devices all claiming to be NIC ``mlx5_0``, each with ``more_taints`` taints."""
    devices = [nic("pci-0000-1a-00-0", rdma, taints)] + [
        nic(f"pci-0000-{i:02x}-00-1", "mlx5_0",
            [{"key": f"example.com/t{t}", "value": "x", "effect": "NoSchedule"} for t in range(more_taints)])
        for i in range(more)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-dra.net"},
            "spec": {"driver": "dra.net", "nodeName": node, "devices": devices,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}}


def gpus_on_nodes(fabric: Fabric) -> dict[str, int]:
    """GPUs requested by live bound pods, per node, across the cluster."""
    used: dict[str, int] = {}
    for pod in fabric.api.call("GET", "/api/v1/pods")["items"]:
        node = pod["spec"].get("nodeName")
        if not node or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        for container in pod["spec"]["containers"]:
            used[node] = used.get(node, 0) + int(
                (container.get("resources") or {}).get("requests", {}).get(GPU, "0"))
    return used


def overcommitted(fabric: Fabric) -> dict[str, int]:
    return {node: gpus for node, gpus in gpus_on_nodes(fabric).items() if gpus > GPUS_PER_NODE}


def ungate(fabric: Fabric, namespace: str, pod: str) -> None:
    fabric.api.call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{pod}",
                    [{"op": "remove", "path": "/spec/schedulingGates"}], "application/json-patch+json")


def fail(fabric: Fabric, namespace: str, pod: str) -> None:
    """The pod's container exited 1, as a kubelet reports it."""
    fabric.api.call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{pod}/status",
                    {"status": {"phase": "Failed"}}, rest.MERGE_PATCH)


def operator_events(fabric: Fabric, namespace: str) -> list[dict[str, Any]]:
    """The Events ``fabricsched run`` posted in ``namespace`` (not its kube-scheduler's)."""
    items = fabric.api.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    return [e for e in items if e.get("reportingInstance") == "fabricsched"]


class WriteCounter:
    """Counts writes to the FabricPlacements of ``namespace`` and to every FabricTopology."""

    def __init__(self, fabric: Fabric, namespace: str) -> None:
        from kubernetes import client, config, watch

        self._api = config.new_client_from_config(config_file=str(fabric.plane.kubeconfig))  # type: ignore[no-untyped-call]
        self._objects = client.CustomObjectsApi(self._api)
        self._watch = watch
        self.namespace = namespace
        self.writes: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._follow, args=(plural,), daemon=True)
                         for plural in ("fabricplacements", "fabrictopologies")]
        self._started = threading.Barrier(3)

    def __enter__(self) -> WriteCounter:
        for thread in self._threads:
            thread.start()
        self._started.wait(30)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)
        self._api.close()

    def count(self, plural: str) -> int:
        with self._lock:
            return sum(n for key, n in self.writes.items() if key.startswith(f"{plural}/"))

    def _follow(self, plural: str) -> None:
        if plural == "fabricplacements":
            listed = self._objects.list_namespaced_custom_object(GROUP, VERSION, self.namespace, plural)
        else:
            listed = self._objects.list_cluster_custom_object(GROUP, VERSION, plural)
        version = listed["metadata"]["resourceVersion"]
        self._started.wait(30)
        while not self._stop.is_set():
            stream = self._watch.Watch()
            kwargs: dict[str, Any] = {"resource_version": version, "timeout_seconds": 2,
                                      "allow_watch_bookmarks": True}
            if plural == "fabricplacements":
                events = stream.stream(self._objects.list_namespaced_custom_object, GROUP, VERSION,
                                       self.namespace, plural, **kwargs)
            else:
                events = stream.stream(self._objects.list_cluster_custom_object, GROUP, VERSION,
                                       plural, **kwargs)
            for event in events:
                version = event["object"]["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED"):
                    with self._lock:
                        self.writes[f"{plural}/{event['object']['metadata']['name']}"] += 1
                if self._stop.is_set():
                    stream.stop()

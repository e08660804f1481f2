"""Helpers of the placement-constraint tests (issue 31): the extender's cluster and the
workloads that ask for constraints.

The cluster is the extender tests' (``fabric_cluster``: the 1.37 control plane with the
fabricsched kube-scheduler, ``fabricsched run`` and 16 kwok hosts of 8 GPUs, 2 spines x 2
leaves x 4 hosts); this is the one place that imports it, so a move of that harness is one line.
"""

from __future__ import annotations

from typing import Any

from harness import PLACEMENTS, Fabric, fabric_cluster, trainer_spec
from waiting import wait_for

from fabricsched.cluster import kwok, samples

__all__ = ["LEAF_LABEL", "Fabric", "bound", "fabric_cluster", "jobset", "placement", "pod_group",
           "scheduling_message"]

LEAF_LABEL = samples.TOPOGRAPH.leaf
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
PODGROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups"


def jobset(fabric: Fabric, namespace: str, name: str, jobs: int, pods: int, gpus: int,
           annotations: dict[str, str]) -> None:
    """A JobSet of ``jobs`` Indexed Jobs of ``pods`` pods, its pod template annotated."""
    job = {"parallelism": pods, "completions": pods, "completionMode": "Indexed", "backoffLimit": 0,
           "template": {"metadata": {"annotations": annotations}, "spec": trainer_spec(gpus)}}
    body = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"replicatedJobs": [{"name": "node", "replicas": jobs, "template": {"spec": job}}]}}
    fabric.api.call("POST", JOBSETS.format(ns=namespace), body)


def pod_group(fabric: Fabric, namespace: str, name: str, pods: int, gpus: int, key: str) -> None:
    """A gang PodGroup whose ``schedulingConstraints.topology[0].key`` is ``key``, and its pods
    (``name-0``...) naming it, as a workload controller makes them."""
    body = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": name},
            "spec": {"schedulingPolicy": {"gang": {"minCount": pods}},
                     "schedulingConstraints": {"topology": [{"key": key}]}}}
    created = fabric.api.call("POST", PODGROUPS.format(ns=namespace), body)
    # With the gate off the API server drops the field silently: the test would prove nothing.
    assert created["spec"]["schedulingConstraints"]["topology"] == [{"key": key}], created["spec"]
    for i in range(pods):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-{i}"},
               "spec": {**trainer_spec(gpus), "schedulingGroup": {"podGroupName": name}}}
        fabric.api.call("POST", f"/api/v1/namespaces/{namespace}/pods", pod)


def bound(fabric: Fabric, namespace: str, count: int, rank: Any) -> list[dict[str, Any]]:
    """The ``count`` pods ``rank(pod)`` ranks, by rank, once all are bound (marked Running)."""

    def ready() -> list[dict[str, Any]] | None:
        found = {r: p for p in fabric.pods(namespace) if (r := rank(p)) is not None}
        if len(found) < count or not all(p["spec"].get("nodeName") for p in found.values()):
            return None
        for pod in found.values():
            if pod["status"].get("phase") == "Pending":
                kwok.finish(fabric.api, namespace, pod["metadata"]["name"], "Running")
        return [found[r] for r in sorted(found)]

    placed: list[dict[str, Any]] = wait_for(f"{count} pods of {namespace} bound", ready, timeout=90)
    return placed


def placement(fabric: Fabric, namespace: str, name: str) -> dict[str, Any]:
    """The gang's FabricPlacement once Bound."""
    def bound_object() -> dict[str, Any] | None:
        status, body = fabric.api.request("GET", PLACEMENTS.format(ns=namespace) + f"/{name}")
        return body if status == 200 and (body.get("status") or {}).get("phase") == "Bound" else None

    found: dict[str, Any] = wait_for(f"FabricPlacement {namespace}/{name} Bound", bound_object, timeout=30)
    return found


def scheduling_message(fabric: Fabric, namespace: str, pod: str) -> str:
    """The pod's PodScheduled=False message: what `kubectl describe pod` shows."""
    found = fabric.api.call("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
    for condition in (found.get("status") or {}).get("conditions") or ():
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return str(condition.get("message", ""))
    return ""

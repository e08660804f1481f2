"""The demo's non-Job workload: a native PodGroup gang (Kubernetes 1.37 GenericWorkload).

Submits ``examples/workloads/podgroup.yaml`` (a Workload, its PodGroup and the pods that name
it) into the demo's namespace and waits until its FabricPlacement is Bound: the same manifest
a user applies with ``kubectl apply -n NAMESPACE -f``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from fabricsched.api import placement as placement_api
from fabricsched.cluster import errors, rest

PODGROUP_EXAMPLE = Path("examples/workloads/podgroup.yaml")
_PATHS = {
    "Workload": "/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/workloads",
    "PodGroup": "/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups",
    "Pod": "/api/v1/namespaces/{ns}/pods",
}


def run_pod_group(
    api: rest.Client, namespace: str, wait: Callable[[str, Callable[[], Any]], Any],
    example: Path = PODGROUP_EXAMPLE,
) -> dict[str, Any]:
    """Create the example's objects and return its Bound FabricPlacement (``wait`` polls)."""
    if not example.is_file():
        raise errors.ClusterError(f"{example} not found: run the demo from the repository root")
    group = ""
    for doc in yaml.safe_load_all(example.read_text(encoding="utf-8")):
        if not doc:
            continue
        kind = doc.get("kind")
        if kind not in _PATHS:
            raise errors.ClusterError(f"{example}: unexpected kind {kind!r}")
        if kind == "PodGroup":
            group = doc["metadata"]["name"]
        api.call("POST", _PATHS[kind].format(ns=namespace), doc)
    path = f"/apis/{placement_api.API_VERSION}/namespaces/{namespace}/{placement_api.PLURAL}/{group}"

    def bound() -> dict[str, Any] | None:
        status, body = api.request("GET", path)
        return body if status == 200 and (body.get("status") or {}).get("phase") == "Bound" else None

    found: dict[str, Any] = wait(f"the PodGroup {namespace}/{group} gang to be Bound", bound)

    def running() -> bool:
        pods = api.call("GET", _PATHS["Pod"].format(ns=namespace))["items"]
        members = [p for p in pods if (p["spec"].get("schedulingGroup") or {}).get("podGroupName") == group]
        return bool(members) and all(p["status"].get("phase") == "Running" for p in members)

    wait(f"the pods of PodGroup {namespace}/{group} to run", running)
    return found

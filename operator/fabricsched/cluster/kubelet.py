"""Plays the kubelet's part in tests and demos: there is no kubelet on this control plane.

Bound pods stay Pending until someone writes their status; this module writes what a
kubelet would (phase, conditions, container states) through the status subresource.
Note what else a missing kubelet means: deleting a bound, non-terminal pod leaves it
Terminating until it is deleted with grace period 0 (``force_delete``).
"""

from __future__ import annotations

import datetime
from typing import Any, Literal

from fabricsched.cluster import errors, rest

Phase = Literal["Running", "Succeeded", "Failed"]


def _stamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _container_state(phase: Phase, stamp: str, exit_code: int) -> dict[str, Any]:
    if phase == "Running":
        return {"running": {"startedAt": stamp}}
    return {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                           "startedAt": stamp, "finishedAt": stamp}}


def pod_status(pod: dict[str, Any], phase: Phase, now: datetime.datetime,
               exit_code: int | None = None) -> dict[str, Any]:
    """The status a kubelet would report for ``pod`` in ``phase``."""
    stamp = _stamp(now)
    code = exit_code if exit_code is not None else (1 if phase == "Failed" else 0)
    running = phase == "Running"
    ready = "True" if running else "False"
    containers = [
        {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": running,
         "restartCount": 0, "started": running, "state": _container_state(phase, stamp, code)}
        for c in pod["spec"].get("containers", [])
    ]
    return {
        "phase": phase,
        "startTime": (pod.get("status") or {}).get("startTime", stamp),
        "hostIP": "127.0.0.1",
        "podIP": "127.0.0.1",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp},
            {"type": "Initialized", "status": "True", "lastTransitionTime": stamp},
            {"type": "ContainersReady", "status": ready, "lastTransitionTime": stamp},
            {"type": "Ready", "status": ready, "lastTransitionTime": stamp},
        ],
        "containerStatuses": containers,
    }


def set_pod_phase(api: rest.Client, namespace: str, name: str, phase: Phase,
                  now: datetime.datetime | None = None, exit_code: int | None = None) -> dict[str, Any]:
    """Mark a bound pod Running, Succeeded or Failed; returns the updated pod."""
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    pod = api.call("GET", path)
    if not pod["spec"].get("nodeName"):
        raise errors.ClusterError(
            f"pod {namespace}/{name} is not bound to a node: a kubelet would not run it")
    status = pod_status(pod, phase, now or datetime.datetime.now(datetime.UTC), exit_code)
    updated: dict[str, Any] = api.call("PATCH", f"{path}/status", {"status": status}, rest.MERGE_PATCH)
    return updated


def force_delete(api: rest.Client, namespace: str, name: str) -> None:
    """Delete a pod at once (grace period 0), as a kubelet confirming the kill would; gone is fine."""
    status, data = api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                               {"gracePeriodSeconds": 0})
    if status >= 400 and status != 404:
        raise errors.ApiError("DELETE", f"pods/{namespace}/{name}", status, str(data))

"""kwok plays every node's kubelet: node leases and heartbeats, pod status.

Configuration, all of it here (kwok reads nothing else: ``KWOK_WORKDIR`` points into the
cluster folder, so a ``~/.kwok/kwok.yaml`` of the user is never loaded, and every option kwok
would otherwise take from there or from its own defaults is set explicitly):
- every node is managed; the Lease of each node is renewed (``nodeLeaseDurationSeconds``), and
  the Ready condition's ``lastHeartbeatTime`` refreshed every 5 minutes on average (as a kubelet does),
  while every condition keeps the status its creator declared (tests and the demo set node
  health on purpose);
- a bound pod goes Running and stays Running until it is deleted;
- completion is opt-in per pod: annotate it ``fabricsched.io/kwok-finish: Succeeded`` (exit 0)
  or ``Failed`` (exit 1). kwok's own stage set would finish every Job pod at once, which would
  end a gang before its placement could be looked at;
- a deleted pod is removed at once, as a kubelet confirming the kill would.
kwok serves only ``/healthz`` (and nothing of its debugging API) on a loopback port, and talks
only to the local API server through its own kubeconfig.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

import yaml

from fabricsched.cluster import errors, rest

FINISH_ANNOTATION = "fabricsched.io/kwok-finish"
"""Set to ``Succeeded`` or ``Failed`` on a Running pod: kwok ends its containers that way."""
Phase = Literal["Running", "Succeeded", "Failed"]
FINISHED: tuple[Phase, ...] = ("Succeeded", "Failed")
NUDGE_ANNOTATION = "fabricsched.io/kwok-nudge"
"""Set by ``wait_phase`` on a bound pod kwok left Pending: the event makes kwok look again."""
NUDGE_AFTER = 5.0

POD_CIDR = "10.244.0.0/16"
"""Pod IPs kwok hands out; apart from the Service range."""
NODE_LEASE_SECONDS = 40
HEARTBEAT_MS = 300_000
"""How often, on average, a node's status is written when nothing changed: the kubelet's
default ``nodeStatusReportFrequency`` (5 min; its Lease says it is alive in between). Every node
status write reaches every watcher of nodes (both schedulers, the controller manager,
fabricsched): every 20 s at 10,000 nodes that was about 450 writes a second, which kept the API
server busy and the process parsing them."""
HEARTBEAT_SPREAD_MS = (HEARTBEAT_MS // 2, HEARTBEAT_MS * 3 // 2)
"""Each report comes after a time drawn uniformly from this range (2.5 to 7.5 min). Nodes
created together (a whole cluster at once) must not report together, as kubelets started at
different times do not: with 10 % of spread, 10,000 nodes wrote their status within 30 s of
each other every 5 minutes, 330 writes a second that stalled whatever ran then."""

_NOT_DELETED = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}


def _stage(name: str, kind: str, expressions: list[dict[str, Any]], nxt: dict[str, Any],
           delay_ms: tuple[int, int] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceRef": {"apiGroup": "v1", "kind": kind},
                            "selector": {"matchExpressions": expressions}, "next": nxt}
    if delay_ms is not None:
        # kwok waits a time drawn uniformly between the duration and the "jitter" duration.
        shortest, longest = delay_ms
        spec["delay"] = {"durationMilliseconds": shortest, "jitterDurationMilliseconds": longest}
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name},
            "spec": spec}


# Status templates are kwok's Go templates; the patch is a strategic merge, so a condition
# list entry updates only the condition of that type.
_HEARTBEAT = """\
conditions:
- type: Ready
  lastHeartbeatTime: {{ Now | Quote }}
"""

_RUNNING = """\
{{ $now := Now }}
phase: Running
startTime: {{ $now | Quote }}
conditions:
- {type: PodScheduled, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  ready: true
  started: true
  restartCount: 0
  state: {running: {startedAt: {{ $now | Quote }}}}
{{ end }}
{{ with PodIPWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace }}
podIP: {{ . | Quote }}
podIPs: [{ip: {{ . | Quote }}}]
{{ end }}
"""

_FINISHED = """\
{{ $now := Now }}
phase: PHASE
conditions:
- {type: ContainersReady, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  ready: false
  started: false
  restartCount: 0
  state:
    terminated: {exitCode: EXIT_CODE, reason: REASON, finishedAt: {{ $now | Quote }}}
{{ end }}
"""


def stages() -> list[dict[str, Any]]:
    """The Stages kwok plays, in place of its default set."""
    finish = [
        _stage(f"pod-{phase.lower()}", "Pod", [
            _NOT_DELETED,
            {"key": ".status.phase", "operator": "In", "values": ["Running"]},
            {"key": f'.metadata.annotations["{FINISH_ANNOTATION}"]', "operator": "In", "values": [phase]},
        ], {"statusTemplate": _FINISHED.replace("PHASE", phase).replace("EXIT_CODE", str(code))
                              .replace("REASON", reason)})
        for phase, code, reason in (("Succeeded", 0, "Completed"), ("Failed", 1, "Error"))
    ]
    return [
        _stage("node-heartbeat", "Node", [
            {"key": '.status.conditions.[] | select( .type == "Ready" ) | .type', "operator": "In",
             "values": ["Ready"]},
        ], {"statusTemplate": _HEARTBEAT}, delay_ms=HEARTBEAT_SPREAD_MS),
        _stage("pod-running", "Pod", [
            _NOT_DELETED,
            {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
        ], {"statusTemplate": _RUNNING}),
        *finish,
        _stage("pod-delete", "Pod", [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
               {"delete": True}),
    ]


def configuration(server_address: str, lease_seconds: int = NODE_LEASE_SECONDS) -> list[dict[str, Any]]:
    """The KwokConfiguration (every option kwok reads, explicit) and the Stages."""
    options = {
        "manageAllNodes": True,
        "cidr": POD_CIDR,
        "nodeIP": "127.0.0.1",
        "nodeLeaseDurationSeconds": lease_seconds,
        "serverAddress": server_address,
        "enableDebuggingHandlers": False,
        "enableProfilingHandler": False,
        "enableContentionProfiling": False,
        "podPlayStageParallelism": 8,
        "nodePlayStageParallelism": 4,
        "nodeLeaseParallelism": 4,
    }
    config = {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
              "metadata": {"name": "fabricsched"}, "options": options}
    return [config, *stages()]


def write_configuration(path: Path, server_address: str, lease_seconds: int = NODE_LEASE_SECONDS) -> Path:
    documents = configuration(server_address, lease_seconds)
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False), encoding="utf-8")
    return path


def argv(binary: Path, config: Path, kubeconfig: Path) -> list[str]:
    # Flags repeat what matters from the file: kwok's own flag defaults would point it at
    # ~/.kube/config.
    return [str(binary), f"--config={config}", f"--kubeconfig={kubeconfig}", "--manage-all-nodes=true",
            "--v=WARN"]


def environment(workdir: Path) -> dict[str, str]:
    """``KWOK_WORKDIR``: where kwok looks for its default configuration (kept empty)."""
    return {"KWOK_WORKDIR": str(workdir)}


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def wait_phase(api: rest.Client, namespace: str, name: str, phase: Phase, timeout: float = 30.0,
               ) -> dict[str, Any]:
    """The pod once kwok reports ``phase``; ``ClusterError`` after ``timeout`` s.

    A pod still Pending ``NUDGE_AFTER`` s after it was bound is touched (an annotation that
    counts the touches): kwok skips a pod bound to a node whose Lease it created but had not
    yet seen come back in its own cache, and only a new event about the pod makes it look
    again (kwok v0.8.0)."""
    started = time.monotonic()
    deadline = started + timeout
    nudges = 0
    while True:
        pod: dict[str, Any] = api.call("GET", _pod_path(namespace, name))
        current = (pod.get("status") or {}).get("phase")
        if current == phase:
            return pod
        if current in FINISHED or time.monotonic() > deadline:
            raise errors.ClusterError(
                f"pod {namespace}/{name} is {current}, not {phase} after {timeout:.0f} s "
                f"(bound to {pod['spec'].get('nodeName') or 'no node'}; touched {nudges} times)")
        if (current == "Pending" and pod["spec"].get("nodeName")
                and time.monotonic() - started > NUDGE_AFTER * (nudges + 1)):
            nudges += 1
            api.call("PATCH", _pod_path(namespace, name),
                     {"metadata": {"annotations": {NUDGE_ANNOTATION: str(nudges)}}}, rest.MERGE_PATCH)
        time.sleep(0.1)


def finish(api: rest.Client, namespace: str, name: str, phase: Phase, timeout: float = 30.0,
           ) -> dict[str, Any]:
    """Bring a pod to ``phase``: Running is kwok's own doing once the pod is bound (wait for it);
    Succeeded or Failed are asked for with the finish annotation once it runs. Returns the pod;
    ``ClusterError`` naming its phase and node after ``timeout`` s."""
    pod: dict[str, Any] = api.call("GET", _pod_path(namespace, name))
    if (pod.get("status") or {}).get("phase") == phase:
        return pod
    # Waiting for Running covers a pod not bound yet: kwok runs it once it is.
    running = wait_phase(api, namespace, name, "Running", timeout)
    if phase == "Running":
        return running
    api.call("PATCH", _pod_path(namespace, name),
             {"metadata": {"annotations": {FINISH_ANNOTATION: phase}}}, rest.MERGE_PATCH)
    return wait_phase(api, namespace, name, phase, timeout)


def delete_now(api: rest.Client, namespace: str, name: str) -> None:
    """Delete a pod with grace period 0 (kwok confirms at once); already gone is fine."""
    status, data = api.request("DELETE", _pod_path(namespace, name), {"gracePeriodSeconds": 0})
    if status >= 400 and status != 404:
        raise errors.api_error("DELETE", f"pods/{namespace}/{name}", status, str(data)[:300])

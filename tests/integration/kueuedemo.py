"""The Kueue act: Kueue decides *whether* a JobSet starts, fabricsched *where* its pods go.

One story, told by ``make demo-kueue`` (hack/demo_kueue.py, on the demo's cluster) and checked
by tests/integration/test_kueue.py (on that module's cluster): two JobSets of 4 pods x 8 GPUs
go into one LocalQueue whose ClusterQueue holds GPU quota for one of them. Kueue admits the
first and fabricsched places it; the second stays suspended (its Kueue Workload without quota,
no pod, no FabricPlacement); the first's pods finish (kwok's finish annotation), Kueue admits
the second and fabricsched places it. Each step is printed as it is seen, the placements with
the demo's own report (``fabricsched.cluster.tour``).

The caller runs Kueue and the JobSet controller and makes the queues (``kueuekit``). Lives with
the test kits because Kueue's start-up does: the product's ``fabricsched demo`` ships no Kueue.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from waiting import holds_for, wait_for

from fabricsched.cluster import kwok, rest, tour

JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads"
PLACEMENTS = "/apis/fabricsched.io/v1alpha1/namespaces/{ns}/fabricplacements"
TOPOLOGIES = "/apis/fabricsched.io/v1alpha1/fabrictopologies"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
RANKS, GPUS = 4, 8
FIRST, SECOND = "first", "second"
MESSAGE_CHARS = 200
"""Kueue's condition messages are printed cut to this length."""


def jobset(name: str, queue: str) -> dict[str, Any]:
    """One training JobSet of RANKS pods x GPUS GPUs in LocalQueue ``queue``, scheduled by
    fabricsched (kwok runs the pods: the image never starts)."""
    pod = {"schedulerName": "fabricsched", "restartPolicy": "Never",
           "containers": [{"name": "train", "image": "busybox", "command": ["sleep", "3600"],
                           "resources": {"requests": {"nvidia.com/gpu": str(GPUS)},
                                         "limits": {"nvidia.com/gpu": str(GPUS)}}}]}
    job = {"parallelism": RANKS, "completions": RANKS, "completionMode": "Indexed", "backoffLimit": 0,
           "template": {"spec": pod}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
            "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": job}}]}}


@dataclass(frozen=True)
class Seen:
    """One JobSet at one moment, as Kueue, the API server and fabricsched show it."""

    suspended: bool
    workload: str
    """Its Kueue Workload's name; empty while Kueue has made none."""
    quota: str
    """The Workload's QuotaReserved condition: ``True``, or ``False: <Kueue's message>``."""
    pods: int
    bound: int
    placement: dict[str, Any] | None
    """Its FabricPlacement, None when fabricsched has none."""


@dataclass
class Act:
    """What the act saw: the second JobSet queued while the first was placed, then placed."""

    first: dict[str, Any] = field(default_factory=dict)
    """The first's Bound FabricPlacement."""
    queued: Seen | None = None
    """The second while the first ran."""
    second: dict[str, Any] = field(default_factory=dict)
    """The second's Bound FabricPlacement, once the first finished."""
    first_after: str | None = None
    """The first's FabricPlacement phase once the second was placed (None: deleted)."""
    lines: list[str] = field(default_factory=list)
    """Everything printed, in order."""
    seconds: float = 0.0


class _Cluster:
    """Reads of one namespace, kept small so each step of the act says what it looks at."""

    def __init__(self, api: rest.Client, namespace: str) -> None:
        self.api, self.ns = api, namespace

    def pods(self, name: str) -> list[dict[str, Any]]:
        items = self.api.call("GET", f"/api/v1/namespaces/{self.ns}/pods")["items"]
        return [p for p in items if (p["metadata"].get("labels") or {}).get(JOBSET_LABEL) == name
                and not p["metadata"].get("deletionTimestamp")]

    def placement(self, name: str) -> dict[str, Any] | None:
        status, body = self.api.request("GET", PLACEMENTS.format(ns=self.ns) + f"/{name}")
        return body if status == 200 else None

    def workload(self, name: str) -> dict[str, Any] | None:
        for item in self.api.call("GET", WORKLOADS.format(ns=self.ns))["items"]:
            owners = item["metadata"].get("ownerReferences") or ()
            if any(o.get("kind") == "JobSet" and o.get("name") == name for o in owners):
                return dict(item)
        return None

    def seen(self, name: str) -> Seen:
        found = self.api.call("GET", JOBSETS.format(ns=self.ns) + f"/{name}")
        workload = self.workload(name) or {}
        quota = next((c for c in (workload.get("status") or {}).get("conditions") or ()
                      if c.get("type") == "QuotaReserved"), None)
        said = "-" if quota is None else str(quota.get("status"))
        if quota is not None and quota.get("status") != "True":
            said += f": {str(quota.get('message', ''))[:MESSAGE_CHARS]}"
        pods = self.pods(name)
        return Seen(suspended=bool(found["spec"].get("suspend")),
                    workload=str((workload.get("metadata") or {}).get("name", "")), quota=said,
                    pods=len(pods), bound=sum(1 for p in pods if p["spec"].get("nodeName")),
                    placement=self.placement(name))

    def placed(self, name: str, timeout: float) -> dict[str, Any]:
        """The JobSet's FabricPlacement once Bound with all its pods bound and Running."""
        def ready() -> dict[str, Any] | None:
            found = self.placement(name)
            pods = self.pods(name)
            if (found is None or (found.get("status") or {}).get("phase") != "Bound" or len(pods) < RANKS
                    or not all(p["spec"].get("nodeName") for p in pods)):
                return None
            return found
        placement: dict[str, Any] = wait_for(f"JobSet {self.ns}/{name} placed and bound", ready, timeout)
        for pod in self.pods(name):
            kwok.finish(self.api, self.ns, pod["metadata"]["name"], "Running", timeout)
        return placement


def _section(cluster: _Cluster, name: str, placement: dict[str, Any], topology: dict[str, Any]) -> list[str]:
    nodes = cluster.api.call("GET", "/api/v1/nodes")["items"]
    return [tour.gang_table("JOBSET", placement, cluster.pods(name), nodes, topology), *tour.why(placement)]


def _queued_lines(namespace: str, name: str, seen: Seen) -> list[str]:
    placement = "none" if seen.placement is None else str((seen.placement.get("status") or {}).get("phase"))
    return [f"==> JobSet {namespace}/{name} waits in the queue, untouched by fabricsched:",
            f"  JobSet spec.suspend: {str(seen.suspended).lower()}",
            f"  Kueue Workload {seen.workload or '-'}: QuotaReserved {seen.quota}",
            f"  pods: {seen.pods} ({seen.bound} bound); FabricPlacement: {placement}"]


def run(api: rest.Client, namespace: str, queue: str, topology: str, say: Callable[[str], None] = print,
        timeout: float = 90.0, hold: float = 3.0) -> Act:
    """The act in ``namespace`` through LocalQueue ``queue`` (a quota of RANKS x GPUS GPUs) on
    the fabric of FabricTopology ``topology``; every line goes to ``say`` as it happens. Fails
    (``pytest.fail``'s exception) naming the step that did not happen in ``timeout`` s, or
    when the second JobSet gets a pod or a FabricPlacement while queued (watched ``hold`` s)."""
    act, cluster, t0 = Act(), _Cluster(api, namespace), time.monotonic()
    fabric = api.call("GET", f"{TOPOLOGIES}/{topology}")

    def tell(*texts: str) -> None:
        for line in "\n".join(texts).splitlines():
            act.lines.append(line)
            say(line)

    paths = JOBSETS.format(ns=namespace)
    tell(f"==> JobSets {FIRST} and {SECOND} ({RANKS} pods x {GPUS} GPUs each) into LocalQueue "
         f"{namespace}/{queue}, whose GPU quota admits one of them")
    api.call("POST", paths, jobset(FIRST, queue))
    wait_for(f"Kueue to admit {FIRST}", lambda: not cluster.seen(FIRST).suspended, timeout)
    api.call("POST", paths, jobset(SECOND, queue))
    act.first = cluster.placed(FIRST, timeout)
    tell(f"==> Kueue admitted {FIRST}; fabricsched placed it:", *_section(cluster, FIRST, act.first, fabric))

    def pending() -> Seen | None:  # Kueue tried the second and found no quota for it
        seen = cluster.seen(SECOND)
        return seen if seen.workload and seen.quota.startswith("False") else None
    wait_for(f"Kueue to keep {SECOND} pending", pending, timeout)

    def waits() -> bool:
        seen = cluster.seen(SECOND)
        return seen.suspended and seen.pods == 0 and seen.placement is None
    holds_for(f"{SECOND} suspended with no pod and no FabricPlacement", waits, hold)
    act.queued = cluster.seen(SECOND)
    tell(*_queued_lines(namespace, SECOND, act.queued))

    tell(f"==> {FIRST} finishes: its pods marked Succeeded (annotation {kwok.FINISH_ANNOTATION})")
    for pod in cluster.pods(FIRST):
        kwok.finish(api, namespace, pod["metadata"]["name"], "Succeeded", timeout)
    wait_for(f"Kueue to admit {SECOND}", lambda: not cluster.seen(SECOND).suspended, timeout)
    act.second = cluster.placed(SECOND, timeout)
    released = cluster.placement(FIRST)
    act.first_after = None if released is None else str((released.get("status") or {}).get("phase"))
    tell(f"==> Kueue admitted {SECOND} once {FIRST}'s quota was back; fabricsched placed it:",
         *_section(cluster, SECOND, act.second, fabric),
         f"  ({FIRST}'s FabricPlacement: {act.first_after or 'deleted'})")
    act.seconds = time.monotonic() - t0
    return act

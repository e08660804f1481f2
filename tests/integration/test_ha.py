"""High availability: two replicas of the chart's pod, the active pair killed with SIGKILL.

A cluster of its own (the local control plane with only the default scheduler), two pairs
started as the chart renders them (``pairs``: the kube-scheduler with the chart's configuration,
leader election on with 15 s / 10 s / 2 s, and ``fabricsched run`` with the chart's arguments,
``--leader-elect`` included), 16 hosts of 8 GPUs (2 spines x 2 leaves x 4 hosts).

The story: a 6-pod Job binds through the active pair; a 4-pod gang is planned with two ranks
bound and two held back by scheduling gates (a reservation in flight); both processes of the
active pair get SIGKILL; right away a new 4-pod gang is submitted and the held ranks released.
The standby pair must schedule all of it within 30 s: the held ranks on the nodes the dead pair
reserved for them, no gang split from its plan, no node holding more GPUs than it has; and the
survivor's ``fabricsched run`` takes fabricsched's own Lease and writes the topology status.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clusterkit import find_binaries_or_skip, install_crds, new_namespace
from pairs import Pair, containers, helm_binary, render_chart, scheduler_config
from waiting import wait_for

from fabricsched.cluster import controlplane, kwok, nodes, rest, samples

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RELEASE_NAMESPACE = "fabricsched-ha"
TOPOLOGY = "ib-ha"
GPU = "nvidia.com/gpu"
GPUS_PER_NODE = 8
FAILOVER_BUDGET_S = 30.0
PLACEMENTS = "/apis/fabricsched.io/v1alpha1/namespaces/{ns}/fabricplacements"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{RELEASE_NAMESPACE}/leases"


def trainer(gpus: int = 8) -> dict[str, Any]:
    return {"schedulerName": "fabricsched", "restartPolicy": "Never",
            "containers": [{"name": "train", "image": "trainer:1",
                            "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}


class Fabric:
    def __init__(self, plane: controlplane.ControlPlane, api: rest.Client, pairs: list[Pair]) -> None:
        self.plane, self.api, self.pairs = plane, api, pairs

    def job(self, namespace: str, name: str, pods: int) -> None:
        body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                         "backoffLimit": 0, "template": {"spec": trainer()}}}
        self.api.call("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body)

    def gang_pod(self, namespace: str, gang: str, rank: int, size: int, gated: bool) -> None:
        spec = trainer()
        if gated:
            spec["schedulingGates"] = [{"name": "fabricsched.io/test-hold"}]
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{gang}-{rank}", "labels": {"fabricsched.io/gang": gang},
                             "annotations": {"fabricsched.io/gang-size": str(size),
                                             "fabricsched.io/rank": str(rank)}},
                "spec": spec}
        self.api.call("POST", f"/api/v1/namespaces/{namespace}/pods", body)

    def release_gate(self, namespace: str, name: str) -> None:
        self.api.call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}",
                      [{"op": "remove", "path": "/spec/schedulingGates"}], "application/json-patch+json")

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api.call("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
        return items

    def bound(self, namespace: str, prefix: str, count: int) -> dict[str, str] | None:
        """pod name -> node once ``count`` pods named ``prefix``* are bound."""
        found = {p["metadata"]["name"]: str(p["spec"]["nodeName"]) for p in self.pods(namespace)
                 if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName")}
        return found if len(found) == count else None

    def placement(self, namespace: str, name: str) -> dict[str, Any] | None:
        status, body = self.api.request("GET", PLACEMENTS.format(ns=namespace) + f"/{name}")
        return body if status == 200 else None

    def placement_in(self, namespace: str, name: str, phase: str) -> dict[str, Any] | None:
        found = self.placement(namespace, name)
        return found if found and (found.get("status") or {}).get("phase") == phase else None

    def gpus_taken_in_status(self) -> int:
        path = f"/apis/fabricsched.io/v1alpha1/fabrictopologies/{TOPOLOGY}"
        status = self.api.call("GET", path).get("status")
        gpus = (status or {}).get("gpus") or {}
        return int(gpus.get("total", 0)) - int(gpus.get("free", 0))

    def lease_holder(self, name: str) -> str:
        status, body = self.api.request("GET", f"{LEASES}/{name}")
        return str((body.get("spec") or {}).get("holderIdentity") or "") if status == 200 else ""

    def gpus_on_nodes(self) -> dict[str, int]:
        """GPUs requested by live bound pods, per node, across the cluster."""
        used: dict[str, int] = {}
        listed = self.api.call("GET", "/api/v1/pods")["items"]
        for pod in listed:
            node = pod["spec"].get("nodeName")
            if not node or pod["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            for container in pod["spec"]["containers"]:
                gpus = int((container.get("resources") or {}).get("requests", {}).get(GPU, "0"))
                used[node] = used.get(node, 0) + gpus
        return used


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    bins = find_binaries_or_skip()
    helm = helm_binary(bins)
    root = tmp_path_factory.mktemp("ha")
    docs = render_chart(helm, root / "helm", RELEASE_NAMESPACE, {})
    config = scheduler_config(docs)
    args = containers(docs)["fabricsched"]["args"]
    assert config["leaderElection"]["leaderElect"] is True and "--leader-elect" in args
    plane = controlplane.up(root / "cluster")
    api = plane.client()
    pairs = [Pair(name, bins, plane.kubeconfig, root / name, config, args) for name in ("pair-a", "pair-b")]
    try:
        install_crds(plane)
        api.call("POST", "/api/v1/namespaces", {"metadata": {"name": RELEASE_NAMESPACE}})
        manifests = samples.sample_fabric(spines=2, leaves_per_spine=2, hosts_per_leaf=4, gpus=GPUS_PER_NODE)
        nodes.create(api, manifests, datetime.datetime.now(datetime.UTC))
        topology = samples.demo_topology(TOPOLOGY)
        topology["spec"]["links"] = []
        api.call("POST", "/apis/fabricsched.io/v1alpha1/fabrictopologies", topology)
        for pair in pairs:
            pair.start()
        for pair in pairs:
            pair.wait_ready()
        wait_for("one pair's kube-scheduler holds the scheduler's Lease",
                 lambda: sum(p.leads_scheduling() for p in pairs) == 1, timeout=60)
        wait_for("one fabricsched run holds fabricsched's Lease",
                 lambda: fabric_lease_holder(api) != "", timeout=60)
        yield Fabric(plane, api, pairs)
    finally:
        for pair in pairs:
            pair.stop()
        api.close()
        plane.down()


def fabric_lease_holder(api: rest.Client) -> str:
    status, body = api.request("GET", f"{LEASES}/fabricsched")
    return str((body.get("spec") or {}).get("holderIdentity") or "") if status == 200 else ""


def test_killing_the_active_pair_resumes_scheduling_on_the_standby_within_30_s(fabric: Fabric) -> None:
    ns = new_namespace(fabric.api, "ha")
    active = next(p for p in fabric.pairs if p.leads_scheduling())
    standby = next(p for p in fabric.pairs if p is not active)

    # A running gang, and a gang with a reservation in flight: ranks 0-1 bound, 2-3 held back.
    fabric.job(ns, "running", 6)
    first = wait_for("6 pods of Job running bound", lambda: fabric.bound(ns, "running-", 6), timeout=60)
    for pod in first:
        kwok.finish(fabric.api, ns, pod, "Running")
    for rank in range(4):
        fabric.gang_pod(ns, "held", rank, 4, gated=rank >= 2)
    wait_for("ranks 0-1 of gang held bound", lambda: fabric.bound(ns, "held-", 2) is not None, timeout=60)
    plan = wait_for("gang held's plan written with its status",
                    lambda: fabric.placement_in(ns, "held", "Reserved"))
    planned = {r["rank"]: r["node"] for r in plan["spec"]["ranks"]}
    # The standby's book follows the plans from the FabricPlacement watch (warm before the kill).
    wait_for("the standby following gang held's plan", lambda: "following the plan of" in
             standby.operator_log.read_text(errors="replace") and "/held" in standby.operator_log.read_text())

    killed_at = time.monotonic()
    active.kill()
    fabric.job(ns, "after", 4)
    for rank in (2, 3):
        fabric.release_gate(ns, f"held-{rank}")
    after = wait_for("the new gang bound by the standby pair", lambda: fabric.bound(ns, "after-", 4),
                     timeout=FAILOVER_BUDGET_S + 30, interval=0.2)
    failover_s = time.monotonic() - killed_at
    held = wait_for("the held ranks bound", lambda: fabric.bound(ns, "held-", 4), timeout=30)
    print(f"\nfailover: the new gang was bound {failover_s:.1f} s after SIGKILL of the active pair")
    assert failover_s < FAILOVER_BUDGET_S
    assert standby.leads_scheduling()

    # No reservation lost: the held ranks went where the dead pair had reserved them.
    assert {int(name.rsplit("-", 1)[1]): node for name, node in held.items()} == planned
    # No gang split: every gang's pods are where its plan says.
    new_plan = wait_for("FabricPlacement after", lambda: fabric.placement(ns, "after"))
    by_rank = {int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): p["spec"]["nodeName"]
               for p in fabric.pods(ns) if p["metadata"]["name"].startswith("after-")}
    assert by_rank == {r["rank"]: r["node"] for r in new_plan["spec"]["ranks"]}
    assert set(after.values()).isdisjoint(set(first.values()) | set(held.values()))
    # No GPU double-booked.
    over = {node: gpus for node, gpus in fabric.gpus_on_nodes().items() if gpus > GPUS_PER_NODE}
    assert not over, f"nodes holding more GPUs than they have: {over}"

    # The survivor's fabricsched run writes now: it holds fabricsched's Lease (within the 15 s
    # lease) and the topology status counts the new gang's GPUs.
    wait_for("the standby holds fabricsched's Lease",
             lambda: fabric.lease_holder("fabricsched").startswith(f"{standby.name}_"), timeout=30)
    used = sum(fabric.gpus_on_nodes().values())
    wait_for("the topology status written by the survivor", lambda: fabric.gpus_taken_in_status() >= used,
             timeout=30)

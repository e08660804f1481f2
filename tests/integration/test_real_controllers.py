"""Workloads made by their real controllers land as gangs (the fabricsched scheduler over the
sample fabric: 16 hosts of 8 GPUs, 4 per leaf, 2 leaves per spine).

LeaderWorkerSet (sigs.k8s.io/lws at hack/lws/go.mod's pin): 2 groups of 4 (a leader and 3
workers of 8 GPUs each) with ``RecreateGroupOnPodRestart``; each group is one gang in one leaf,
ranked by worker index. A group restarts when one of its pods is deleted (what an eviction does;
on kwok a container never restarts by itself): the controller deletes the group's leader, the
worker StatefulSet goes with it, and the new pods are placed again as one gang in one leaf.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import controllerkit
import pytest
from harness import Fabric, trainer_spec
from waiting import wait_for

from fabricsched.cluster import kwok

pytestmark = pytest.mark.integration

PLACEMENTS = "/apis/fabricsched.io/v1alpha1/namespaces/{ns}/fabricplacements"
GROUP = "leaderworkerset.sigs.k8s.io/group-index"
WORKER = "leaderworkerset.sigs.k8s.io/worker-index"


@pytest.fixture(scope="module")
def lws(fabric: Fabric) -> Iterator[controllerkit.Controller]:
    controller = controllerkit.start_lws(fabric.plane)
    try:
        yield controller
    finally:
        controller.stop()


def labels(pod: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = pod["metadata"].get("labels") or {}
    return found


def groups(fabric: Fabric, ns: str, size: int, count: int) -> dict[int, list[dict[str, Any]]]:
    """The live pods of each group by worker index once every group has all ``size`` bound
    (pending ones marked Running, as a kubelet would)."""
    def ready() -> dict[int, list[dict[str, Any]]] | None:
        by_group: dict[int, dict[int, dict[str, Any]]] = {}
        for pod in fabric.pods(ns):
            if pod["metadata"].get("deletionTimestamp") or GROUP not in labels(pod):
                continue
            by_group.setdefault(int(labels(pod)[GROUP]), {})[int(labels(pod)[WORKER])] = pod
        if len(by_group) < count or any(len(pods) < size for pods in by_group.values()):
            return None
        if not all(p["spec"].get("nodeName") for pods in by_group.values() for p in pods.values()):
            return None
        for pods in by_group.values():
            for pod in pods.values():
                if pod["status"].get("phase") == "Pending":
                    kwok.finish(fabric.api, ns, pod["metadata"]["name"], "Running")
        return {g: [pods[w] for w in sorted(pods)] for g, pods in by_group.items()}

    found: dict[int, list[dict[str, Any]]] = wait_for(f"{count} groups of {size} bound", ready, timeout=120)
    return found


def assert_one_gang(fabric: Fabric, ns: str, name: str, pods: list[dict[str, Any]]) -> list[str]:
    nodes = [p["spec"]["nodeName"] for p in pods]
    assert len(set(nodes)) == len(nodes)  # 8-GPU ranks on 8-GPU hosts: no node over its GPUs
    assert len({fabric.leaf_of[n] for n in nodes}) == 1, nodes
    placement = fabric.api.call("GET", PLACEMENTS.format(ns=ns) + f"/{name}")
    assert [r["node"] for r in placement["spec"]["ranks"]] == nodes  # rank order = worker index
    return nodes


def test_a_leaderworkerset_of_two_groups_of_four_lands_as_two_gangs_also_after_a_group_restart(
    fabric: Fabric, ns: str, lws: controllerkit.Controller,
) -> None:
    template = {"spec": trainer_spec(8)}
    template["spec"]["restartPolicy"] = "Always"
    fabric.api.call("POST", f"{controllerkit.LWS_API}/namespaces/{ns}/leaderworkersets", {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "serve"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {
            "size": 4, "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": template, "workerTemplate": template}}})
    found = groups(fabric, ns, size=4, count=2)
    before = {g: assert_one_gang(fabric, ns, f"serve-{g}", pods) for g, pods in found.items()}
    assert len({fabric.leaf_of[nodes[0]] for nodes in before.values()}) == 2
    old = {p["metadata"]["uid"] for p in found[1]}

    fabric.api.call("DELETE", f"/api/v1/namespaces/{ns}/pods/{found[1][2]['metadata']['name']}")

    def restarted() -> bool:
        live = [p for p in fabric.pods(ns) if labels(p).get(GROUP) == "1"
                and not p["metadata"].get("deletionTimestamp")]
        return len(live) == 4 and not {p["metadata"]["uid"] for p in live} & old
    wait_for("group 1 recreated as a whole", restarted, timeout=120)
    again = groups(fabric, ns, size=4, count=2)
    after = assert_one_gang(fabric, ns, "serve-1", again[1])
    assert [p["metadata"]["uid"] for p in again[0]] == [p["metadata"]["uid"] for p in found[0]]
    # The old leaf had room again once the old pods went: the group goes back there.
    assert {fabric.leaf_of[n] for n in after} == {fabric.leaf_of[before[1][0]]}

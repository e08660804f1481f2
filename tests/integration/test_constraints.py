"""Placement constraints on the real control plane (issue 31): JobSet slices per Job, the native
PodGroup topology key (TopologyAwareWorkloadScheduling on in the API server), an unknown key.

The cluster (``constraintkit``): 16 kwok hosts of 8 GPUs, 2 spines x 2 leaves x 4 hosts, the
real JobSet controller, fabricsched's kube-scheduler and ``fabricsched run``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from constraintkit import (
    LEAF_LABEL,
    Fabric,
    bound,
    fabric_cluster,
    jobset,
    placement,
    pod_group,
    scheduling_message,
)
from waiting import wait_for

from fabricsched.cluster import jobset as jobset_controller
from fabricsched.cluster import kwok


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    with fabric_cluster(tmp_path_factory.mktemp("constraints-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def controller(fabric: Fabric) -> Iterator[jobset_controller.Controller]:
    """The real JobSet controller against this module's cluster."""
    running = jobset_controller.start(fabric.plane)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def ns(fabric: Fabric) -> Iterator[str]:
    name = fabric.namespace()
    yield name
    fabric.api.request("DELETE", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{name}/jobsets",
                       {"propagationPolicy": "Background"})
    fabric.clean(name)
    wait_for("pods gone", lambda: not fabric.pods(name), timeout=60)
    wait_for("every GPU free in the topology's status", fabric.settled, timeout=60)


def label(pod: dict[str, Any], key: str) -> str:
    return str((pod["metadata"].get("labels") or {}).get(key, ""))


def test_a_jobset_with_slice_per_job_lands_each_job_in_one_leaf_and_the_whole_in_one_spine(
    fabric: Fabric, ns: str, controller: jobset_controller.Controller,
) -> None:
    # 4 Jobs x 4 pods of 4 GPUs: each Job is 2 hosts, the whole is one spine (8 hosts).
    jobset(fabric, ns, "llm", jobs=4, pods=4, gpus=4, annotations={
        "fabricsched.io/slice-per-job": "true", "fabricsched.io/slice-required-tier": "leaf",
        "fabricsched.io/required-tier": "spine"})

    def rank(pod: dict[str, Any]) -> int | None:
        index, completion = label(pod, "jobset.sigs.k8s.io/job-global-index"), label(
            pod, "batch.kubernetes.io/job-completion-index")
        return int(index) * 4 + int(completion) if index and completion else None

    pods = bound(fabric, ns, 16, rank)
    nodes = [p["spec"]["nodeName"] for p in pods]
    assert len({fabric.spine_of[n] for n in nodes}) == 1
    for job in range(4):
        assert len({fabric.leaf_of[n] for n in nodes[job * 4:job * 4 + 4]}) == 1, (job, nodes)
    planned = placement(fabric, ns, "llm")
    assert planned["spec"]["tier"] == {"required": "spine"}
    assert planned["spec"]["slices"]["size"] == 4 and planned["status"]["slicesHeld"] is True
    assert planned["spec"]["slices"]["domains"] == [fabric.leaf_of[nodes[j * 4]] for j in range(4)]


def test_a_native_podgroup_keyed_to_the_leaf_label_lands_in_one_leaf_or_waits_with_the_reason(
    fabric: Fabric, ns: str,
) -> None:
    pod_group(fabric, ns, "fits", pods=4, gpus=8, key=LEAF_LABEL)
    pods = bound(fabric, ns, 4, lambda p: int(p["metadata"]["name"].rsplit("-", 1)[1])
                 if p["metadata"]["name"].startswith("fits-") else None)
    assert len({fabric.leaf_of[p["spec"]["nodeName"]] for p in pods}) == 1
    assert placement(fabric, ns, "fits")["spec"]["tier"] == {"required": "leaf"}

    # 5 hosts' worth in one leaf of 4: it waits, and says why; without the key it would span leaves.
    pod_group(fabric, ns, "big", pods=5, gpus=8, key=LEAF_LABEL)
    wait_for("the 5-pod gang's reason",
             lambda: "required tier leaf" in scheduling_message(fabric, ns, "big-0"), timeout=30)
    assert "no leaf could ever hold 5 pods of 8 GPUs" in scheduling_message(fabric, ns, "big-0")
    assert not any(p["spec"].get("nodeName") for p in fabric.pods(ns)
                   if p["metadata"]["name"].startswith("big-"))
    for pod in pods:
        kwok.delete_now(fabric.api, ns, pod["metadata"]["name"])


def test_a_native_key_that_is_no_tier_is_refused_naming_the_key_and_the_tiers(
    fabric: Fabric, ns: str,
) -> None:
    pod_group(fabric, ns, "rack", pods=2, gpus=8, key="topology.kubernetes.io/rack")
    wait_for("the refusal", lambda: "topology.kubernetes.io/rack" in scheduling_message(fabric, ns, "rack-0"),
             timeout=30)
    message = scheduling_message(fabric, ns, "rack-0")
    assert "is no tier's nodeLabel (tiers: leaf, spine)" in message, message
    assert not any(p["spec"].get("nodeName") for p in fabric.pods(ns))

"""GPUs through DRA on the real control plane, with the real kube-scheduler allocating the claims
(DynamicResources, at PreBind: "allocated" is the claim's status, kwok nodes have no kubelet).

One fabric for the module (``drakit.dra_fabric``): 2 spines x 2 leaves x 8 hosts; the hosts of
leaf l02 keep the device plugin's allocatable ``nvidia.com/gpu: 8``, the other 24 publish 8 GPUs
and a MIG device each as NVIDIA's DRA driver does; cliques of 4 hosts (``nvidia.com/gpu.clique``)
form the lowest tier, ``nvlink``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import drakit
import harness
import pytest
from waiting import wait_for

from fabricsched.cluster import samples

pytestmark = pytest.mark.integration

PLUGIN_LEAF = samples.leaf_name(2)
TAKEN_LEAF = samples.leaf_name(1)


@pytest.fixture(scope="module")
def dra(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.Fabric]:
    with drakit.dra_fabric(tmp_path_factory.mktemp("dra-cluster"), PLUGIN_LEAF) as cluster:
        yield cluster


@pytest.fixture
def dra_ns(dra: harness.Fabric) -> Iterator[str]:
    name = dra.namespace()
    yield name
    dra.release(name, timeout=90)


def _gpus(fabric: harness.Fabric) -> dict[str, Any]:
    found: dict[str, Any] = fabric.topology_status().get("gpus") or {}
    return found


def _claim_nodes(fabric: harness.Fabric, namespace: str, job: str) -> dict[str, str]:
    """Pod node -> the node its first claim is allocated on, for the Job's pods."""
    by_claim = {claim: node for claim, node, _ in drakit.allocations(fabric.api, namespace)}
    out = {}
    for pod in fabric.pods(namespace):
        if pod["metadata"]["labels"].get("job-name") != job:
            continue
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
            if status.get("resourceClaimName") in by_claim:
                out[pod["spec"]["nodeName"]] = by_claim[status["resourceClaimName"]]
    return out


def _no_overcommit(fabric: harness.Fabric) -> None:
    for node, devices in drakit.gpus_allocated_per_node(fabric.api).items():
        assert len(devices) == len(set(devices)) <= 8, (node, devices)


def test_status_counts_dra_and_plugin_gpus_not_mig(dra: harness.Fabric) -> None:
    # 24 DRA hosts x 8 GPUs (their MIG devices not counted) + 8 device-plugin hosts x 8.
    wait_for("the topology counts 256 GPUs", lambda: _gpus(dra) == {"total": 256, "free": 256}, timeout=60)


def test_claim_gang_lands_in_one_leaf_avoiding_taken_gpus(dra: harness.Fabric, dra_ns: str) -> None:
    api = dra.api
    drakit.claim_template(api, dra_ns, "eight-gpus", drakit.GPU_CLASS, 8)
    # Two hosts of l01 taken by claims the default scheduler allocates: l01 holds 6 free hosts.
    taken = [n for n, leaf in sorted(dra.leaf_of.items()) if leaf == TAKEN_LEAF][:2]
    for i, node in enumerate(taken):
        drakit.claim_job(api, dra_ns, f"occupant-{i}", 1, ["eight-gpus"], scheduler="default-scheduler",
                         node=node)
    wait_for("the occupants' claims allocated", lambda: {n for _, n, _ in drakit.allocations(api, dra_ns)}
             == set(taken), timeout=60)
    wait_for("their 16 GPUs taken in the status", lambda: _gpus(dra).get("free") == 256 - 16, timeout=30)

    drakit.claim_job(api, dra_ns, "train", 8, ["eight-gpus"])
    placed = dra.placed(dra_ns, "train", 8)
    leaves = {dra.leaf_of[n] for n in placed}
    assert len(leaves) == 1 and leaves.isdisjoint({TAKEN_LEAF, PLUGIN_LEAF}), placed
    assert len(set(placed)) == 8
    wait_for("every rank's claim allocated on its node",
             lambda: (lambda got: len(got) == 8 and all(k == v for k, v in got.items()))(
                 _claim_nodes(dra, dra_ns, "train")), timeout=60)
    _no_overcommit(dra)
    wait_for("the gang's GPUs taken in the status", lambda: _gpus(dra).get("free") == 256 - 80, timeout=30)


def test_extended_resource_gang_spans_plugin_and_dra_hosts(dra: harness.Fabric, dra_ns: str) -> None:
    # nvidia.com/gpu: 8 per pod, backed by DRA (DeviceClass extendedResourceName) on the DRA hosts
    # and by allocatable on l02's: 12 pods under spine s1 span l01 (DRA) and l02 (device plugin).
    spine = {"nodeSelector": {samples.TOPOGRAPH.spine: samples.spine_name(1)}}
    dra.job(dra_ns, "mixed", 12, gpus=8, placement=spine)
    placed = dra.placed(dra_ns, "mixed", 12)
    assert len(set(placed)) == 12
    assert {dra.leaf_of[n] for n in placed} == {TAKEN_LEAF, PLUGIN_LEAF}
    on_dra = {n for n in placed if dra.leaf_of[n] != PLUGIN_LEAF}
    wait_for("the DRA hosts' extended-resource claims allocated there",
             lambda: set(drakit.gpus_allocated_per_node(dra.api)) >= on_dra, timeout=60)
    _no_overcommit(dra)


def test_compute_domain_gang_stays_in_one_nvlink_domain(dra: harness.Fabric, dra_ns: str) -> None:
    api = dra.api
    drakit.claim_template(api, dra_ns, "eight-gpus", drakit.GPU_CLASS, 8)
    drakit.compute_domain(api, dra_ns, "imex", "imex-channel")
    drakit.claim_job(api, dra_ns, "nvl", 4, ["eight-gpus", "imex-channel"])
    placed = dra.placed(dra_ns, "nvl", 4)
    cliques = {_clique(dra, n) for n in placed}
    assert len(cliques) == 1, placed

    def required_nvlink() -> bool:
        items = api.call("GET", harness.PLACEMENTS.format(ns=dra_ns))["items"]
        return any(p["spec"]["tier"].get("required") == "nvlink" for p in items)

    wait_for("the plan requires one nvlink domain", required_nvlink, timeout=30)
    _no_overcommit(dra)


def _clique(fabric: harness.Fabric, node: str) -> str:
    labels: dict[str, str] = fabric.api.call("GET", f"/api/v1/nodes/{node}")["metadata"]["labels"]
    return labels[drakit.CLIQUE]

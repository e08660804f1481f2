"""End-to-end tests against a real cluster running the chart (hack/kind-e2e.sh makes one with kind).

They run only with FABRICSCHED_E2E=1 and use the cluster of $KUBECONFIG as they find it: the chart
installed, a FabricTopology (examples/kind-topology.yaml, name in $FABRICSCHED_E2E_TOPOLOGY) over
nodes with fake GPU capacity (hack/kind-gpu.sh). The fabric's shape is read from the nodes' labels,
never assumed, so the same tests run on any cluster with at least two spines of two leaves.
Each test works in a namespace of its own and waits for it to be gone, so the next test finds
the GPUs free again.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from e2ekit import (
    E2E_ENV,
    HEALTH_LABEL,
    INTERVAL_S,
    TIMEOUT_S,
    Fabric,
    Host,
    degraded_nodes,
    topology_object,
)
from waiting import wait_for


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(E2E_ENV) == "1":
        return
    reason = f"end-to-end tests need a cluster: set {E2E_ENV}=1 (hack/kind-e2e.sh does)"
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def api_client() -> Iterator[Any]:
    from kubernetes import config

    client = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=os.environ.get("KUBECONFIG"))
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def fabric(core_v1: Any, custom_objects: Any) -> Fabric:
    topology = topology_object(custom_objects)
    spec = topology["spec"]
    tiers = [tier["nodeLabel"] for tier in spec["tiers"]]
    assert len(tiers) >= 2, "the e2e tests need a leaf and a spine tier"
    leaf_label, spine_label = tiers[0], tiers[1]
    resource = spec.get("gpuResource", "nvidia.com/gpu")
    selector = ",".join(f"{k}={v}" for k, v in spec.get("nodeSelector", {}).get("matchLabels", {}).items())
    hosts = []
    for node in core_v1.list_node(label_selector=selector or None).items:
        labels = node.metadata.labels or {}
        gpus = int((node.status.allocatable or {}).get(resource, "0"))
        if gpus and leaf_label in labels and spine_label in labels:
            hosts.append(Host(node.metadata.name, labels[leaf_label], labels[spine_label], gpus))
    result = Fabric(tuple(sorted(hosts, key=lambda h: h.name)), resource)
    assert len(result.spines()) >= 2, f"need two spines, found {result.spines()}"
    assert all(len(result.leaves(s)) >= 2 for s in result.spines()), "need two leaves under every spine"
    # The operator must have seen the same hosts before placements mean anything.
    wait_for("the FabricTopology status to count every host",
             lambda: topology_object(custom_objects).get("status", {}).get("nodes") == len(result.hosts),
             timeout=TIMEOUT_S, interval=INTERVAL_S)
    return result


@pytest.fixture
def namespace(core_v1: Any) -> Iterator[str]:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core_v1.delete_namespace(name, propagation_policy="Foreground", grace_period_seconds=0)

    def gone() -> bool:
        try:
            core_v1.read_namespace(name)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    # The next test needs these GPUs back.
    wait_for(f"namespace {name} to be deleted", gone, timeout=180, interval=INTERVAL_S)


@pytest.fixture
def degraded_host(core_v1: Any, custom_objects: Any, fabric: Fabric) -> Iterator[Host]:
    """One host marked degraded through the node label, until the operator has seen it recover."""
    host = fabric.hosts[0]
    core_v1.patch_node(host.name, {"metadata": {"labels": {HEALTH_LABEL: "degraded"}}})
    try:
        wait_for(f"{host.name} to be reported degraded", lambda: host.name in degraded_nodes(custom_objects),
                 timeout=60, interval=INTERVAL_S)
        yield host
    finally:
        core_v1.patch_node(host.name, {"metadata": {"labels": {HEALTH_LABEL: None}}})
        # Recovery waits out spec.health.recoverAfterSeconds (15 s in examples/kind-topology.yaml).
        wait_for(f"{host.name} to recover", lambda: host.name not in degraded_nodes(custom_objects) or None,
                 timeout=180, interval=INTERVAL_S)

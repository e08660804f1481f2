"""A real control plane for the integration tests, shared by the whole session.

Started once (about 7 s), in a temporary folder, torn down at the end. Tests isolate
themselves by namespace (``namespace``) and by node labels (``node_factory`` labels its
nodes with a group unique to the test), never by assuming an empty cluster.

Without binaries the tests skip, naming ``make tools``; under ``CI=true`` they fail
instead, so a CI run can never pass by skipping everything (``find_binaries_or_skip``).
The API groups' clients (``core_v1``...) over ``api_client`` are the root conftest's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from clusterkit import Cluster, Kubelet, NodeFactory, find_binaries_or_skip, new_namespace

from fabricsched.cluster import controlplane, nodes
from fabricsched.cluster import kubelet as stand_in_kubelet


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    find_binaries_or_skip()
    plane = controlplane.up(tmp_path_factory.mktemp("cluster"))
    api = plane.client()
    try:
        yield Cluster(plane, api)
    finally:
        api.close()
        plane.down()


@pytest.fixture(scope="session")
def api_client(cluster: Cluster) -> Iterator[Any]:
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(cluster.kubeconfig))  # type: ignore[no-untyped-call]
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace whose default ServiceAccount exists (pods are admitted only then)."""
    name = new_namespace(cluster.api, "t")
    yield name
    # No kubelet: bound pods would stay Terminating and hold the namespace; remove them at once.
    pods = cluster.api.call("GET", f"/api/v1/namespaces/{name}/pods")["items"]
    for pod in pods:
        stand_in_kubelet.force_delete(cluster.api, name, pod["metadata"]["name"])
    cluster.api.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def node_factory(cluster: Cluster) -> Iterator[NodeFactory]:
    """GPU nodes for one test, deleted after it."""
    factory = NodeFactory(cluster.api)
    yield factory
    nodes.delete(cluster.api, factory.created)


@pytest.fixture(name="kubelet")
def kubelet_fixture(cluster: Cluster) -> Kubelet:
    """``kubelet(namespace, pod, "Running"|"Succeeded"|"Failed")``: plays the node's kubelet."""
    def set_phase(namespace: str, name: str, phase: stand_in_kubelet.Phase) -> dict[str, Any]:
        return stand_in_kubelet.set_pod_phase(cluster.api, namespace, name, phase)
    return set_phase

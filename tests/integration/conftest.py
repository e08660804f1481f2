"""A real control plane for the integration tests, shared by the whole session.

Started once (about 7 s), in a temporary folder, torn down at the end. Tests isolate
themselves by namespace (``namespace``) and by node labels (``node_factory`` labels its
nodes with a group unique to the test), never by assuming an empty cluster.

Without binaries the tests skip, naming ``make tools``; under ``CI=true`` they fail
instead, so a CI run can never pass by skipping everything.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from clusterkit import Cluster, Kubelet, NodeFactory, wait_for

from fabricsched.cluster import binaries, controlplane, errors, nodes
from fabricsched.cluster import kubelet as stand_in_kubelet


def find_binaries_or_skip() -> binaries.Binaries:
    try:
        return binaries.find()
    except errors.MissingBinaries as e:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and the control plane binaries are missing: {e}", pytrace=False)
        pytest.skip(f"integration tests need the control plane binaries; run `make tools`. ({e})")


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


@pytest.fixture(scope="session")
def core_v1(api_client: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def batch_v1(api_client: Any) -> Any:
    from kubernetes import client

    return client.BatchV1Api(api_client)


@pytest.fixture(scope="session")
def custom_objects(api_client: Any) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(api_client)


@pytest.fixture(scope="session")
def apiextensions(api_client: Any) -> Any:
    from kubernetes import client

    return client.ApiextensionsV1Api(api_client)


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace whose default ServiceAccount exists (pods are admitted only then)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    cluster.api.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    account = f"/api/v1/namespaces/{name}/serviceaccounts/default"
    wait_for(f"ServiceAccount {name}/default", lambda: cluster.api.request("GET", account)[0] == 200)
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

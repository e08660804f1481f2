"""A real control plane for the integration tests, shared by the whole session.

Started once (about 7 s), in a temporary folder, torn down at the end. kwok plays every
node's kubelet: bound pods go Running on their own and stay so until deleted or finished
through the ``kubelet`` fixture. Tests isolate
themselves by namespace (``namespace``) and by node labels (``node_factory`` labels its
nodes with a group unique to the test), never by assuming an empty cluster.

Without binaries the tests skip, naming ``make tools``; under ``CI=true`` they fail
instead, so a CI run can never pass by skipping everything (``find_binaries_or_skip``).
The API groups' clients (``core_v1``...) over ``api_client`` are the root conftest's.

Tests of placement need the fabricsched kube-scheduler, which the session cluster lacks: they
take ``fabric`` (a cluster with fabricsched running, ``harness.fabric_cluster``, one per test
module) and ``ns`` (a namespace on it, released after the test so the next finds the fabric
settled). A module whose fabric differs overrides ``fabric`` with its own module fixture.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chartkit
import harness
import pytest
from clusterkit import Cluster, Kubelet, NodeFactory, find_binaries_or_skip, new_namespace
from waiting import wait_for

from fabricsched.cluster import binaries, controlplane, errors, jobset, kwok, nodes


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
    # kwok removes the pods as the namespace controller deletes them.
    cluster.api.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def node_factory(cluster: Cluster) -> Iterator[NodeFactory]:
    """GPU nodes for one test, deleted after it."""
    factory = NodeFactory(cluster.api)
    yield factory
    nodes.delete(cluster.api, factory.created)


@pytest.fixture(name="kubelet")
def kubelet_fixture(cluster: Cluster) -> Kubelet:
    """``kubelet(namespace, pod, "Running"|"Succeeded"|"Failed")``: the pod in that phase, as kwok
    (every node's kubelet) reports it: Running is waited for, an end is asked for with the
    ``fabricsched.io/kwok-finish`` annotation. Returns the pod."""
    def set_phase(namespace: str, name: str, phase: kwok.Phase) -> dict[str, Any]:
        return kwok.finish(cluster.api, namespace, name, phase)
    return set_phase


@pytest.fixture(scope="session")
def jobset_controller(cluster: Cluster) -> Iterator[jobset.Controller]:
    """The real JobSet controller (built by ``make tools``) against the session cluster, its CRD
    installed and its JobSet webhooks registered on loopback; started on first use only."""
    try:
        controller = jobset.start(cluster.plane)
    except errors.MissingBinaries as e:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {e}", pytrace=False)
        pytest.skip(str(e))
    try:
        yield controller
    finally:
        controller.stop()


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.Fabric]:
    """The module's cluster with fabricsched running over the sample fabric (16 hosts of 8 GPUs
    in 2 spines x 2 leaves x 4 hosts, ``recoverAfterSeconds: 0``)."""
    with harness.fabric_cluster(tmp_path_factory.mktemp("fabric-cluster")) as cluster:
        yield cluster


@pytest.fixture
def ns(fabric: harness.Fabric) -> Iterator[str]:
    """A namespace on ``fabric``; afterwards its pods are gone and every GPU is free again."""
    name = fabric.namespace()
    yield name
    fabric.release(name)


@pytest.fixture(scope="module")
def tools() -> binaries.Binaries:
    """The built binaries with helm (the chart's tests)."""
    return chartkit.find_tools_with_helm()


@pytest.fixture(scope="module")
def helm(tools: binaries.Binaries, tmp_path_factory: pytest.TempPathFactory) -> chartkit.Helm:
    assert tools.helm is not None
    return chartkit.Helm(tools.helm, tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="module")
def kubectl(cluster: Cluster, tools: binaries.Binaries) -> chartkit.Kubectl:
    """kubectl on the session cluster, the chart's CRDs applied (helm installs crds/ before the
    templates; the tests do the same)."""
    ctl = chartkit.Kubectl(tools.kubectl, Path(cluster.kubeconfig))
    ctl.run("apply", "--server-side", "--force-conflicts", "-f", str(chartkit.CHART / "crds"))
    # Polled, not `kubectl wait`: that fails at once on a CRD whose status has no conditions yet.
    established = "jsonpath={.status.conditions[?(@.type=='Established')].status}"
    for crd in (chartkit.CHART / "crds").glob("*.yaml"):
        wait_for(f"{crd.name} established",
                 lambda crd=crd: ctl.run("get", "-f", str(crd), "-o", established).stdout.strip() == "True",
                 timeout=60)
    return ctl

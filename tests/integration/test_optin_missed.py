"""A blocked opt-in webhook is visible: GPU pods of a labelled namespace created without
``schedulerName: fabricsched`` are counted, reported in an Event and in the topology's status.

The webhook is registered with the real API server (``cluster.admission.register``) and served
by ``fabricsched run``, but blocked: the front demands a client certificate
(``--webhook-client-ca``) that the API server does not present, as a wrong NetworkPolicy or
``webhook.allowedCIDRs`` would block it. The API server fails open and admits the pods unchanged;
``controller.optin`` sees them through its watches: ``fabricsched_optin_missed_total`` counts each
once, one Warning Event ``OptInMissed`` (rate-limited per namespace) lands on the first pod, and
every FabricTopology's status carries the ``OptInMissed`` condition.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clusterkit import Cluster, NodeFactory, wait_for
from harness import Operator, running_operator

from fabricsched.api import admission as contract
from fabricsched.api import topology as api
from fabricsched.cluster import admission, components, nodes, processes, rest, samples
from fabricsched.controller import optin as optin_module

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
METRIC = "fabricsched_optin_missed_total"


def gpu_pod(name: str, scheduler: str | None = None, gpus: int = 1) -> dict[str, Any]:
    resources = {"limits": {GPU: str(gpus)}} if gpus else {"requests": {"cpu": "100m"}}
    spec: dict[str, Any] = {"restartPolicy": "Never",
                            "containers": [{"name": "train", "image": "trainer:1", "resources": resources}]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@dataclass
class Blocked:
    api: rest.Client
    operator: Operator
    topology: str
    namespace: str

    def missed(self) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.operator.health_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(f"{METRIC} ")]
        return values[0] if values else 0.0

    def events(self) -> list[dict[str, Any]]:
        selector = f"fieldSelector=reason%3D{optin_module.CONDITION}"
        items: list[dict[str, Any]] = self.api.call(
            "GET", f"/api/v1/namespaces/{self.namespace}/events?{selector}")["items"]
        return items

    def condition(self) -> dict[str, Any] | None:
        obj = self.api.call("GET", f"/apis/{api.GROUP}/{api.VERSION}/{api.PLURAL}/{self.topology}")
        conditions = (obj.get("status") or {}).get("conditions") or ()
        found = [c for c in conditions if c["type"] == optin_module.CONDITION]
        return found[0] if found else None

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self.api.call("POST", f"/api/v1/namespaces/{self.namespace}/pods", body)
        return created


@pytest.fixture(scope="module")
def blocked(cluster: Cluster, repo_root: Path, node_factory_module: NodeFactory,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Blocked]:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(repo_root / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=30s", "-f", str(repo_root / "crds"))
    node_factory_module(2, gpus=8)
    topology = f"optin-{uuid.uuid4().hex[:8]}"
    cluster.api.call("POST", f"/apis/{api.GROUP}/{api.VERSION}/{api.PLURAL}", {
        "apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": topology},
        "spec": {"nodeSelector": {"matchLabels": node_factory_module.selector},
                 "tiers": [{"name": "leaf", "nodeLabel": samples.TOPOGRAPH.leaf},
                           {"name": "spine", "nodeLabel": samples.TOPOGRAPH.spine}]}})
    (port,) = processes.free_ports(1)
    registration = admission.register(cluster.dir, cluster.api, f"https://127.0.0.1:{port}")
    # Any CA: the API server presents no client certificate to webhooks, so every call fails
    # its TLS handshake, as a NetworkPolicy dropping it would fail it.
    client_ca = components.Layout(cluster.dir).pki / "ca.crt"
    flags = [*registration.run_flags(), f"--webhook-client-ca={client_ca}", "--status-interval=1"]
    try:
        with running_operator(cluster.kubeconfig, tmp_path_factory.mktemp("optin-missed"), flags) as operator:
            namespace = f"optin-{uuid.uuid4().hex[:10]}"
            cluster.api.call("POST", "/api/v1/namespaces", {"metadata": {
                "name": namespace, "labels": {contract.NAMESPACE_LABEL: contract.NAMESPACE_LABEL_VALUE}}})
            labelled_at = time.monotonic()
            account = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
            wait_for("the default ServiceAccount", lambda: cluster.api.request("GET", account)[0] == 200)
            # The rule is about time: only pods created GRACE_S after the opt-in count.
            grace = optin_module.GRACE_S + 1.2
            wait_for("the opt-in grace over", lambda: time.monotonic() - labelled_at > grace)
            yield Blocked(cluster.api, operator, topology, namespace)
            cluster.api.request("DELETE", f"/api/v1/namespaces/{namespace}")
    finally:
        admission.unregister(cluster.api)
        cluster.api.request("DELETE", f"/apis/{api.GROUP}/{api.VERSION}/{api.PLURAL}/{topology}")


@pytest.fixture(scope="module")
def node_factory_module(cluster: Cluster) -> Iterator[NodeFactory]:
    factory = NodeFactory(cluster.api)
    yield factory
    nodes.delete(cluster.api, factory.created)


def test_gpu_pods_missing_the_blocked_webhook_are_counted_evented_and_in_the_status(blocked: Blocked) -> None:
    assert blocked.missed() == 0
    # Not misses: an explicit scheduler name, and a pod without GPUs.
    assert blocked.create(gpu_pod("named", scheduler="fabricsched"))["spec"]["schedulerName"] == "fabricsched"
    assert blocked.create(gpu_pod("cpu-only", gpus=0))["spec"]["schedulerName"] == "default-scheduler"
    first = blocked.create(gpu_pod("rank-0"))
    assert first["spec"]["schedulerName"] == "default-scheduler", "the webhook was not blocked"
    wait_for(f"{METRIC} 1", lambda: blocked.missed() == 1, timeout=20)
    events = wait_for("the OptInMissed Event", blocked.events, timeout=20)
    event = events[0]
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "rank-0"
    assert event["involvedObject"]["uid"] == first["metadata"]["uid"]
    assert "the opt-in webhook was not reached" in event["message"]
    condition = wait_for("the OptInMissed condition", blocked.condition, timeout=20)
    assert condition["status"] == "True" and condition["reason"] == "PodsMissedWebhook"
    assert f"{blocked.namespace}/rank-0" in condition["message"]

    for i in range(1, 6):
        blocked.create(gpu_pod(f"rank-{i}"))
    wait_for(f"{METRIC} 6", lambda: blocked.missed() == 6, timeout=20)
    wait_for("the status names the last miss", lambda: f"{blocked.namespace}/rank-5" in (
        (blocked.condition() or {}).get("message", "")), timeout=20)

    # The default scheduler binds them and kwok runs them: more events, no more counting, and
    # still one Event (one per namespace a minute).
    def running() -> bool:
        pods = blocked.api.call("GET", f"/api/v1/namespaces/{blocked.namespace}/pods")["items"]
        return sum(p["status"].get("phase") == "Running" and p["spec"]["schedulerName"] == "default-scheduler"
                   and GPU in str(p["spec"]["containers"][0]["resources"]) for p in pods) == 6

    wait_for("the six missed pods running", running, timeout=30)
    assert blocked.missed() == 6
    assert len(blocked.events()) == 1

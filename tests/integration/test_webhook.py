"""The namespace opt-in webhook through the real API server.

``cluster up``'s registration (``fabricsched.cluster.admission.register``: a serving
certificate from the cluster CA, a MutatingWebhookConfiguration with a loopback URL, on a free
port here) and ``fabricsched run`` as a subprocess with the flags the registration prints:

- a GPU pod in a namespace labelled ``fabricsched.io/scheduling=enabled`` is stored with
  ``schedulerName: fabricsched``, and so are the pods the real Job controller makes from a
  template that names no scheduler (as the training operators' pods are made);
- a pod without GPUs, a pod naming another scheduler, and a GPU pod in an unlabelled namespace
  are stored as sent;
- with ``fabricsched run`` stopped, creating a GPU pod in a labelled namespace still succeeds
  (``failurePolicy: Ignore``), unmutated. This test stops the process, so it runs last.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clusterkit import Cluster, stop_process, wait_for

from fabricsched.api import admission as contract
from fabricsched.cluster import admission, processes, rest

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"


def pod(name: str, gpus: int = 8, scheduler: str | None = None) -> dict[str, Any]:
    resources = {"limits": {GPU: str(gpus)}} if gpus else {"requests": {"cpu": "100m"}}
    spec: dict[str, Any] = {"restartPolicy": "Never",
                            "containers": [{"name": "train", "image": "trainer:1", "resources": resources}]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def create_pod(api: rest.Client, namespace: str, body: dict[str, Any],
               dry_run: bool = False) -> dict[str, Any]:
    query = "?dryRun=All" if dry_run else ""
    created: dict[str, Any] = api.call("POST", f"/api/v1/namespaces/{namespace}/pods{query}", body)
    return created


def namespace_with(api: rest.Client, labels: dict[str, str]) -> str:
    name = f"optin-{uuid.uuid4().hex[:10]}"
    api.call("POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": labels}})
    account = f"/api/v1/namespaces/{name}/serviceaccounts/default"
    wait_for(f"ServiceAccount {name}/default", lambda: api.request("GET", account)[0] == 200)
    return name


@dataclass
class OptIn:
    cluster: Cluster
    process: subprocess.Popen[bytes]
    log: Path
    labelled: str
    unlabelled: str

    @property
    def api(self) -> rest.Client:
        return self.cluster.api

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def _serving(health_port: int, process: subprocess.Popen[bytes], log: Path) -> bool:
    if process.poll() is not None:
        pytest.fail(f"fabricsched run exited:\n{processes.log_tail(log, 40)}", pytrace=False)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def optin(cluster: Cluster, repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OptIn]:
    # fabricsched run is ready once its CRDs' initial listings are applied.
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(repo_root / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=30s", "-f", str(repo_root / "crds"))
    webhook_port, health_port, extender_port = processes.free_ports(3)
    registration = admission.register(cluster.dir, cluster.api, f"https://127.0.0.1:{webhook_port}")
    log = tmp_path_factory.mktemp("webhook") / "fabricsched-run.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "fabricsched.cli", "run", f"--kubeconfig={cluster.kubeconfig}",
             f"--extender-address=127.0.0.1:{extender_port}", f"--health-address=127.0.0.1:{health_port}",
             *registration.run_flags()],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    labelled = namespace_with(cluster.api, {contract.NAMESPACE_LABEL: contract.NAMESPACE_LABEL_VALUE})
    unlabelled = namespace_with(cluster.api, {})
    try:
        try:
            wait_for("fabricsched run ready", lambda: _serving(health_port, process, log), timeout=60)
        except pytest.fail.Exception:
            print(processes.log_tail(log, 40))  # shown with the failure
            raise
        # The API server picks the configuration up from its informer: probe with dry runs.
        wait_for("the webhook mutates a dry-run GPU pod", lambda: create_pod(
            cluster.api, labelled, pod("probe"), dry_run=True)["spec"]["schedulerName"] == "fabricsched",
            timeout=30)
        yield OptIn(cluster, process, log, labelled, unlabelled)
    finally:
        stop_process(process)
        admission.unregister(cluster.api)
        for namespace in (labelled, unlabelled):
            cluster.api.request("DELETE", f"/api/v1/namespaces/{namespace}")


def test_a_gpu_pod_in_a_labelled_namespace_gets_the_scheduler_name(optin: OptIn) -> None:
    created = create_pod(optin.api, optin.labelled, pod("rank-0"))
    assert created["spec"]["schedulerName"] == "fabricsched"
    stored = optin.api.call("GET", f"/api/v1/namespaces/{optin.labelled}/pods/rank-0")
    assert stored["spec"]["schedulerName"] == "fabricsched"
    assert f"'{optin.labelled}'/'rank-0': scheduler name set: requests 8 nvidia.com/gpu" in optin.log_text()


def test_pods_a_controller_makes_from_a_template_naming_no_scheduler_get_it_too(optin: OptIn) -> None:
    template = {"spec": {k: v for k, v in pod("x")["spec"].items()}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "trainer"},
           "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed", "backoffLimit": 0,
                    "template": template}}
    optin.api.call("POST", f"/apis/batch/v1/namespaces/{optin.labelled}/jobs", job)

    def pods() -> list[dict[str, Any]] | None:
        items: list[dict[str, Any]] = optin.api.call(
            "GET", f"/api/v1/namespaces/{optin.labelled}/pods?labelSelector=job-name%3Dtrainer")["items"]
        return items if len(items) == 2 else None

    made = wait_for("the Job controller's 2 pods", pods, timeout=30)
    assert [p["spec"]["schedulerName"] for p in made] == ["fabricsched", "fabricsched"]
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "Job" for p in made)


@pytest.mark.parametrize(("body", "expected"), [
    (pod("cpu-only", gpus=0), "default-scheduler"),
    (pod("elsewhere", scheduler="volcano"), "volcano"),
], ids=["a pod without GPUs keeps the default scheduler", "another explicit scheduler is kept"])
def test_other_pods_in_a_labelled_namespace_are_stored_as_sent(optin: OptIn, body: dict[str, Any],
                                                               expected: str) -> None:
    assert create_pod(optin.api, optin.labelled, body)["spec"]["schedulerName"] == expected


def test_a_gpu_pod_in_an_unlabelled_namespace_is_untouched(optin: OptIn) -> None:
    created = create_pod(optin.api, optin.unlabelled, pod("rank-0"))
    assert created["spec"]["schedulerName"] == "default-scheduler"
    # The namespace selector keeps the API server from calling the webhook at all.
    assert optin.unlabelled not in optin.log_text()


def test_with_fabricsched_run_stopped_pod_creation_still_succeeds(optin: OptIn) -> None:
    stop_process(optin.process)
    started = time.monotonic()
    created = create_pod(optin.api, optin.labelled, pod("while-down"))
    took = time.monotonic() - started
    assert created["metadata"]["name"] == "while-down"
    assert created["spec"]["schedulerName"] == "default-scheduler"
    # Nothing listens: the call is refused at once, well inside the webhook's timeout.
    assert took < contract.TIMEOUT_SECONDS + 10, f"creation took {took:.1f} s"

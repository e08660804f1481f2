"""The local control plane behaves like a cluster: it schedules by GPUs, runs Jobs,
stops completely, and refuses a bad nodes file before starting anything."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterkit import Cluster, Kubelet, NodeFactory, wait_for

from fabricsched.cluster import components, controlplane, errors, jobset, samples

GPU = "nvidia.com/gpu"


def _pod(name: str, gpus: int, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "nodeSelector": selector,
            "containers": [{"name": "trainer", "image": "trainer:1",
                            "resources": {"limits": {GPU: str(gpus)}}}],
        },
    }


def _node_of(cluster: Cluster, namespace: str, name: str) -> str | None:
    pod = cluster.api.call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    node: str | None = pod["spec"].get("nodeName")
    return node


def test_default_scheduler_binds_an_8_gpu_pod_only_where_8_gpus_are_free(
        cluster: Cluster, namespace: str, node_factory: NodeFactory) -> None:
    node_factory(3, gpus=4)
    full = node_factory(2, gpus=8)
    [free] = node_factory(1, gpus=8)
    pods = f"/api/v1/namespaces/{namespace}/pods"
    # Fill the two full nodes through the scheduler itself, so its cache surely counts them.
    for i, node in enumerate(full):
        filler = f"filler-{i}"
        cluster.api.call("POST", pods, _pod(filler, 8, {"kubernetes.io/hostname": node}))
        assert wait_for(f"{filler} bound", lambda: _node_of(cluster, namespace, filler)) == node  # noqa: B023

    cluster.api.call("POST", pods, _pod("big", 8, node_factory.selector))
    assert wait_for("pod big bound", lambda: _node_of(cluster, namespace, "big")) == free

    # Nothing with 8 free GPUs is left: the next one must stay pending, for that reason.
    cluster.api.call("POST", pods, _pod("big-2", 8, node_factory.selector))

    def unschedulable_for_gpus() -> bool:
        pod = cluster.api.call("GET", f"{pods}/big-2")
        return any(c["type"] == "PodScheduled" and c["status"] == "False" and f"Insufficient {GPU}"
                   in c.get("message", "") for c in pod["status"].get("conditions", []))

    wait_for("big-2 reported unschedulable for lack of GPUs", unschedulable_for_gpus)
    assert _node_of(cluster, namespace, "big-2") is None


def test_indexed_job_pods_are_created_bound_and_complete_the_job(
        cluster: Cluster, namespace: str, node_factory: NodeFactory, kubelet: Kubelet) -> None:
    hosts = node_factory(4, gpus=8)
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
        "spec": {
            "completions": 4, "parallelism": 4, "completionMode": "Indexed", "backoffLimit": 0,
            "template": {"spec": {**_pod("x", 8, node_factory.selector)["spec"], "restartPolicy": "Never"}},
        },
    }
    cluster.api.call("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", job)

    def bound_pods() -> list[dict[str, Any]] | None:
        items: list[dict[str, Any]] = cluster.api.call(
            "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=batch.kubernetes.io/job-name%3Dtrain"
        )["items"]
        return items if len(items) == 4 and all(p["spec"].get("nodeName") for p in items) else None

    pods = wait_for("4 bound pods of job train", bound_pods)
    indexes = sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods)
    assert indexes == ["0", "1", "2", "3"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(hosts)  # 8 GPUs each: one pod per host

    for pod in pods:
        kubelet(namespace, pod["metadata"]["name"], "Running")
        kubelet(namespace, pod["metadata"]["name"], "Succeeded")

    def complete() -> bool:
        status = cluster.api.call("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/train")["status"]
        return status.get("succeeded") == 4 and any(
            c["type"] == "Complete" and c["status"] == "True" for c in status.get("conditions", []))

    wait_for("job train Complete", complete)


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fabricsched.cli", "cluster", *args],
                          capture_output=True, text=True, timeout=timeout)


def _live(pid: int) -> bool:
    """The process exists and is not a zombie (a zombie has released every port and file)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _processes_mentioning(directory: Path) -> list[int]:
    """PIDs of live processes whose command line names ``directory``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(directory) in cmdline and _live(int(proc.name)):
            found.append(int(proc.name))
    return found


def test_cli_up_with_150_nodes_then_down_leaves_no_process(cluster: Cluster, tmp_path: Path) -> None:
    nodes_file = tmp_path / "nodes.yaml"
    nodes_file.write_text(yaml.safe_dump(samples.node_list(samples.sample_fabric(3, 5, 10))))
    directory = tmp_path / "cli-cluster"
    up = _cli("up", "--dir", str(directory), "--nodes", str(nodes_file))
    assert up.returncode == 0, up.stderr
    assert f"export KUBECONFIG={directory / 'kubeconfig'}" in up.stdout
    print(up.stdout)  # the timing line, for the record (pytest -s)

    state = json.loads((directory / "state.json").read_text())
    pids = [p["pid"] for p in state["processes"]]
    # Any extra schedulers the CLI adds come after these four.
    assert [p["component"] for p in state["processes"]][:4] == [
        "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
    listed = subprocess.run([str(cluster.plane.binaries.kubectl), f"--kubeconfig={directory / 'kubeconfig'}",
                             "get", "nodes", "-o", "name"], capture_output=True, text=True, check=True)
    assert len(listed.stdout.split()) == 150

    down = _cli("down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert [pid for pid in pids if _live(pid)] == []
    assert _processes_mentioning(directory) == []
    assert not (directory / "state.json").exists()


def test_a_malformed_nodes_file_is_refused_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "nodes.yaml"
    bad.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: gpu-001}\nstatus: {capacity: [8]}\n")
    directory = tmp_path / "never"
    result = _cli("up", "--dir", str(directory), "--nodes", str(bad))
    assert result.returncode != 0
    assert f"{bad}: document 1: status.capacity must be a mapping" in result.stderr
    assert not (directory / "state.json").exists()
    assert _processes_mentioning(directory) == []


def test_a_failing_component_is_named_with_its_log_and_everything_is_stopped(
        cluster: Cluster, tmp_path: Path) -> None:
    broken = components.SchedulerSpec("broken", "apiVersion: kubescheduler.config.k8s.io/v1\n"
                                                 "kind: KubeSchedulerConfiguration\nnoSuchField: 1\n")
    directory = tmp_path / "failing"
    with pytest.raises(errors.ComponentFailed) as raised:
        controlplane.up(directory, extra_schedulers=[broken],
                        options=controlplane.ControlPlaneOptions(timeout=60))
    message = str(raised.value)
    assert message.startswith("kube-scheduler-broken exited")
    assert "noSuchField" in message  # the tail of the scheduler's own log
    assert not (directory / "state.json").exists()
    assert _processes_mentioning(directory) == []


def _gang_api(cluster: Cluster) -> str:
    version = components.gang_api_version(cluster.plane.binaries.kube_version)
    assert version is not None, f"Kubernetes {cluster.plane.binaries.kube_version} has no gang API"
    return version


def test_the_native_gang_api_is_served_in_scheduling_v1beta1(cluster: Cluster) -> None:
    version = _gang_api(cluster)  # v1beta1 on the pinned 1.37; v1alpha2 on 1.36
    listed = cluster.kubectl("api-resources", "--api-group=scheduling.k8s.io", "-o", "wide").stdout
    rows = {line.split()[0]: line.split() for line in listed.splitlines()[1:]}
    for plural, kind in (("workloads", "Workload"), ("podgroups", "PodGroup")):
        assert plural in rows, listed
        assert f"scheduling.k8s.io/{version}" in rows[plural] and kind in rows[plural], listed
    if version != "v1beta1":
        return  # the object shape below is v1beta1's
    # A gang PodGroup round-trips (the shape of k8s.io/api scheduling/v1beta1 types.go at v1.37).
    group = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "g"},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}}
    created = cluster.api.call("POST", "/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups", group)
    try:
        assert created["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    finally:
        cluster.api.call("DELETE", "/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups/g")


def test_a_plain_job_gets_no_workload_while_workload_with_job_is_off(
        cluster: Cluster, namespace: str, node_factory: NodeFactory) -> None:
    node_factory(1, gpus=8)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "plain"},
           "spec": {"template": {"spec": {**_pod("x", 1, node_factory.selector)["spec"],
                                          "restartPolicy": "Never"}}}}
    cluster.api.call("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
    pods = f"/api/v1/namespaces/{namespace}/pods?labelSelector=batch.kubernetes.io/job-name%3Dplain"
    [pod] = wait_for("the pod of job plain bound", lambda: [
        p for p in cluster.api.call("GET", pods)["items"] if p["spec"].get("nodeName")] or None)
    assert not pod["spec"].get("schedulingGroup") and not pod["spec"].get("workloadRef")
    workloads = f"/apis/scheduling.k8s.io/{_gang_api(cluster)}/namespaces/{namespace}/workloads"
    assert cluster.api.call("GET", workloads)["items"] == []


def test_kwok_renews_every_nodes_lease_and_keeps_declared_conditions(
        cluster: Cluster, node_factory: NodeFactory) -> None:
    [healthy] = node_factory(1)
    [degraded] = node_factory(1)
    condition = {"type": "FabricLinkDegraded", "status": "True", "reason": "SymbolErrors",
                 "message": "mlx5_2"}
    cluster.api.call("PATCH", f"/api/v1/nodes/{degraded}/status", {"status": {"conditions": [condition]}},
                     "application/strategic-merge-patch+json")
    for name in (healthy, degraded):
        lease = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        renewed = wait_for(f"the Lease of {name}", lambda path=lease: (
            (cluster.api.request("GET", path)[1] or {}).get("spec", {}).get("renewTime")))
        assert renewed
    node = cluster.api.call("GET", f"/api/v1/nodes/{degraded}")
    found = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert found["FabricLinkDegraded"] == "True" and found["Ready"] == "True"


def test_a_bound_pod_runs_until_deleted_and_finishes_only_when_asked(
        cluster: Cluster, namespace: str, node_factory: NodeFactory, kubelet: Kubelet) -> None:
    node_factory(1, gpus=8)
    pods = f"/api/v1/namespaces/{namespace}/pods"
    for name in ("stays", "ends"):
        cluster.api.call("POST", pods, {**_pod(name, 1, node_factory.selector),
                                        "metadata": {"name": name}})
    for name in ("stays", "ends"):
        running = kubelet(namespace, name, "Running")
        assert running["status"]["podIP"] and running["status"]["containerStatuses"][0]["ready"] is True
    ended = kubelet(namespace, "ends", "Failed")
    assert ended["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1
    # Nothing finishes the other one: it is still Running after kwok had time to play its stages.
    wait_for("kwok to notice the finished pod", lambda: cluster.api.call("GET", f"{pods}/ends")["status"][
        "phase"] == "Failed")
    assert cluster.api.call("GET", f"{pods}/stays")["status"]["phase"] == "Running"
    cluster.api.call("DELETE", f"{pods}/stays")
    wait_for("the deleted pod gone", lambda: cluster.api.request("GET", f"{pods}/stays")[0] == 404)


def test_the_real_jobset_controller_creates_the_child_jobs_and_their_pods_run(
        cluster: Cluster, namespace: str, node_factory: NodeFactory, jobset_controller: jobset.Controller,
) -> None:
    node_factory(6, gpus=8)
    template = {"spec": {**_pod("x", 8, node_factory.selector)["spec"], "restartPolicy": "Never"}}
    manifest = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "train"},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {
            "parallelism": 3, "completions": 3, "completionMode": "Indexed", "backoffLimit": 0,
            "template": template}}}]},
    }
    jobsets = f"{jobset.API}/namespaces/{namespace}/jobsets"
    # The controller's validating webhook answers on loopback: a success policy naming a
    # replicated job that does not exist is refused by it (no CRD schema can check that).
    bad = {**manifest, "metadata": {"name": "bad"}, "spec": {
        **manifest["spec"], "successPolicy": {"operator": "All", "targetReplicatedJobs": ["nope"]}}}
    status, body = cluster.api.request("POST", jobsets, bad)
    assert status >= 400 and "vjobset.fabricsched.io" in str(body), body
    created = cluster.api.call("POST", jobsets, manifest)

    def child_jobs() -> list[dict[str, Any]] | None:
        selector = "labelSelector=jobset.sigs.k8s.io/jobset-name%3Dtrain"
        items: list[dict[str, Any]] = cluster.api.call(
            "GET", f"/apis/batch/v1/namespaces/{namespace}/jobs?{selector}")["items"]
        return items if len(items) == 2 else None

    jobs = wait_for("the two child Jobs of JobSet train", child_jobs)
    assert sorted(j["metadata"]["name"] for j in jobs) == ["train-workers-0", "train-workers-1"]
    for job in jobs:
        [owner] = job["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("JobSet", "train", True)
        assert job["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"
    indexes = sorted(j["metadata"]["labels"]["jobset.sigs.k8s.io/job-global-index"] for j in jobs)
    assert indexes == ["0", "1"]

    pods = f"/api/v1/namespaces/{namespace}/pods?labelSelector=jobset.sigs.k8s.io/jobset-name%3Dtrain"

    def running() -> list[dict[str, Any]] | None:
        items: list[dict[str, Any]] = cluster.api.call("GET", pods)["items"]
        ok = len(items) == 6 and all(p["status"].get("phase") == "Running" for p in items)
        return items if ok else None

    found = wait_for("the 6 pods of JobSet train Running", running)
    assert len({p["spec"]["nodeName"] for p in found}) == 6  # 8 GPUs each: one pod per host
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-uid"] for p in found} == {
        created["metadata"]["uid"]}

"""Every common training workload lands as one gang (issue 11, items 2-5).

The extender's own cluster (the conftest's ``fabric``, one per module: the 1.37 control plane with
GenericWorkload, the fabricsched kube-scheduler, ``fabricsched run``, 16 kwok nodes of 8 GPUs
in 2 spines x 2 leaves x 4 hosts). Each kind's CRD is the real one, copied from its Go module at
the pin in hack/build-tools.sh; the JobSet controller is the real one and makes the JobSet's
Jobs and pods itself. For the other kinds no controller runs: the test makes the pods exactly
as the controller does (the source file is cited at each). Where the pods bound is measured:
one leaf when the gang fits one, otherwise the fewest leaves under one spine, never a
degraded host, ranks in fabric order.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterkit import find_binaries_or_skip
from harness import REPO, Fabric, leaf_changes, trainer_spec
from waiting import wait_for

from fabricsched.cluster import binaries, jobset, kwok

CRDS = {
    "pytorchjobs.kubeflow.org": "github.com_kubeflow_training-operator-v1.9.3/kubeflow.org_pytorchjobs.yaml",
    "mpijobs.kubeflow.org": "github.com_kubeflow_mpi-operator-v0.8.0/kubeflow.org_mpijobs.yaml",
    "trainjobs.trainer.kubeflow.org":
        "github.com_kubeflow_trainer_v2-v2.3.0/trainer.kubeflow.org_trainjobs.yaml",
    "trainingruntimes.trainer.kubeflow.org":
        "github.com_kubeflow_trainer_v2-v2.3.0/trainer.kubeflow.org_trainingruntimes.yaml",
    "leaderworkersets.leaderworkerset.x-k8s.io":
        "sigs.k8s.io_lws-v0.9.0/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
}
SERVED = {
    "pytorchjobs.kubeflow.org": "/apis/kubeflow.org/v1/pytorchjobs",
    "mpijobs.kubeflow.org": "/apis/kubeflow.org/v2beta1/mpijobs",
    "trainjobs.trainer.kubeflow.org": "/apis/trainer.kubeflow.org/v1alpha1/trainjobs",
    "trainingruntimes.trainer.kubeflow.org": "/apis/trainer.kubeflow.org/v1alpha1/trainingruntimes",
    "leaderworkersets.leaderworkerset.x-k8s.io": "/apis/leaderworkerset.x-k8s.io/v1/leaderworkersets",
}
PLACEMENTS = "/apis/fabricsched.io/v1alpha1/namespaces/{ns}/fabricplacements"
EXAMPLES = REPO / "examples" / "workloads"


@pytest.fixture(scope="module")
def crds(fabric: Fabric) -> None:
    """The training workloads' CRDs from their Go modules (``make tools`` copies them)."""
    find_binaries_or_skip()
    root = binaries.bin_dir() / "crds"
    missing = [path for path in CRDS.values() if not (root / path).is_file()]
    if missing:
        pytest.fail(f"CRDs not built ({', '.join(missing)}): run `make tools`", pytrace=False)
    for name, path in CRDS.items():
        body = yaml.safe_load((root / path).read_text(encoding="utf-8"))
        status, answer = fabric.api.request(
            "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body)
        assert status in (201, 409), (name, status, str(answer)[:300])
        wait_for(f"CRD {name} served", lambda name=name: fabric.api.request("GET", SERVED[name])[0] == 200)


@pytest.fixture(scope="module")
def jobset_controller_here(fabric: Fabric) -> Iterator[jobset.Controller]:
    """The real JobSet controller against this module's cluster."""
    controller = jobset.start(fabric.plane)
    try:
        yield controller
    finally:
        controller.stop()


@pytest.fixture
def degrade(fabric: Fabric, ns: str) -> Iterator[Callable[[list[str]], None]]:
    """``degrade(hosts)``: the hosts labelled degraded (and seen so) for this test only."""
    labelled: list[str] = []

    def apply(hosts: list[str]) -> None:
        for host in hosts:
            fabric.label_health(host, "degraded")
            labelled.append(host)
        for host in hosts:
            wait_for(f"host {host} degraded", lambda host=host: fabric.unhealthy("node", host))

    yield apply
    for host in labelled:
        fabric.label_health(host, None)


def leaves(fabric: Fabric) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for node, leaf in sorted(fabric.leaf_of.items()):
        out.setdefault(leaf, []).append(node)
    return out


def all_but_one_leaf_degraded(fabric: Fabric, degrade: Callable[[list[str]], None]) -> tuple[str, list[str]]:
    """One host degraded in every leaf but the last: a 4-pod gang has one healthy leaf to go to."""
    by_leaf = leaves(fabric)
    healthy = sorted(by_leaf)[-1]
    hosts = [nodes[1] for leaf, nodes in by_leaf.items() if leaf != healthy]
    degrade(hosts)
    return healthy, hosts


def bound(
    fabric: Fabric, namespace: str, count: int, rank_of: Callable[[dict[str, Any]], int | None],
) -> list[str]:
    """Nodes of the ``count`` ranked pods by rank, once all are bound (marked Running)."""

    def ready() -> list[str] | None:
        found = {}
        for pod in fabric.pods(namespace):
            rank = rank_of(pod)
            if rank is not None and not pod["metadata"].get("deletionTimestamp"):
                found[rank] = pod
        if len(found) < count or not all(p["spec"].get("nodeName") for p in found.values()):
            return None
        for pod in found.values():
            if pod["status"].get("phase") == "Pending":
                kwok.finish(fabric.api, namespace, pod["metadata"]["name"], "Running")
        return [found[r]["spec"]["nodeName"] for r in sorted(found)]

    placed: list[str] = wait_for(f"{count} pods of {namespace} bound", ready, timeout=90)
    assert len(placed) == count and len(set(placed)) == count
    return placed


def events(fabric: Fabric, namespace: str, reason: str) -> set[tuple[str, str]]:
    items = fabric.api.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    return {(e["involvedObject"]["kind"], e["involvedObject"]["name"])
            for e in items if e["reason"] == reason}


def scheduling_message(fabric: Fabric, namespace: str, pod: str) -> str:
    """The pod's PodScheduled=False message: what `kubectl describe pod` shows."""
    found = fabric.api.call("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
    for condition in (found.get("status") or {}).get("conditions") or ():
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return str(condition.get("message", ""))
    return ""


def placement(fabric: Fabric, namespace: str, name: str) -> dict[str, Any]:
    def bound_object() -> dict[str, Any] | None:
        status, body = fabric.api.request("GET", PLACEMENTS.format(ns=namespace) + f"/{name}")
        return body if status == 200 and (body.get("status") or {}).get("phase") == "Bound" else None

    found: dict[str, Any] = wait_for(f"FabricPlacement {namespace}/{name} Bound", bound_object, timeout=30)
    return found


def one_leaf_off_degraded(fabric: Fabric, placed: list[str], healthy: str, degraded: list[str]) -> None:
    assert {fabric.leaf_of[n] for n in placed} == {healthy}
    assert not set(placed) & set(degraded)


def label(pod: dict[str, Any], key: str) -> str | None:
    value: str | None = (pod["metadata"].get("labels") or {}).get(key)
    return value


def create_pod(fabric: Fabric, namespace: str, body: dict[str, Any]) -> None:
    fabric.api.call("POST", f"/api/v1/namespaces/{namespace}/pods", body)


def owner_ref(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


# --- JobSet (the real controller) ---------------------------------------------------------

def test_a_jobset_of_two_jobs_of_three_lands_as_one_gang_of_six(
    fabric: Fabric, ns: str, jobset_controller_here: jobset.Controller,
    degrade: Callable[[list[str]], None],
) -> None:
    bad = sorted(fabric.leaf_of)[1]
    degrade([bad])
    job = {"parallelism": 3, "completions": 3, "completionMode": "Indexed", "backoffLimit": 0,
           "template": {"spec": trainer_spec(8)}}
    body = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "llm"},
            "spec": {"replicatedJobs": [{"name": "node", "replicas": 2, "template": {"spec": job}}]}}
    fabric.api.call("POST", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", body)

    def rank(pod: dict[str, Any]) -> int | None:
        index = label(pod, "jobset.sigs.k8s.io/job-global-index")
        completion = label(pod, "batch.kubernetes.io/job-completion-index")
        return None if index is None or completion is None else int(index) * 3 + int(completion)

    placed = bound(fabric, ns, 6, rank)
    assert bad not in placed
    assert len({fabric.leaf_of[n] for n in placed}) == 2 and len({fabric.spine_of[n] for n in placed}) == 1
    assert leaf_changes(fabric, placed) == 1  # ranks follow the fabric: one leaf, then the other
    planned = placement(fabric, ns, "llm")
    assert planned["spec"]["size"] == 6 and [r["node"] for r in planned["spec"]["ranks"]] == placed

    # A host on its path degrades: the Event goes to the JobSet the user submitted.
    degrade([placed[2]])
    wait_for("PathDegraded on the JobSet and its FabricPlacement",
             lambda: {("JobSet", "llm"), ("FabricPlacement", "llm")} <= events(fabric, ns, "PathDegraded"),
             timeout=10)
    fabric.api.call("DELETE", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/llm",
                    {"propagationPolicy": "Foreground"})


# --- PyTorchJob (training-operator v1.9.3) ------------------------------------------------

def test_a_pytorchjob_master_and_workers_land_as_one_gang_in_rank_order(
    fabric: Fabric, ns: str, crds: None, degrade: Callable[[list[str]], None],
) -> None:
    healthy, degraded = all_but_one_leaf_degraded(fabric, degrade)
    template = {"spec": {**trainer_spec(8), "restartPolicy": "OnFailure"}}
    template["spec"]["containers"][0]["name"] = "pytorch"
    job = fabric.api.call("POST", f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs", {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "bert"},
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
            "Worker": {"replicas": 3, "restartPolicy": "OnFailure", "template": template}}}})
    # As training-operator v1.9.3 makes them: pkg/controller.v1/common/pod.go (createNewPod:
    # GenLabels of pkg/controller.v1/common/job_controller.go, replica type in lower case,
    # replica index, job-role=master on the master, the PyTorchJob as controlling owner).
    # Workers first: the rank comes from the labels, not from the order of arrival.
    for replica, index in [("worker", 2), ("worker", 0), ("master", 0), ("worker", 1)]:
        labels = {"training.kubeflow.org/operator-name": "pytorchjob-controller",
                  "training.kubeflow.org/job-name": "bert", "training.kubeflow.org/replica-type": replica,
                  "training.kubeflow.org/replica-index": str(index)}
        if replica == "master":
            labels["training.kubeflow.org/job-role"] = "master"
        create_pod(fabric, ns, {"metadata": {"name": f"bert-{replica}-{index}", "labels": labels,
                                             "ownerReferences": [owner_ref(job)]}, "spec": template["spec"]})

    def rank(pod: dict[str, Any]) -> int | None:
        replica, index = label(pod, "training.kubeflow.org/replica-type"), label(
            pod, "training.kubeflow.org/replica-index")
        return None if index is None else (0 if replica == "master" else int(index) + 1)

    placed = bound(fabric, ns, 4, rank)
    one_leaf_off_degraded(fabric, placed, healthy, degraded)
    assert [r["node"] for r in placement(fabric, ns, "bert")["spec"]["ranks"]] == placed


# --- MPIJob (mpi-operator v0.8.0) ---------------------------------------------------------

def test_mpijob_workers_land_as_one_gang_and_the_launcher_is_not_a_member(
    fabric: Fabric, ns: str, crds: None, degrade: Callable[[list[str]], None],
) -> None:
    healthy, degraded = all_but_one_leaf_degraded(fabric, degrade)
    worker = {"spec": {**trainer_spec(8)}}
    launcher = {"spec": {"schedulerName": "fabricsched", "restartPolicy": "Never",
                         "containers": [{"name": "launcher", "image": "mpi:1"}]}}
    job = fabric.api.call("POST", f"/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs", {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "hvd"},
        "spec": {"slotsPerWorker": 8, "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": launcher},
            "Worker": {"replicas": 4, "template": worker}}}})
    # As mpi-operator v0.8.0 makes the workers: pkg/controller/mpi_job_controller.go (newWorker:
    # defaultLabels + replica-index via workerReplicaIndexLabel; the MPIJob as controlling
    # owner). The real launcher is the pod of the Job hvd-launcher (test_real_controllers.py
    # runs the operator); this one, owned by the MPIJob, asks no GPU, so it is no member either.
    def labels(role: str) -> dict[str, str]:
        return {"training.kubeflow.org/operator-name": "mpi-operator",
                "training.kubeflow.org/job-name": "hvd", "training.kubeflow.org/job-role": role}

    create_pod(fabric, ns, {"metadata": {"name": "hvd-launcher", "labels": labels("launcher"),
                                         "ownerReferences": [owner_ref(job)]}, "spec": launcher["spec"]})
    for index in (3, 1, 0, 2):
        create_pod(fabric, ns, {"metadata": {
            "name": f"hvd-worker-{index}",
            "labels": {**labels("worker"), "training.kubeflow.org/replica-index": str(index)},
            "ownerReferences": [owner_ref(job)]}, "spec": worker["spec"]})

    def rank(pod: dict[str, Any]) -> int | None:
        index = label(pod, "training.kubeflow.org/replica-index")
        return None if index is None else int(index)

    placed = bound(fabric, ns, 4, rank)
    one_leaf_off_degraded(fabric, placed, healthy, degraded)
    assert [r["node"] for r in placement(fabric, ns, "hvd")["spec"]["ranks"]] == placed
    assert placement(fabric, ns, "hvd")["spec"]["size"] == 4  # the launcher asks no GPU


# --- LeaderWorkerSet (the real CRD; pods as its webhook labels them) ----------------------

def test_a_leaderworkerset_group_lands_as_one_gang_ranked_by_worker_index(
    fabric: Fabric, ns: str, crds: None, degrade: Callable[[list[str]], None],
) -> None:
    healthy, degraded = all_but_one_leaf_degraded(fabric, degrade)
    # The LeaderWorkerSet itself, accepted by its real CRD (sigs.k8s.io/lws v0.9.0); no LWS
    # controller runs, so its StatefulSets are not made.
    apply(fabric, ns, EXAMPLES / "leaderworkerset.yaml")
    # As the LeaderWorkerSet controller labels them (pkg/webhooks/pod_webhook.go): the leader
    # StatefulSet's pod serve-0 and the worker StatefulSet's serve-0-1..3 carry name,
    # group-index, worker-index and group-key labels and the size annotation. The pods have no
    # StatefulSet owner (the garbage collector would delete pods whose owner does not exist);
    # the extender reads only these labels.
    for worker in (2, 0, 3, 1):
        name = "serve-0" if worker == 0 else f"serve-0-{worker}"
        create_pod(fabric, ns, {"metadata": {"name": name, "labels": {
            "leaderworkerset.sigs.k8s.io/name": "serve", "leaderworkerset.sigs.k8s.io/group-index": "0",
            "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
            "leaderworkerset.sigs.k8s.io/group-key": "a1b2c3d4e5f60718293a4b5c6d7e8f9001122334"},
            "annotations": {"leaderworkerset.sigs.k8s.io/size": "4"}}, "spec": trainer_spec(8)})

    def rank(pod: dict[str, Any]) -> int | None:
        index = label(pod, "leaderworkerset.sigs.k8s.io/worker-index")
        return None if index is None else int(index)

    placed = bound(fabric, ns, 4, rank)
    one_leaf_off_degraded(fabric, placed, healthy, degraded)
    assert [r["node"] for r in placement(fabric, ns, "serve-0")["spec"]["ranks"]] == placed


# --- native PodGroup (GenericWorkload, scheduling.k8s.io/v1beta1) -------------------------

def test_a_native_podgroup_gang_lands_in_one_leaf_off_degraded_hosts(
    fabric: Fabric, ns: str, degrade: Callable[[list[str]], None],
) -> None:
    healthy, degraded = all_but_one_leaf_degraded(fabric, degrade)
    apply(fabric, ns, EXAMPLES / "podgroup.yaml")
    pods = {p["metadata"]["name"]: p for p in fabric.pods(ns)}
    assert len(pods) == 4
    assert all(p["spec"]["schedulingGroup"]["podGroupName"] == "train" for p in pods.values())
    placed = bound(fabric, ns, 4, lambda p: sorted(pods).index(p["metadata"]["name"]))
    one_leaf_off_degraded(fabric, sorted(placed), healthy, sorted(degraded))
    planned = placement(fabric, ns, "train")
    assert planned["spec"]["size"] == 4 and planned["spec"]["jobUID"] == "podgroup"
    ranks = [r["node"] for r in planned["spec"]["ranks"]]
    assert sorted(ranks) == sorted(placed)


# --- the examples apply as they are -------------------------------------------------------

def apply(fabric: Fabric, namespace: str, path: Path) -> None:
    subprocess.run([str(fabric.plane.binaries.kubectl), f"--kubeconfig={fabric.plane.kubeconfig}", "apply",
                    "-n", namespace, "-f", str(path)], check=True, capture_output=True, timeout=60)


@pytest.mark.parametrize("example", [
    "pytorchjob.yaml", "mpijob.yaml", "trainjob.yaml", "leaderworkerset.yaml",
])
def test_each_example_is_accepted_by_its_real_crd(fabric: Fabric, ns: str, crds: None, example: str) -> None:
    apply(fabric, ns, EXAMPLES / example)


def test_the_jobset_example_lands_as_one_gang(
    fabric: Fabric, ns: str, jobset_controller_here: jobset.Controller,
) -> None:
    apply(fabric, ns, EXAMPLES / "jobset.yaml")
    shape = yaml.safe_load((EXAMPLES / "jobset.yaml").read_text(encoding="utf-8"))
    (replicated,) = shape["spec"]["replicatedJobs"]
    per_job = replicated["template"]["spec"]["parallelism"]
    count = replicated["replicas"] * per_job

    def rank(pod: dict[str, Any]) -> int | None:
        index = label(pod, "jobset.sigs.k8s.io/job-global-index")
        completion = label(pod, "batch.kubernetes.io/job-completion-index")
        return None if index is None or completion is None else int(index) * per_job + int(completion)

    placed = bound(fabric, ns, count, rank)
    assert len({fabric.spine_of[n] for n in placed}) == 1
    assert placement(fabric, ns, shape["metadata"]["name"])["spec"]["size"] == count


# --- a known gang that cannot be sized ---------------------------------------------------

def test_a_jobset_pod_whose_jobset_does_not_exist_waits_named_and_is_never_placed_alone(
    fabric: Fabric, ns: str,
) -> None:
    labels = {"jobset.sigs.k8s.io/jobset-name": "ghost", "jobset.sigs.k8s.io/jobset-uid": "0000-ghost",
              "jobset.sigs.k8s.io/replicatedjob-name": "node", "jobset.sigs.k8s.io/job-index": "0",
              "jobset.sigs.k8s.io/job-global-index": "0", "batch.kubernetes.io/job-completion-index": "0"}
    create_pod(fabric, ns, {"metadata": {"name": "ghost-0", "labels": labels}, "spec": trainer_spec(8)})
    message = wait_for("ghost-0 refused with the reason", lambda: (
        m if "does not exist" in (m := scheduling_message(fabric, ns, "ghost-0")) else None))
    assert "gang not identified: JobSet " in message and "'ghost' does not exist" in message, message
    wait_for("a GangUnresolved Warning naming the pod", lambda: ("Pod", "ghost-0") in events(
        fabric, ns, "GangUnresolved"), timeout=10)
    found = fabric.api.call("GET", f"/api/v1/namespaces/{ns}/pods/ghost-0")
    assert not found["spec"].get("nodeName")


def test_a_gang_whose_pods_ask_different_gpu_counts_is_refused(fabric: Fabric, ns: str) -> None:
    for name, gpus in (("mixed-0", 8), ("mixed-1", 4)):
        annotations = {"leaderworkerset.sigs.k8s.io/size": "2"}
        labels = {"leaderworkerset.sigs.k8s.io/name": "mixed", "leaderworkerset.sigs.k8s.io/group-index": "0",
                  "leaderworkerset.sigs.k8s.io/worker-index": name[-1]}
        create_pod(fabric, ns, {"metadata": {"name": name, "labels": labels, "annotations": annotations},
                                "spec": trainer_spec(gpus)})
    wait_for("mixed-0 refused for its GPU count", lambda: (
        m if "different GPU counts" in (m := scheduling_message(fabric, ns, "mixed-0")) else None))
    wait_for("GangUnresolved", lambda: events(fabric, ns, "GangUnresolved"), timeout=10)
    assert not any(p["spec"].get("nodeName") for p in fabric.pods(ns))

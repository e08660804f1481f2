"""Workloads made by their real controllers land as gangs (the fabricsched scheduler over the
sample fabric: 16 hosts of 8 GPUs, 4 per leaf, 2 leaves per spine).

LeaderWorkerSet (sigs.k8s.io/lws at hack/lws/go.mod's pin): 2 groups of 4 (a leader and 3
workers of 8 GPUs each) with ``RecreateGroupOnPodRestart``; each group is one gang in one leaf,
ranked by worker index. A group restarts when one of its pods is deleted (what an eviction does;
on kwok a container never restarts by itself): the controller deletes the group's leader, the
worker StatefulSet goes with it, and the new pods are placed again as one gang in one leaf.

PyTorchJob (the Kubeflow training operator, kubeflowkit.py): master + 3 workers of 8 GPUs, one
host degraded in every leaf but one: one gang in the healthy leaf, ranked as PyTorch's RANK
(master 0, worker i at i + 1). When a worker fails (its status written Failed with exit code 1,
as a kubelet reports it: kwok never fails a pod by itself), the v1 operator with
``restartPolicy: OnFailure`` deletes that pod alone and makes it again under the same name; the
other ranks keep running and the new pod is placed back in the gang's leaf.

MPIJob ``v2beta1`` (the MPI operator): 4 workers of 8 GPUs are one gang in the healthy leaf,
ranked by replica index; the launcher (a pod of the Job ``<name>-launcher``, no GPU) is bound by
the fabricsched profile outside the gang.

TrainJob (Kubeflow Trainer v2, trainerkit.py, with the JobSet controller): a ClusterTrainingRuntime
in the torch-distributed shape (numNodes 4, the node pod asking 8 GPUs, scheduled by fabricsched)
and a TrainJob of it. The trainer makes a JobSet named after the TrainJob (one replicated Job
``node``, parallelism 4); its 4 pods are one gang in the healthy leaf, ranked by completion
index. When one pod fails, its Job fails (``backoffLimit: 0``) and the JobSet's failure policy
recreates every Job: the 4 new pods are placed again as one gang on their old hosts, rank by
rank. The restart ends every old pod, which releases the plan; the new group (same JobSet UID,
so the same gang) goes back where it ran (test_group_restart.py: also where best fit alone
would pick another leaf).
The shipped TrainJob example runs under the real trainer as one gang too.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import controllerkit
import kubeflowkit
import pytest
import trainerkit
from harness import REPO, Fabric, trainer_spec
from waiting import wait_for

from fabricsched.cluster import jobset, kwok, rest

pytestmark = pytest.mark.integration

PLACEMENTS = "/apis/fabricsched.io/v1alpha1/namespaces/{ns}/fabricplacements"
GROUP = "leaderworkerset.sigs.k8s.io/group-index"
WORKER = "leaderworkerset.sigs.k8s.io/worker-index"


@pytest.fixture(scope="module")
def lws(fabric: Fabric) -> Iterator[controllerkit.Controller]:
    controller = controllerkit.start_lws(fabric.plane)
    try:
        yield controller
    finally:
        controller.stop()


@pytest.fixture(scope="module")
def training_operator(fabric: Fabric) -> Iterator[controllerkit.Controller]:
    controller = kubeflowkit.start_training_operator(fabric.plane)
    try:
        yield controller
    finally:
        controller.stop()


@pytest.fixture(scope="module")
def mpi_operator(fabric: Fabric) -> Iterator[controllerkit.Controller]:
    controller = kubeflowkit.start_mpi_operator(fabric.plane)
    try:
        yield controller
    finally:
        controller.stop()


@pytest.fixture(scope="module")
def trainer(fabric: Fabric) -> Iterator[controllerkit.Controller]:
    """The trainer controller manager, after the JobSet controller (its CRD first; it makes the
    Jobs of the trainer's JobSets)."""
    jobsets = jobset.start(fabric.plane)
    try:
        controller = trainerkit.start_trainer(fabric.plane)
        try:
            yield controller
        finally:
            controller.stop()
    finally:
        jobsets.stop()


@pytest.fixture
def degrade(fabric: Fabric, ns: str) -> Iterator[Callable[[list[str]], None]]:
    """``degrade(hosts)``: the hosts labelled degraded (and seen so) for this test only."""
    labelled: list[str] = []

    def apply(hosts: list[str]) -> None:
        for host in hosts:
            fabric.label_health(host, "degraded")
            labelled.append(host)
        for host in hosts:
            wait_for(f"host {host} degraded", functools.partial(fabric.unhealthy, "node", host))

    yield apply
    for host in labelled:
        fabric.label_health(host, None)


def all_but_one_leaf_degraded(fabric: Fabric, degrade: Callable[[list[str]], None]) -> tuple[str, list[str]]:
    """One host degraded in every leaf but the last: a 4-pod gang has one healthy leaf to go to."""
    by_leaf: dict[str, list[str]] = {}
    for node, leaf in sorted(fabric.leaf_of.items()):
        by_leaf.setdefault(leaf, []).append(node)
    healthy = sorted(by_leaf)[-1]
    hosts = [nodes[1] for leaf, nodes in by_leaf.items() if leaf != healthy]
    degrade(hosts)
    return healthy, hosts


def labels(pod: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = pod["metadata"].get("labels") or {}
    return found


def groups(fabric: Fabric, ns: str, size: int, count: int) -> dict[int, list[dict[str, Any]]]:
    """The live pods of each group by worker index once every group has all ``size`` bound
    (pending ones marked Running, as a kubelet would)."""
    def ready() -> dict[int, list[dict[str, Any]]] | None:
        by_group: dict[int, dict[int, dict[str, Any]]] = {}
        for pod in fabric.pods(ns):
            if pod["metadata"].get("deletionTimestamp") or GROUP not in labels(pod):
                continue
            by_group.setdefault(int(labels(pod)[GROUP]), {})[int(labels(pod)[WORKER])] = pod
        if len(by_group) < count or any(len(pods) < size for pods in by_group.values()):
            return None
        if not all(p["spec"].get("nodeName") for pods in by_group.values() for p in pods.values()):
            return None
        for pods in by_group.values():
            for pod in pods.values():
                if pod["status"].get("phase") == "Pending":
                    kwok.finish(fabric.api, ns, pod["metadata"]["name"], "Running")
        return {g: [pods[w] for w in sorted(pods)] for g, pods in by_group.items()}

    found: dict[int, list[dict[str, Any]]] = wait_for(f"{count} groups of {size} bound", ready, timeout=120)
    return found


def assert_one_gang(fabric: Fabric, ns: str, name: str, pods: list[dict[str, Any]]) -> list[str]:
    nodes = [p["spec"]["nodeName"] for p in pods]
    assert len(set(nodes)) == len(nodes)  # 8-GPU ranks on 8-GPU hosts: no node over its GPUs
    assert len({fabric.leaf_of[n] for n in nodes}) == 1, nodes
    placement = fabric.api.call("GET", PLACEMENTS.format(ns=ns) + f"/{name}")
    assert [r["node"] for r in placement["spec"]["ranks"]] == nodes  # rank order = worker index
    return nodes


def test_a_leaderworkerset_of_two_groups_of_four_lands_as_two_gangs_also_after_a_group_restart(
    fabric: Fabric, ns: str, lws: controllerkit.Controller,
) -> None:
    template = {"spec": trainer_spec(8)}
    template["spec"]["restartPolicy"] = "Always"
    fabric.api.call("POST", f"{controllerkit.LWS_API}/namespaces/{ns}/leaderworkersets", {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "serve"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {
            "size": 4, "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": template, "workerTemplate": template}}})
    found = groups(fabric, ns, size=4, count=2)
    before = {g: assert_one_gang(fabric, ns, f"serve-{g}", pods) for g, pods in found.items()}
    assert len({fabric.leaf_of[nodes[0]] for nodes in before.values()}) == 2
    old = {p["metadata"]["uid"] for p in found[1]}

    fabric.api.call("DELETE", f"/api/v1/namespaces/{ns}/pods/{found[1][2]['metadata']['name']}")

    def restarted() -> bool:
        live = [p for p in fabric.pods(ns) if labels(p).get(GROUP) == "1"
                and not p["metadata"].get("deletionTimestamp")]
        return len(live) == 4 and not {p["metadata"]["uid"] for p in live} & old
    wait_for("group 1 recreated as a whole", restarted, timeout=120)
    again = groups(fabric, ns, size=4, count=2)
    after = assert_one_gang(fabric, ns, "serve-1", again[1])
    assert [p["metadata"]["uid"] for p in again[0]] == [p["metadata"]["uid"] for p in found[0]]
    # The old leaf had room again once the old pods went: the group goes back there.
    assert {fabric.leaf_of[n] for n in after} == {fabric.leaf_of[before[1][0]]}


# --- Kubeflow training jobs -------------------------------------------------------------------

JOB_NAME = "training.kubeflow.org/job-name"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"


def ranked(fabric: Fabric, ns: str, count: int,
           rank_of: Callable[[dict[str, Any]], int | None]) -> dict[int, dict[str, Any]]:
    """The ``count`` live ranked pods by rank once all are bound (pending ones marked Running)."""
    def ready() -> dict[int, dict[str, Any]] | None:
        found = {}
        for pod in fabric.pods(ns):
            rank = rank_of(pod)
            if rank is not None and not pod["metadata"].get("deletionTimestamp") \
                    and pod["status"].get("phase") not in ("Failed", "Succeeded"):
                found[rank] = pod
        if len(found) < count or not all(p["spec"].get("nodeName") for p in found.values()):
            return None
        for pod in found.values():
            if pod["status"].get("phase") == "Pending":
                kwok.finish(fabric.api, ns, pod["metadata"]["name"], "Running")
        return dict(sorted(found.items()))

    pods: dict[int, dict[str, Any]] = wait_for(f"{count} ranked pods bound in {ns}", ready, timeout=120)
    return pods


def assert_in_healthy_leaf(fabric: Fabric, ns: str, name: str, pods: dict[int, dict[str, Any]],
                           healthy: str, degraded: list[str]) -> list[str]:
    nodes = [p["spec"]["nodeName"] for p in pods.values()]
    assert len(set(nodes)) == len(nodes)  # 8-GPU ranks on 8-GPU hosts: no node over its GPUs
    assert {fabric.leaf_of[n] for n in nodes} == {healthy}, nodes
    assert not set(nodes) & set(degraded)
    placement = fabric.api.call("GET", PLACEMENTS.format(ns=ns) + f"/{name}")
    assert placement["spec"]["size"] == len(nodes)
    assert [r["node"] for r in placement["spec"]["ranks"]] == nodes  # rank order
    return nodes


def fail(fabric: Fabric, ns: str, pod: dict[str, Any]) -> None:
    """``pod``'s first container exited 1, as a kubelet writes it (no wait: its controller may
    delete it at once)."""
    container = pod["spec"]["containers"][0]
    terminated = {"exitCode": 1, "reason": "Error"}
    fabric.api.call("PATCH", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/status", {"status": {
        "phase": "Failed", "containerStatuses": [{
            "name": container["name"], "image": container["image"], "imageID": "", "ready": False,
            "restartCount": 0, "state": {"terminated": terminated}}]}}, rest.MERGE_PATCH)


def pytorch_rank(pod: dict[str, Any]) -> int | None:
    """PyTorch's RANK: the master 0, worker i at i + 1."""
    kind, index = labels(pod).get(REPLICA_TYPE), labels(pod).get(REPLICA_INDEX)
    if labels(pod).get(JOB_NAME) != "bert" or index is None:
        return None
    return 0 if kind == "master" else int(index) + 1


def test_a_pytorchjob_of_the_training_operator_lands_as_one_gang_and_a_failed_worker_returns_to_its_leaf(
    fabric: Fabric, ns: str, training_operator: controllerkit.Controller,
    degrade: Callable[[list[str]], None],
) -> None:
    healthy, degraded = all_but_one_leaf_degraded(fabric, degrade)
    template = {"spec": {k: v for k, v in trainer_spec(8).items() if k != "restartPolicy"}}
    template["spec"]["containers"][0]["name"] = "pytorch"  # the operator's default container
    fabric.api.call("POST", f"{kubeflowkit.PYTORCH_API}/namespaces/{ns}/pytorchjobs", {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "bert"},
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
            "Worker": {"replicas": 3, "restartPolicy": "OnFailure", "template": template}}}})
    before = ranked(fabric, ns, 4, pytorch_rank)
    nodes = assert_in_healthy_leaf(fabric, ns, "bert", before, healthy, degraded)

    # Worker 1 (rank 2) fails (its status written as a kubelet reports an exit 1: kwok never
    # fails a pod by itself). With OnFailure the v1 operator deletes that pod alone, at once,
    # and makes it again under the same name; the other ranks keep running.
    failed = before[2]
    fail(fabric, ns, failed)

    def replaced() -> bool:
        now = {pytorch_rank(p): p["metadata"]["uid"] for p in fabric.pods(ns)
               if pytorch_rank(p) is not None and not p["metadata"].get("deletionTimestamp")}
        return now.get(2) not in (None, failed["metadata"]["uid"])
    wait_for("worker 1 made again", replaced, timeout=60)
    after = ranked(fabric, ns, 4, pytorch_rank)
    kept = (0, 1, 3)
    assert [after[r]["metadata"]["uid"] for r in kept] == [before[r]["metadata"]["uid"] for r in kept]
    assert after[2]["metadata"]["name"] == failed["metadata"]["name"]
    again = assert_in_healthy_leaf(fabric, ns, "bert", after, healthy, degraded)
    # The gang's domain: the replacement goes back into the gang's leaf (its old host, the
    # leaf's one free healthy host).
    assert again == nodes


def mpi_rank(pod: dict[str, Any]) -> int | None:
    index = labels(pod).get(REPLICA_INDEX)
    if labels(pod).get(JOB_NAME) != "hvd" or labels(pod).get("training.kubeflow.org/job-role") != "worker":
        return None
    return None if index is None else int(index)


def test_an_mpijob_of_the_mpi_operator_lands_as_one_gang_and_its_launcher_is_no_member(
    fabric: Fabric, ns: str, mpi_operator: controllerkit.Controller,
    degrade: Callable[[list[str]], None],
) -> None:
    healthy, degraded = all_but_one_leaf_degraded(fabric, degrade)
    worker = {"spec": {k: v for k, v in trainer_spec(8).items() if k != "restartPolicy"}}
    launcher = {"spec": {"schedulerName": "fabricsched",
                         "containers": [{"name": "launcher", "image": "mpi:1"}]}}
    fabric.api.call("POST", f"{kubeflowkit.MPI_API}/namespaces/{ns}/mpijobs", {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "hvd"},
        "spec": {"slotsPerWorker": 8, "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": launcher},
            "Worker": {"replicas": 4, "template": worker}}}})
    workers = ranked(fabric, ns, 4, mpi_rank)
    assert_in_healthy_leaf(fabric, ns, "hvd", workers, healthy, degraded)

    def launcher_bound() -> dict[str, Any] | None:
        return next((p for p in fabric.pods(ns) if labels(p).get(JOB_NAME) == "hvd"
                     and labels(p).get("training.kubeflow.org/job-role") == "launcher"
                     and p["spec"].get("nodeName")), None)
    # The launcher asks no GPU: the fabricsched profile binds it like any pod, outside the gang.
    wait_for("the launcher bound", launcher_bound, timeout=60)


def test_an_mpijob_running_its_launcher_as_a_worker_places_its_gpu_launcher_apart_and_its_workers_as_a_gang(
    fabric: Fabric, ns: str, mpi_operator: controllerkit.Controller,
) -> None:
    # With runLauncherAsWorker the launcher asks for GPUs too, but its pod belongs to the Job
    # hvd-launcher (never to the MPIJob): it is that Job's gang of one; the workers, whose
    # indexes the operator pads by one, are the MPIJob's gang of 3.
    spec = {k: v for k, v in trainer_spec(8).items() if k != "restartPolicy"}
    fabric.api.call("POST", f"{kubeflowkit.MPI_API}/namespaces/{ns}/mpijobs", {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "hvd"},
        "spec": {"slotsPerWorker": 8, "runLauncherAsWorker": True, "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {"spec": spec}},
            "Worker": {"replicas": 3, "template": {"spec": spec}}}}})
    def padded(pod: dict[str, Any]) -> int | None:
        index = mpi_rank(pod)
        return None if index is None else index - 1
    workers = ranked(fabric, ns, 3, padded)
    assert sorted(labels(p)[REPLICA_INDEX] for p in workers.values()) == ["1", "2", "3"]
    nodes = [p["spec"]["nodeName"] for p in workers.values()]
    assert len(set(nodes)) == 3 and len({fabric.leaf_of[n] for n in nodes}) == 1
    placement = fabric.api.call("GET", PLACEMENTS.format(ns=ns) + "/hvd")
    assert placement["spec"]["size"] == 3 and [r["node"] for r in placement["spec"]["ranks"]] == nodes

    def launcher_bound() -> dict[str, Any] | None:
        return next((p for p in fabric.pods(ns) if p["spec"].get("nodeName")
                     and labels(p).get("training.kubeflow.org/job-role") == "launcher"), None)
    launcher = wait_for("the GPU launcher bound", launcher_bound, timeout=60)
    assert launcher["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert launcher["spec"]["nodeName"] not in nodes  # 8 GPUs each: no node over its GPUs
    alone: dict[str, Any] = wait_for("the launcher's FabricPlacement", lambda: fabric.api.request(
        "GET", PLACEMENTS.format(ns=ns) + "/hvd-launcher")[1].get("spec"), timeout=30)
    alone = {"spec": alone}
    assert alone["spec"]["size"] == 1
    assert [r["node"] for r in alone["spec"]["ranks"]] == [launcher["spec"]["nodeName"]]


# --- Kubeflow Trainer v2 ------------------------------------------------------------------

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.fixture(scope="module")
def torch_runtime(fabric: Fabric, trainer: controllerkit.Controller) -> Iterator[str]:
    """A ClusterTrainingRuntime shaped like the trainer's torch-distributed one: 4 nodes of 8
    GPUs scheduled by fabricsched; a failed pod fails its Job, and the JobSet restarts once."""
    spec = trainer_spec(8)
    spec["containers"][0]["name"] = "node"  # the trainer's node container (its constants.Node)
    name = "fabricsched-torch"
    path = f"{trainerkit.TRAINER_API}/clustertrainingruntimes"
    fabric.api.call("POST", path, {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {"mlPolicy": {"numNodes": 4, "torch": {}}, "template": {"spec": {
            "failurePolicy": {"maxRestarts": 1},
            "replicatedJobs": [{"name": "node", "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"backoffLimit": 0, "template": {"spec": spec}}}}]}}}})
    try:
        yield name
    finally:
        fabric.api.request("DELETE", f"{path}/{name}")


def train(fabric: Fabric, ns: str, runtime: str, name: str) -> None:
    """TrainJob ``name`` of ``runtime`` on 4 nodes (a ``trainer`` section: the torch plugin then
    sets PyTorch's ``PET_*`` environment on the node container)."""
    fabric.api.call("POST", f"{trainerkit.TRAINER_API}/namespaces/{ns}/trainjobs", {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
        "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                "name": runtime}, "trainer": {"numNodes": 4}}})


def node_rank(name: str) -> Callable[[dict[str, Any]], int | None]:
    """The rank of a pod of TrainJob ``name``: its completion index in the JobSet's one Job."""
    def rank(pod: dict[str, Any]) -> int | None:
        index = labels(pod).get(COMPLETION_INDEX)
        return None if labels(pod).get(JOBSET_NAME) != name or index is None else int(index)
    return rank


def trained_in_the_healthy_leaf(
    fabric: Fabric, ns: str, runtime: str, name: str, degrade: Callable[[list[str]], None],
) -> tuple[dict[int, dict[str, Any]], str, list[str]]:
    """TrainJob ``name`` of ``runtime`` with one leaf healthy: its 4 ranked pods, asserted there,
    and the healthy and degraded sides (``all_but_one_leaf_degraded``)."""
    healthy, degraded = all_but_one_leaf_degraded(fabric, degrade)
    train(fabric, ns, runtime, name)
    pods = ranked(fabric, ns, 4, node_rank(name))
    assert_in_healthy_leaf(fabric, ns, name, pods, healthy, degraded)
    return pods, healthy, degraded


def test_a_trainjob_of_the_real_trainer_lands_as_one_gang_in_the_healthy_leaf(
    fabric: Fabric, ns: str, torch_runtime: str, degrade: Callable[[list[str]], None],
) -> None:
    pods, _, _ = trained_in_the_healthy_leaf(fabric, ns, torch_runtime, "finetune", degrade)
    made = fabric.api.call("GET", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/finetune")
    assert made["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    assert all(p["spec"]["schedulerName"] == "fabricsched" for p in pods.values())
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0].get("env") or ()}
    assert env.get("PET_NNODES") == "4", env  # the real trainer's torch plugin made these pods


def test_a_failed_trainjob_pod_restarts_the_whole_group_and_it_lands_whole_again_in_the_healthy_leaf(
    fabric: Fabric, ns: str, torch_runtime: str, degrade: Callable[[list[str]], None],
) -> None:
    before, healthy, degraded = trained_in_the_healthy_leaf(fabric, ns, torch_runtime, "resume", degrade)
    first = [p["spec"]["nodeName"] for p in before.values()]  # rank order
    old = {p["metadata"]["uid"] for p in before.values()}

    # Rank 2 exits 1 (written as a kubelet reports it: kwok never fails a pod by itself). Its
    # Job fails (backoffLimit 0); the JobSet's failure policy deletes and makes every Job again.
    # Once every old pod ended the gang's plan is released (the JobSet keeps its UID, so the new
    # pods are the same gang, planned again): the group lands whole on its previous hosts again.
    fail(fabric, ns, before[2])

    def recreated() -> bool:
        live = [p for p in fabric.pods(ns) if labels(p).get(JOBSET_NAME) == "resume"
                and not p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") not in ("Failed", "Succeeded")]
        return len(live) == 4 and not {p["metadata"]["uid"] for p in live} & old
    wait_for("the group recreated as a whole", recreated, timeout=120)
    after = ranked(fabric, ns, 4, node_rank("resume"))
    assert all(labels(p).get("jobset.sigs.k8s.io/restart-attempt") == "1" for p in after.values())
    assert assert_in_healthy_leaf(fabric, ns, "resume", after, healthy, degraded) == first  # rank by rank


def test_the_trainjob_example_runs_as_one_gang_under_the_real_trainer(
    fabric: Fabric, ns: str, trainer: controllerkit.Controller,
) -> None:
    # examples/workloads/trainjob.yaml: a namespaced TrainingRuntime of 1 node, the TrainJob
    # asking 4 nodes of 8 GPUs (resourcesPerNode, limits only).
    example = REPO / "examples" / "workloads" / "trainjob.yaml"
    subprocess.run([str(fabric.plane.binaries.kubectl), f"--kubeconfig={fabric.plane.kubeconfig}", "apply",
                    "-n", ns, "-f", str(example)], check=True, capture_output=True, timeout=60)
    pods = ranked(fabric, ns, 4, node_rank("finetune"))
    nodes = [p["spec"]["nodeName"] for p in pods.values()]
    assert len(set(nodes)) == 4 and len({fabric.leaf_of[n] for n in nodes}) == 1, nodes
    placement = fabric.api.call("GET", PLACEMENTS.format(ns=ns) + "/finetune")
    assert placement["spec"]["size"] == 4 and [r["node"] for r in placement["spec"]["ranks"]] == nodes

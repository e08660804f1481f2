"""Gang sources: pods built the way each controller builds them, mapped to (key, size, rank).

The labels, annotations and owner references below are the ones each controller writes:
- Job (Indexed): kubernetes/kubernetes pkg/controller/job/job_controller.go and
  indexed_job_utils.go (``batch.kubernetes.io/job-name``, ``controller-uid``,
  ``job-completion-index``; owner reference to the Job);
- JobSet v0.12.0: kubernetes-sigs/jobset pkg/controllers/jobset_controller.go, with the keys of
  api/jobset/v1alpha2/jobset_types.go (``jobset-name``, ``jobset-uid``, ``replicatedjob-name``,
  ``job-index``, ``job-global-index`` on the child Job's pod template; the pod's owner is
  the child Job);
- PyTorchJob (training-operator v1.9.3): kubeflow/training-operator
  pkg/controller.v1/common/pod.go ``createNewPod`` (``GenLabels``: ``operator-name``,
  ``job-name``; ``replica-type`` in lower case, ``replica-index``, ``job-role: master``) and
  job_controller.go ``GenOwnerReference`` (controller owner reference to the PyTorchJob);
- MPIJob (mpi-operator v0.8.0): kubeflow/mpi-operator pkg/controller/mpi_job_controller.go
  ``defaultLabels`` (``operator-name``, ``job-name``, ``job-role``) and ``newWorker``
  (``replica-index``);
- LeaderWorkerSet v0.10.0: kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go
  and pkg/webhooks/pod_webhook.go (``name``, ``group-index``, ``worker-index``, ``group-key``
  labels; ``size`` annotation);
- native PodGroup (Kubernetes 1.37, ``GenericWorkload``): pod ``spec.schedulingGroup.podGroupName``
  (kubernetes/kubernetes pkg/apis/core/types.go ``PodSchedulingGroup``).
"""

from __future__ import annotations

from typing import Any

import pytest
from gang_lookups import NOBODY, Owners, job

from builders import make_pod
from fabricsched import gangs
from fabricsched.gangs import identity
from fabricsched.gangs import owners as facts
from fabricsched.gangs import sources as src
from fabricsched.ports import jobs
from fabricsched.topology import nodes


def pod(name: str, labels: dict[str, str], owner: tuple[str, str, str] | None = None,
        annotations: dict[str, str] | None = None, gpus: int = 8,
        pod_group: str | None = None) -> nodes.PodUsage:
    builder = make_pod(name, "train").gpus(gpus) if gpus else make_pod(name, "train")
    for key, value in labels.items():
        builder.label(key, value)
    for key, value in (annotations or {}).items():
        builder.annotate(key, value)
    manifest = builder.build()
    if owner is not None:
        kind, owner_name, uid = owner
        manifest["metadata"]["ownerReferences"] = [{
            "apiVersion": "x/v1", "kind": kind, "name": owner_name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True,
        }]
    if pod_group is not None:
        manifest["spec"]["schedulingGroup"] = {"podGroupName": pod_group}
    return nodes.PodUsage.from_manifest(manifest)


def resolve(usage: nodes.PodUsage, owners: Owners) -> gangs.Membership | gangs.Unsized:
    return gangs.resolve(usage, owners)


def not_ours(usage: nodes.PodUsage, owners: Owners) -> bool:
    """The pod requests no GPU: no source makes it a member of any gang."""
    return isinstance(gangs.identify(usage, owners), gangs.NotOurs)


# --- JobSet ---------------------------------------------------------------------------------

TRAINER = gangs.JobSetFacts("llm", "uid-js", (
    gangs.ReplicatedJob("initializer", replicas=1, pods_per_job=1, gpus_per_pod=0),
    gangs.ReplicatedJob("node", replicas=2, pods_per_job=3, gpus_per_pod=8),
))


def jobset_pod(replicated: str, job_index: int, global_index: int, completion: int, gpus: int = 8,
               overrides: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> Any:
    job = f"llm-{replicated}-{job_index}"
    labels = {
        src.JOBSET_NAME: "llm", src.JOBSET_UID: "uid-js", src.JOBSET_REPLICATED_JOB: replicated,
        "jobset.sigs.k8s.io/replicatedjob-replicas": "2", src.JOBSET_JOB_INDEX: str(job_index),
        src.JOBSET_GLOBAL_INDEX: str(global_index), "jobset.sigs.k8s.io/restart-attempt": "0",
        identity.JOB_NAME_LABEL: job, "job-name": job, identity.CONTROLLER_UID_LABEL: f"uid-{job}",
        gangs.COMPLETION_INDEX: str(completion), **(overrides or {}),
    }
    return pod(f"{job}-{completion}-x", labels, ("Job", job, f"uid-{job}"), annotations, gpus=gpus)


def test_a_jobset_of_two_jobs_of_three_is_one_gang_of_six_ranked_by_global_index() -> None:
    owners = Owners(jobsets={"llm": TRAINER})
    found = [resolve(jobset_pod("node", j, 1 + j, c), owners) for j in range(2) for c in range(3)]
    assert all(isinstance(f, gangs.Membership) for f in found)
    members = [f for f in found if isinstance(f, gangs.Membership)]
    assert {(m.source, m.key, m.size) for m in members} == {(gangs.SourceKind.JOBSET, "train/llm@uid-js", 6)}
    assert [m.rank for m in members] == [0, 1, 2, 3, 4, 5]


def test_a_jobset_initializer_without_gpus_is_not_a_member() -> None:
    owners = Owners(jobsets={"llm": TRAINER})
    assert not_ours(jobset_pod("initializer", 0, 0, 0, gpus=0), owners)


def test_a_jobset_that_is_not_known_yet_is_unsized_never_a_lone_pod() -> None:
    found = resolve(jobset_pod("node", 0, 1, 0), Owners())
    assert isinstance(found, gangs.Unsized) and found.missing == "JobSet train/llm"


def test_a_recreated_jobset_with_the_same_name_is_not_mixed_with_the_old_one() -> None:
    owners = Owners(jobsets={"llm": gangs.JobSetFacts("llm", "uid-new", TRAINER.replicated_jobs)})
    assert isinstance(resolve(jobset_pod("node", 0, 1, 0), owners), gangs.Unsized)


# --- PyTorchJob and MPIJob ------------------------------------------------------------------

PYTORCH = gangs.TrainingJobFacts("PyTorchJob", "bert", "uid-pt", {
    "master": gangs.Replica(1, 8), "worker": gangs.Replica(11, 8)})


def pytorch_pod(replica_type: str, index: int) -> Any:
    labels = {"training.kubeflow.org/operator-name": "pytorchjob-controller", src.KUBEFLOW_JOB_NAME: "bert",
              src.KUBEFLOW_REPLICA_TYPE: replica_type, src.KUBEFLOW_REPLICA_INDEX: str(index)}
    if replica_type == "master":
        labels[src.KUBEFLOW_JOB_ROLE] = "master"
    return pod(f"bert-{replica_type}-{index}", labels, ("PyTorchJob", "bert", "uid-pt"))


def test_a_pytorchjob_of_a_master_and_eleven_workers_is_one_gang_of_twelve_in_rank_order() -> None:
    owners = Owners(training={("PyTorchJob", "bert"): PYTORCH})
    found = [resolve(pytorch_pod("master", 0), owners)] + [resolve(pytorch_pod("worker", i), owners)
                                                            for i in range(11)]
    members = [f for f in found if isinstance(f, gangs.Membership)]
    assert len(members) == 12
    assert {(m.source, m.key, m.size) for m in members} == {
        (gangs.SourceKind.TRAINING_JOB, "train/bert@uid-pt", 12)}
    assert [m.rank for m in members] == list(range(12))  # PyTorch RANK: master 0, worker i is i + 1


def test_a_pytorchjob_whose_owner_is_missing_is_unsized_with_the_owner_named() -> None:
    found = resolve(pytorch_pod("worker", 3), Owners())
    assert isinstance(found, gangs.Unsized) and found.missing == "PyTorchJob train/bert"


MPI = gangs.TrainingJobFacts("MPIJob", "hvd", "uid-mpi",
                           {"launcher": gangs.Replica(1, 0), "worker": gangs.Replica(4, 8)})


def mpi_pod(role: str, index: int | None, gpus: int = 8) -> Any:
    labels = {"training.kubeflow.org/operator-name": "mpi-operator", src.KUBEFLOW_JOB_NAME: "hvd",
              src.KUBEFLOW_JOB_ROLE: role}
    if index is not None:
        labels[src.KUBEFLOW_REPLICA_INDEX] = str(index)
    name = f"hvd-{role}" + (f"-{index}" if index is not None else "")
    return pod(name, labels, ("MPIJob", "hvd", "uid-mpi"), gpus=gpus)


def test_mpijob_workers_are_the_gang_and_a_launcher_without_gpus_is_not_a_member() -> None:
    owners = Owners(training={("MPIJob", "hvd"): MPI})
    assert not_ours(mpi_pod("launcher", None, gpus=0), owners)
    members = [resolve(mpi_pod("worker", i), owners) for i in range(4)]
    assert all(isinstance(m, gangs.Membership) and m.size == 4 and m.source is gangs.SourceKind.TRAINING_JOB
               for m in members)
    assert [m.rank for m in members if isinstance(m, gangs.Membership)] == [0, 1, 2, 3]


def test_an_mpijob_running_its_launcher_as_a_worker_ranks_its_workers_from_their_padded_index() -> None:
    # mpi-operator pkg/controller/mpi_job_controller.go, workerReplicaIndexLabel: with
    # runLauncherAsWorker the launcher is index 0 and worker i is labelled i + 1.
    facts = gangs.TrainingJobFacts("MPIJob", "hvd", "uid-mpi", {
        "launcher": gangs.Replica(1, 8), "worker": gangs.Replica(3, 8)}, workers_counted_after_lead=True)
    owners = Owners(training={("MPIJob", "hvd"): facts})
    members = [resolve(mpi_pod("worker", i + 1), owners) for i in range(3)]
    assert [(m.rank, m.size) for m in members if isinstance(m, gangs.Membership)] == [(0, 3), (1, 3), (2, 3)]
    assert isinstance(resolve(mpi_pod("worker", 4), owners), gangs.Unsized)


def real_launcher(gpus: int) -> Any:
    """The launcher as mpi-operator v0.8.0 makes it (seen in tests/integration/
    test_real_controllers.py): the pod of the Job ``hvd-launcher``, never of the MPIJob."""
    labels = {"training.kubeflow.org/operator-name": "mpi-operator", src.KUBEFLOW_JOB_NAME: "hvd",
              src.KUBEFLOW_JOB_ROLE: "launcher", "batch.kubernetes.io/job-name": "hvd-launcher",
              "batch.kubernetes.io/controller-uid": "uid-launcher-job"}
    return pod("hvd-launcher-x7k2p", labels, ("Job", "hvd-launcher", "uid-launcher-job"), gpus=gpus)


def test_an_mpi_launcher_with_gpus_is_its_jobs_gang_of_one_and_never_counted_among_the_workers() -> None:
    facts = gangs.TrainingJobFacts("MPIJob", "hvd", "uid-mpi", {
        "launcher": gangs.Replica(1, 8), "worker": gangs.Replica(4, 8)})
    launcher_job = jobs.JobInfo("train", "hvd-launcher", "uid-launcher-job", 1, 1, finished=False)
    owners = Owners(jobs={"hvd-launcher": launcher_job}, training={("MPIJob", "hvd"): facts})
    launcher = resolve(real_launcher(8), owners)
    assert isinstance(launcher, gangs.Membership), launcher
    assert (launcher.source, launcher.key, launcher.size, launcher.rank) == (
        gangs.SourceKind.JOB, "train/hvd-launcher@uid-launcher-job", 1, None)
    workers = [resolve(mpi_pod("worker", i), owners) for i in range(4)]
    ranked = [(m.rank, m.size) for m in workers if isinstance(m, gangs.Membership)]
    assert ranked == [(i, 4) for i in range(4)]
    # A launcher pod naming the MPIJob itself (no mpi-operator makes one) is refused with the reason.
    refused = resolve(mpi_pod("launcher", 0), owners)
    assert isinstance(refused, gangs.Unsized) and "only MPI workers are gang members" in refused.reason


# --- LeaderWorkerSet ------------------------------------------------------------------------

def lws_pod(group: int, worker: int, size: str = "4") -> Any:
    labels = {src.LWS_NAME: "serve", src.LWS_GROUP_INDEX: str(group), src.LWS_WORKER_INDEX: str(worker),
              src.LWS_GROUP_KEY: f"hash{group}", "leaderworkerset.sigs.k8s.io/template-revision-hash": "abc"}
    name = f"serve-{group}" if worker == 0 else f"serve-{group}-{worker}"
    # Leaders are owned by the leader StatefulSet, workers by their group's: not read.
    owner = ("StatefulSet", "serve" if worker == 0 else f"serve-{group}", f"uid-sts-{group}-{worker > 0}")
    return pod(name, labels, owner, annotations={src.LWS_SIZE: size})


def test_each_leaderworkerset_group_is_one_gang_ranked_by_worker_index() -> None:
    found = [resolve(lws_pod(g, w), Owners()) for g in range(2) for w in range(4)]
    members = [f for f in found if isinstance(f, gangs.Membership)]
    assert len(members) == 8
    assert {m.key for m in members} == {"train/serve-0@hash0", "train/serve-1@hash1"}
    assert [m.rank for m in members] == [0, 1, 2, 3, 0, 1, 2, 3] and {m.size for m in members} == {4}


@pytest.mark.parametrize("size", ["²", "0", "-4", "x" * 1000],
                         ids=["superscript", "zero", "negative", "long"])
def test_a_bad_leaderworkerset_size_is_that_pods_reason(size: str) -> None:
    found = resolve(lws_pod(0, 1, size), Owners())
    assert isinstance(found, gangs.Unsized) and src.LWS_SIZE in found.reason and len(found.reason) < 120


# --- native PodGroup ------------------------------------------------------------------------

def test_a_gang_podgroup_is_the_gang_and_a_basic_one_falls_through() -> None:
    gang = Owners(pod_groups={"pg": gangs.PodGroupFacts("pg", "uid-pg", gang_min_count=3)})
    found = resolve(pod("p-0", {}, pod_group="pg"), gang)
    assert isinstance(found, gangs.Membership)
    assert (found.source, found.key, found.size, found.rank) == (
        gangs.SourceKind.POD_GROUP, "train/pg@podgroup", 3, None)
    basic = Owners(pod_groups={"pg": gangs.PodGroupFacts("pg", "uid-pg", gang_min_count=None)})
    alone = resolve(pod("p-0", {}, pod_group="pg"), basic)
    assert isinstance(alone, gangs.Membership) and alone.source is gangs.SourceKind.POD and alone.size == 1


def test_a_podgroup_that_does_not_exist_yet_is_unsized() -> None:
    found = resolve(pod("p-0", {}, pod_group="pg"), Owners())
    assert isinstance(found, gangs.Unsized) and found.missing == "PodGroup train/'pg'"


# --- precedence, Jobs, lone pods and the one key ---------------------------------------------

def test_the_explicit_gang_label_wins_over_every_other_source() -> None:
    usage = jobset_pod("node", 0, 1, 1, overrides={gangs.GANG_LABEL: "mine"},
                       annotations={gangs.GANG_SIZE_ANNOTATION: "2"})
    found = resolve(usage, Owners(jobsets={"llm": TRAINER}))
    assert isinstance(found, gangs.Membership)
    assert found.source is gangs.SourceKind.EXPLICIT and found.size == 2


def test_indexed_jobs_and_lone_pods_resolve_exactly_as_the_live_path_identifies_them() -> None:
    job_labels = {identity.JOB_NAME_LABEL: "b", identity.CONTROLLER_UID_LABEL: "uid-b",
                  gangs.COMPLETION_INDEX: "1"}
    owners = Owners(jobs={"b": job("b", "uid-b", 4, 4)})
    cases = (pod("b-1", job_labels, ("Job", "b", "uid-b")), pod("b-1", job_labels), pod("solo", {}))
    for usage in cases:
        found = resolve(usage, owners)
        assert isinstance(found, gangs.Membership)
        live = gangs.identify(usage, owners if "b" in usage.name else NOBODY)
        assert isinstance(live, gangs.GangIdentity)
        assert (found.key, found.size, found.rank) == (live.key, live.size, live.rank)
        assert gangs.membership(usage, NOBODY) == (found.key, found.rank)


@pytest.mark.parametrize("label", [src.JOBSET_GLOBAL_INDEX, gangs.COMPLETION_INDEX])
def test_a_forged_jobset_index_is_that_pods_reason(label: str) -> None:
    usage = jobset_pod("node", 0, 1, 0, overrides={label: "²"})
    found = resolve(usage, Owners(jobsets={"llm": TRAINER}))
    assert isinstance(found, gangs.Unsized) and label in found.reason


def test_a_pod_without_gpus_is_not_fabricscheds() -> None:
    assert not_ours(pod("web", {}, gpus=0), NOBODY)


# --- owners from their manifests ----------------------------------------------------------------

def template(gpus: int) -> dict[str, Any]:
    resources = {"limits": {gangs.DEFAULT_GPU_RESOURCE: str(gpus)}} if gpus else {}
    return {"spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]}}


def test_a_jobset_manifest_reads_as_its_replicated_jobs_in_order() -> None:
    manifest = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": "llm", "uid": "uid-js"},
                "spec": {"replicatedJobs": [
                    {"name": "initializer", "template": {"spec": {"template": template(0)}}},
                    {"name": "node", "replicas": 2,
                     "template": {"spec": {"parallelism": 3, "completions": 3, "template": template(8)}}},
                ]}}
    assert facts.jobset_facts(manifest) == TRAINER


def test_a_pytorchjob_manifest_reads_as_its_replica_specs() -> None:
    manifest = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "metadata": {"name": "bert", "uid": "uid-pt"},
                "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template(8)},
                                                 "Worker": {"replicas": 11, "template": template(8)}}}}
    assert facts.training_job_facts(manifest) == PYTORCH


def test_an_mpijob_manifest_reads_its_launcher_without_gpus() -> None:
    manifest = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                "metadata": {"name": "hvd", "uid": "uid-mpi"},
                "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": template(0)},
                                             "Worker": {"replicas": 4, "template": template(8)}}}}
    assert facts.training_job_facts(manifest) == MPI


@pytest.mark.parametrize(("policy", "count"), [({"gang": {"minCount": 3}}, 3), ({"basic": {}}, None)],
                         ids=["gang", "basic"])
def test_a_podgroup_manifest_reads_its_policy(policy: dict[str, Any], count: int | None) -> None:
    manifest = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                "metadata": {"name": "pg", "uid": "uid-pg"}, "spec": {"schedulingPolicy": policy}}
    assert facts.pod_group_facts(manifest) == gangs.PodGroupFacts("pg", "uid-pg", count)


def test_an_owner_with_a_wrong_typed_field_is_invalid_not_a_crash() -> None:
    with pytest.raises(ValueError):
        facts.jobset_facts({"metadata": {"name": "x"},
                          "spec": {"replicatedJobs": [{"name": "a", "replicas": "2"}]}})


# --- one key for every caller -------------------------------------------------------------

def test_gang_key_is_the_key_resolve_and_membership_give_for_every_source() -> None:
    training = {("PyTorchJob", "bert"): PYTORCH, ("MPIJob", "hvd"): MPI}
    owners = Owners(jobsets={"llm": TRAINER}, training=training,
                    pod_groups={"pg": gangs.PodGroupFacts("pg", "uid-pg", gang_min_count=2)})
    pods = [jobset_pod("node", 1, 2, 1), pytorch_pod("worker", 3), mpi_pod("worker", 1), lws_pod(1, 2),
            pod("pg-0", {}, pod_group="pg"), pod("g-0", {gangs.GANG_LABEL: "g"}),
            pod("lone", {})]
    for usage in pods:
        found = gangs.resolve(usage, owners)
        assert isinstance(found, gangs.Membership), (usage.name, found)
        assert gangs.key_of(usage, owners) == found.key, usage.name
        assert gangs.membership(usage, owners) == (found.key, found.rank), usage.name
        # Without its owner known, the pod still has the same key (bind tracking, restore).
        assert gangs.key_of(usage, NOBODY) == found.key, usage.name

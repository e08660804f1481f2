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

from dataclasses import dataclass, field
from typing import Any

import pytest

from builders import make_pod
from fabricsched.extender import gang_sources as src
from fabricsched.extender import gangs
from fabricsched.topology import nodes


@dataclass
class Owners:
    """An in-memory ``OwnerLookup`` (what the adapter would fill from its watches)."""

    jobs: dict[str, gangs.JobFacts] = field(default_factory=dict)
    jobsets: dict[str, src.JobSetFacts] = field(default_factory=dict)
    training: dict[tuple[str, str], src.TrainingJobFacts] = field(default_factory=dict)
    pod_groups: dict[str, src.PodGroupFacts] = field(default_factory=dict)

    def job(self, namespace: str, name: str) -> gangs.JobFacts | None:
        return self.jobs.get(name)

    def jobset(self, namespace: str, name: str) -> src.JobSetFacts | None:
        return self.jobsets.get(name)

    def training_job(self, namespace: str, kind: str, name: str) -> src.TrainingJobFacts | None:
        return self.training.get((kind, name))

    def pod_group(self, namespace: str, name: str) -> src.PodGroupFacts | None:
        return self.pod_groups.get(name)


def pod(name: str, labels: dict[str, str], owner: tuple[str, str, str] | None = None,
        annotations: dict[str, str] | None = None, gpus: int = 8,
        pod_group: str | None = None) -> tuple[nodes.PodUsage, dict[str, Any]]:
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
    return nodes.PodUsage.from_manifest(manifest), manifest["spec"]


def resolve(usage_spec: tuple[nodes.PodUsage, dict[str, Any]], owners: Owners) -> src.Resolution | None:
    return src.resolve(usage_spec[0], usage_spec[1], owners)


# --- JobSet ---------------------------------------------------------------------------------

TRAINER = src.JobSetFacts("llm", "uid-js", (
    src.ReplicatedJob("initializer", replicas=1, pods_per_job=1, gpus_per_pod=0),
    src.ReplicatedJob("node", replicas=2, pods_per_job=3, gpus_per_pod=8),
))


def jobset_pod(replicated: str, job_index: int, global_index: int, completion: int, gpus: int = 8,
               overrides: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> Any:
    job = f"llm-{replicated}-{job_index}"
    labels = {
        src.JOBSET_NAME: "llm", src.JOBSET_UID: "uid-js", src.JOBSET_REPLICATED_JOB: replicated,
        "jobset.sigs.k8s.io/replicatedjob-replicas": "2", src.JOBSET_JOB_INDEX: str(job_index),
        src.JOBSET_GLOBAL_INDEX: str(global_index), "jobset.sigs.k8s.io/restart-attempt": "0",
        gangs.JOB_NAME_LABEL: job, "job-name": job, gangs.CONTROLLER_UID_LABEL: f"uid-{job}",
        gangs.COMPLETION_INDEX: str(completion), **(overrides or {}),
    }
    return pod(f"{job}-{completion}-x", labels, ("Job", job, f"uid-{job}"), annotations, gpus=gpus)


def test_a_jobset_of_two_jobs_of_three_is_one_gang_of_six_ranked_by_global_index() -> None:
    owners = Owners(jobsets={"llm": TRAINER})
    found = [resolve(jobset_pod("node", j, 1 + j, c), owners) for j in range(2) for c in range(3)]
    assert all(isinstance(f, src.Membership) for f in found)
    members = [f for f in found if isinstance(f, src.Membership)]
    assert {(m.source, m.key, m.size) for m in members} == {(src.Source.JOBSET, "train/llm@uid-js", 6)}
    assert [m.rank for m in members] == [0, 1, 2, 3, 4, 5]


def test_a_jobset_initializer_without_gpus_is_not_a_member() -> None:
    owners = Owners(jobsets={"llm": TRAINER})
    assert resolve(jobset_pod("initializer", 0, 0, 0, gpus=0), owners) is None


def test_a_jobset_that_is_not_known_yet_is_unsized_never_a_lone_pod() -> None:
    found = resolve(jobset_pod("node", 0, 1, 0), Owners())
    assert isinstance(found, src.Unsized) and found.missing == "JobSet train/llm"


def test_a_recreated_jobset_with_the_same_name_is_not_mixed_with_the_old_one() -> None:
    owners = Owners(jobsets={"llm": src.JobSetFacts("llm", "uid-new", TRAINER.replicated_jobs)})
    assert isinstance(resolve(jobset_pod("node", 0, 1, 0), owners), src.Unsized)


# --- PyTorchJob and MPIJob ------------------------------------------------------------------

PYTORCH = src.TrainingJobFacts("PyTorchJob", "bert", "uid-pt", {
    "master": src.Replica(1, 8), "worker": src.Replica(11, 8)})


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
    members = [f for f in found if isinstance(f, src.Membership)]
    assert len(members) == 12
    assert {(m.source, m.key, m.size) for m in members} == {(src.Source.PYTORCH_JOB, "train/bert@uid-pt", 12)}
    assert [m.rank for m in members] == list(range(12))  # PyTorch RANK: master 0, worker i is i + 1


def test_a_pytorchjob_whose_owner_is_missing_is_unsized_with_the_owner_named() -> None:
    found = resolve(pytorch_pod("worker", 3), Owners())
    assert isinstance(found, src.Unsized) and found.missing == "PyTorchJob train/bert"


MPI = src.TrainingJobFacts("MPIJob", "hvd", "uid-mpi",
                           {"launcher": src.Replica(1, 0), "worker": src.Replica(4, 8)})


def mpi_pod(role: str, index: int | None, gpus: int = 8) -> Any:
    labels = {"training.kubeflow.org/operator-name": "mpi-operator", src.KUBEFLOW_JOB_NAME: "hvd",
              src.KUBEFLOW_JOB_ROLE: role}
    if index is not None:
        labels[src.KUBEFLOW_REPLICA_INDEX] = str(index)
    name = f"hvd-{role}" + (f"-{index}" if index is not None else "")
    return pod(name, labels, ("MPIJob", "hvd", "uid-mpi"), gpus=gpus)


def test_mpijob_workers_are_the_gang_and_a_launcher_without_gpus_is_not_a_member() -> None:
    owners = Owners(training={("MPIJob", "hvd"): MPI})
    assert resolve(mpi_pod("launcher", None, gpus=0), owners) is None
    members = [resolve(mpi_pod("worker", i), owners) for i in range(4)]
    assert all(isinstance(m, src.Membership) and m.size == 4 and m.source is src.Source.MPI_JOB
               for m in members)
    assert [m.rank for m in members if isinstance(m, src.Membership)] == [0, 1, 2, 3]


def test_an_mpijob_running_its_launcher_as_a_worker_is_ranked_by_the_padded_index() -> None:
    # mpi-operator pkg/controller/mpi_job_controller.go, workerReplicaIndexLabel: with
    # runLauncherAsWorker the launcher is index 0 and worker i is labelled i + 1.
    facts = src.TrainingJobFacts("MPIJob", "hvd", "uid-mpi", {
        "launcher": src.Replica(1, 8), "worker": src.Replica(3, 8)}, workers_counted_after_lead=True)
    owners = Owners(training={("MPIJob", "hvd"): facts})
    ranks = [resolve(mpi_pod("launcher", 0), owners)] + [resolve(mpi_pod("worker", i + 1), owners)
                                                          for i in range(3)]
    assert [m.rank for m in ranks if isinstance(m, src.Membership)] == [0, 1, 2, 3]


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
    members = [f for f in found if isinstance(f, src.Membership)]
    assert len(members) == 8
    assert {m.key for m in members} == {"train/serve-0@hash0", "train/serve-1@hash1"}
    assert [m.rank for m in members] == [0, 1, 2, 3, 0, 1, 2, 3] and {m.size for m in members} == {4}


@pytest.mark.parametrize("size", ["²", "0", "-4", "x" * 1000],
                         ids=["superscript", "zero", "negative", "long"])
def test_a_bad_leaderworkerset_size_is_that_pods_reason(size: str) -> None:
    found = resolve(lws_pod(0, 1, size), Owners())
    assert isinstance(found, src.Unsized) and src.LWS_SIZE in found.reason and len(found.reason) < 120


# --- native PodGroup ------------------------------------------------------------------------

def test_a_gang_podgroup_is_the_gang_and_a_basic_one_falls_through() -> None:
    gang = Owners(pod_groups={"pg": src.PodGroupFacts("pg", "uid-pg", gang_min_count=3)})
    found = resolve(pod("p-0", {}, pod_group="pg"), gang)
    assert isinstance(found, src.Membership)
    assert (found.source, found.key, found.size, found.rank) == (
        src.Source.POD_GROUP, "train/pg@podgroup", 3, None)
    basic = Owners(pod_groups={"pg": src.PodGroupFacts("pg", "uid-pg", gang_min_count=None)})
    alone = resolve(pod("p-0", {}, pod_group="pg"), basic)
    assert isinstance(alone, src.Membership) and alone.source is src.Source.POD and alone.size == 1


def test_a_podgroup_that_does_not_exist_yet_is_unsized() -> None:
    found = resolve(pod("p-0", {}, pod_group="pg"), Owners())
    assert isinstance(found, src.Unsized) and found.missing == "PodGroup train/'pg'"


# --- precedence, Jobs, lone pods and the one key ---------------------------------------------

def test_the_explicit_gang_label_wins_over_every_other_source() -> None:
    usage = jobset_pod("node", 0, 1, 1, overrides={gangs.GANG_LABEL: "mine"},
                       annotations={gangs.GANG_SIZE_ANNOTATION: "2"})
    found = resolve(usage, Owners(jobsets={"llm": TRAINER}))
    assert isinstance(found, src.Membership) and found.source is src.Source.EXPLICIT and found.size == 2


def test_indexed_jobs_and_lone_pods_resolve_exactly_as_the_live_path_identifies_them() -> None:
    job_labels = {gangs.JOB_NAME_LABEL: "b", gangs.CONTROLLER_UID_LABEL: "uid-b", gangs.COMPLETION_INDEX: "1"}
    owners = Owners(jobs={"b": gangs.JobFacts("b", "uid-b", 4, 4)})
    cases = (pod("b-1", job_labels, ("Job", "b", "uid-b")), pod("b-1", job_labels), pod("solo", {}))
    for usage_spec in cases:
        found = resolve(usage_spec, owners)
        assert isinstance(found, src.Membership)
        live = gangs.identify(usage_spec[0], owners.job("train", "b") if "b" in usage_spec[0].name else None)
        assert isinstance(live, gangs.GangIdentity)
        assert (found.key, found.size, found.rank) == (live.key, live.size, live.rank)
        assert gangs.membership(usage_spec[0]) == (found.key, found.rank)


@pytest.mark.parametrize("label", [src.JOBSET_GLOBAL_INDEX, gangs.COMPLETION_INDEX])
def test_a_forged_jobset_index_is_that_pods_reason(label: str) -> None:
    usage = jobset_pod("node", 0, 1, 0, overrides={label: "²"})
    found = resolve(usage, Owners(jobsets={"llm": TRAINER}))
    assert isinstance(found, src.Unsized) and label in found.reason


def test_a_pod_without_gpus_is_not_fabricscheds() -> None:
    assert resolve(pod("web", {}, gpus=0), Owners()) is None


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
    assert src.jobset_facts(manifest) == TRAINER


def test_a_pytorchjob_manifest_reads_as_its_replica_specs() -> None:
    manifest = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "metadata": {"name": "bert", "uid": "uid-pt"},
                "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template(8)},
                                                 "Worker": {"replicas": 11, "template": template(8)}}}}
    assert src.training_job_facts(manifest) == PYTORCH


def test_an_mpijob_manifest_reads_its_launcher_without_gpus() -> None:
    manifest = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                "metadata": {"name": "hvd", "uid": "uid-mpi"},
                "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": template(0)},
                                             "Worker": {"replicas": 4, "template": template(8)}}}}
    assert src.training_job_facts(manifest) == MPI


@pytest.mark.parametrize(("policy", "count"), [({"gang": {"minCount": 3}}, 3), ({"basic": {}}, None)],
                         ids=["gang", "basic"])
def test_a_podgroup_manifest_reads_its_policy(policy: dict[str, Any], count: int | None) -> None:
    manifest = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                "metadata": {"name": "pg", "uid": "uid-pg"}, "spec": {"schedulingPolicy": policy}}
    assert src.pod_group_facts(manifest) == src.PodGroupFacts("pg", "uid-pg", count)


def test_an_owner_with_a_wrong_typed_field_is_invalid_not_a_crash() -> None:
    with pytest.raises(ValueError):
        src.jobset_facts({"metadata": {"name": "x"},
                          "spec": {"replicatedJobs": [{"name": "a", "replicas": "2"}]}})


# --- one key for every caller -------------------------------------------------------------

def test_gang_key_is_the_key_resolve_and_membership_give_for_every_source() -> None:
    training = {("PyTorchJob", "bert"): PYTORCH, ("MPIJob", "hvd"): MPI}
    owners = Owners(jobsets={"llm": TRAINER}, training=training,
                    pod_groups={"pg": src.PodGroupFacts("pg", "uid-pg", gang_min_count=2)})
    pods = [jobset_pod("node", 1, 2, 1), pytorch_pod("worker", 3), mpi_pod("worker", 1), lws_pod(1, 2),
            pod("pg-0", {}, pod_group="pg"), pod("g-0", {gangs.GANG_LABEL: "g"}),
            pod("lone", {})]
    for usage, spec in pods:
        found = src.resolve(usage, spec, owners)
        assert isinstance(found, src.Membership), (usage.name, found)
        assert src.gang_key(usage, owners) == found.key, usage.name
        assert src.membership(usage, owners) == (found.key, found.rank), usage.name
        # Without its owner known, the pod still has the same key (bind tracking, restore).
        assert src.gang_key(usage, Owners()) == found.key, usage.name

"""The workload kinds a gang can come from: one table, read by every part that names them.

The extender reads the owners that size gangs (``OWNER_KINDS``) on demand, Events go to the
workload a user submitted (``api_version``), ``fabricsched explain`` finds a workload's pods by
``pod_label``, and the cluster state keeps the labels under ``LABEL_PREFIXES`` on its pod records.
A new workload kind is one entry here, one source in ``sources``, and read-only RBAC in the chart
(docs/architecture.md, "A new workload kind").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkloadKind:
    kind: str
    group: str
    """API group; empty for the core group."""
    version: str
    plural: str
    pod_label: str
    """Label on the workload's pods whose value is ``pod_value`` of the workload."""
    pod_value: str = "name"
    """``name`` or ``uid``: which of the workload's fields ``pod_label`` carries."""
    sizes_gangs: bool = False
    """The extender reads the object to size and rank its gang (get, list and watch in the chart)."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str, name: str) -> str:
        return f"/apis/{self.api_version}/namespaces/{namespace}/{self.plural}/{name}"

    def pod_selector(self, name: str, uid: str) -> str:
        return f"{self.pod_label}={uid if self.pod_value == 'uid' else name}"


JOB = WorkloadKind("Job", "batch", "v1", "jobs", "batch.kubernetes.io/controller-uid", "uid")
JOBSET = WorkloadKind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", "jobset.sigs.k8s.io/jobset-name",
                      sizes_gangs=True)
PYTORCH_JOB = WorkloadKind("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs",
                           "training.kubeflow.org/job-name", sizes_gangs=True)
MPI_JOB = WorkloadKind("MPIJob", "kubeflow.org", "v2beta1", "mpijobs", "training.kubeflow.org/job-name",
                       sizes_gangs=True)
LEADER_WORKER_SET = WorkloadKind("LeaderWorkerSet", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets",
                                 "leaderworkerset.sigs.k8s.io/name")
# A TrainJob runs as a JobSet of the same name: its pods carry the JobSet's label.
TRAIN_JOB = WorkloadKind("TrainJob", "trainer.kubeflow.org", "v1alpha1", "trainjobs",
                         "jobset.sigs.k8s.io/jobset-name")
POD_GROUP = WorkloadKind("PodGroup", "scheduling.k8s.io", "v1beta1", "podgroups", "", sizes_gangs=True)

KINDS: tuple[WorkloadKind, ...] = (JOB, JOBSET, PYTORCH_JOB, MPI_JOB, LEADER_WORKER_SET, TRAIN_JOB, POD_GROUP)
"""Every kind; ``explain`` tries those with a pod label in this order for a NAME that is no
FabricPlacement, the first that exists winning."""

# A native PodGroup's Workload: read for the topology key of the template the PodGroup came
# from (gangs.constraints); its pods are the PodGroup's, so it is no gang source of its own.
WORKLOAD = WorkloadKind("Workload", "scheduling.k8s.io", "v1beta1", "workloads", "", sizes_gangs=True)

OWNER_KINDS: dict[str, WorkloadKind] = {k.kind: k for k in (*KINDS, WORKLOAD) if k.sizes_gangs}
"""The kinds read on demand to size gangs (and the Workload, for its constraints), by kind name."""

TRAINING_KINDS = (PYTORCH_JOB.kind, MPI_JOB.kind)
"""Kubeflow training jobs: their pods carry ``training.kubeflow.org/job-name``."""

LABEL_PREFIXES = (
    "fabricsched.io/", "batch.kubernetes.io/", "jobset.sigs.k8s.io/", "training.kubeflow.org/",
    "leaderworkerset.sigs.k8s.io/",
)
"""Pod labels the gang conventions read: a pod record kept without them would key as its child
Job, not as the gang it was planned in."""
LEGACY_LABELS = frozenset({"job-name", "controller-uid"})
"""The Job controller's labels before the ``batch.kubernetes.io/`` prefix."""
KUEUE_LABELS = frozenset({"kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/local-queue-name"})
"""Pod labels of a Kueue-managed workload (preemption leaves it alone): ``queue-name`` where the
pod itself was queued, ``local-queue-name`` where Kueue (v0.17 on) labels the pods of every
workload it admitted; a JobSet's or Job's pods never carry ``queue-name`` themselves."""


def named(kind: str) -> WorkloadKind | None:
    return next((k for k in KINDS if k.kind == kind), None)

"""Every workload a gang comes from, in one ordered list: the pod conventions.

In order of precedence (the first source that claims a pod decides; a PodGroup with the basic
policy is no gang and lets the next source decide):

- explicit: label ``fabricsched.io/gang``; size annotation ``fabricsched.io/gang-size`` (else
  its Job's size, else 1); rank its completion index or annotation ``fabricsched.io/rank``;
- native PodGroup: the pod's ``schedulingGroup.podGroupName``; size its gang ``minCount``; rank
  the completion index when there is one;
- JobSet: ``jobset.sigs.k8s.io/jobset-name`` + ``jobset-uid``; size the GPU pods of all its
  replicated Jobs; rank the GPU pods of the Jobs with a lower ``job-global-index`` + the
  completion index;
- PyTorchJob / MPIJob: ``training.kubeflow.org/job-name`` + the owner's UID; a PyTorchJob's
  size the GPU replicas of its replica specs, rank master 0 then worker ``replica-index`` + 1
  (PyTorch's ``RANK``); an MPIJob's size its GPU workers, rank their ``replica-index`` (less
  the launcher's padding). The MPI launcher is no member: mpi-operator makes it as the pod of
  the Job ``<name>-launcher``, which never names the MPIJob, so it is that Job's gang of one;
- LeaderWorkerSet: ``leaderworkerset.sigs.k8s.io/name`` + ``group-index`` (``group-key`` as
  the UID part); size annotation ``leaderworkerset.sigs.k8s.io/size``; rank ``worker-index``;
- Job: its Job (owner reference, else the Job controller's labels); size min(parallelism,
  completions); rank the completion index;
- lone pod: a gang of one, keyed by the pod's UID.

Each source knows its key (from the pod alone, so a pod whose owner is gone or not read yet
still finds its gang), its size and rank (through ``owners.OwnerLookup``) and its workload
object. A pod whose source is known but whose gang cannot be sized is ``Unsized``, never a lone
pod. Every label is read with ``parsing`` (ASCII digits, bounded), so a forged value is that
pod's reason and no one else's.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable
from dataclasses import dataclass

from fabricsched import ids, parsing
from fabricsched.gangs import identity, kinds, owners
from fabricsched.gangs.keys import POD_GROUP_MARKER, GangRef
from fabricsched.ports import notices
from fabricsched.topology import nodes

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
KUBEFLOW_JOB_NAME = "training.kubeflow.org/job-name"
KUBEFLOW_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KUBEFLOW_REPLICA_INDEX = "training.kubeflow.org/replica-index"
KUBEFLOW_JOB_ROLE = "training.kubeflow.org/job-role"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
MAX_SHOWN = 63
"""Characters of a name from a pod shown in a reason (an object name or label value is at most 63)."""


class SourceKind(enum.StrEnum):
    EXPLICIT = "explicit"
    POD_GROUP = "podgroup"
    JOBSET = "jobset"
    TRAINING_JOB = "trainingjob"
    LEADER_WORKER_SET = "leaderworkerset"
    JOB = "job"
    POD = "pod"
    """A lone GPU pod: a gang of one."""


@dataclass(frozen=True)
class Membership:
    """A pod's gang: the same key for every pod of it, whatever asks."""

    source: SourceKind
    ref: GangRef
    size: int
    rank: int | None
    """None: no rank of its own (the book assigns one)."""
    job_name: str | None = None
    """The owning Job (explicit gangs and Jobs)."""

    @property
    def key(self) -> ids.GangKey:
        return self.ref.key


@dataclass(frozen=True)
class Unsized:
    """A known gang source whose gang cannot be sized now: never placed as a lone pod."""

    source: SourceKind
    reason: str
    missing: str = ""
    """The owner object that is missing, e.g. ``JobSet train/llm`` (for the Warning Event)."""


Resolution = Membership | Unsized


@dataclass(frozen=True)
class Source:
    """One workload convention: whether it decides a pod's gang, and what it says of it."""

    kind: SourceKind
    claims: Callable[[nodes.PodUsage, owners.OwnerLookup], bool]
    ref: Callable[[nodes.PodUsage], GangRef]
    """The gang's key parts, from the pod alone."""
    resolve: Callable[[nodes.PodUsage, owners.OwnerLookup, str], Resolution]
    """Size and rank; may raise ``parsing.Invalid`` (the caller makes it ``Unsized``)."""
    workload: Callable[[nodes.PodUsage, GangRef, str], notices.ObjectRef | None]
    """The object a user submitted, given the PodGroup's UID when known (Events go there)."""
    owner: Callable[[nodes.PodUsage], tuple[str, str, str] | None]
    """(kind, name, uid) of the object to read to size the gang (None: the pod alone says it)."""


# --- the key parts of each source --------------------------------------------------------

def _job_names(pod: nodes.PodUsage) -> tuple[str, str | None, str]:
    """(gang name, Job name, UID part of the key) of an explicit, Job or lone-pod gang."""
    owner = identity.job_reference(pod)
    labels = pod.labels
    job_name = owner[0] if owner else labels.get(identity.JOB_NAME_LABEL) or labels.get(
        identity.LEGACY_JOB_NAME_LABEL)
    name = labels.get(identity.GANG_LABEL) or job_name or pod.name
    # Without an owner reference, the Job controller's own label still names the Job's UID.
    job_uid = owner[1] if owner else (labels.get(identity.CONTROLLER_UID_LABEL, "") if job_name else "")
    if job_name is None and identity.GANG_LABEL not in labels:
        job_uid = pod.uid  # a lone pod is its own gang; pods sharing a gang label share one key
    return name, job_name, job_uid


def _job_ref(pod: nodes.PodUsage) -> GangRef:
    name, _, uid = _job_names(pod)
    return GangRef(pod.namespace, name, uid)


def _pod_group_ref(pod: nodes.PodUsage) -> GangRef:
    return GangRef(pod.namespace, pod.pod_group or "", POD_GROUP_MARKER)


def _jobset_ref(pod: nodes.PodUsage) -> GangRef:
    return GangRef(pod.namespace, pod.labels.get(JOBSET_NAME, ""), pod.labels.get(JOBSET_UID, ""))


def _training_ref(pod: nodes.PodUsage) -> GangRef:
    owner = pod.owner
    uid = owner[2] if owner is not None and owner[0] in kinds.TRAINING_KINDS else ""
    return GangRef(pod.namespace, pod.labels.get(KUBEFLOW_JOB_NAME, ""), uid)


def _lws_ref(pod: nodes.PodUsage) -> GangRef:
    group = pod.labels.get(LWS_GROUP_INDEX, "")
    # A bad index: resolve refuses the pod with the reason; the key only has to be stable.
    with contextlib.suppress(parsing.Invalid):
        group = str(parsing.count(group, f"label {LWS_GROUP_INDEX}", identity.MAX_INDEX))
    # group-key is a hash that changes when the group is recreated: a new plan, as a Job UID gives.
    name = f"{pod.labels.get(LWS_NAME, '')}-{group}"
    return GangRef(pod.namespace, name, pod.labels.get(LWS_GROUP_KEY, ""))


# --- what claims a pod --------------------------------------------------------------------

def _claims_pod_group(pod: nodes.PodUsage, lookup: owners.OwnerLookup) -> bool:
    if not pod.pod_group:
        return False
    try:
        facts = lookup.pod_group(pod.namespace, pod.pod_group)
    except parsing.Invalid:
        return True  # unreadable: resolve refuses the pod with the reason
    return facts is None or facts.gang_min_count is not None


def _labelled(label: str) -> Callable[[nodes.PodUsage, owners.OwnerLookup], bool]:
    return lambda pod, _lookup: bool(pod.labels.get(label))


def _claims_training(pod: nodes.PodUsage, _lookup: owners.OwnerLookup) -> bool:
    """A training job's pod, but not an MPI launcher made by its Job (the module docstring)."""
    if not pod.labels.get(KUBEFLOW_JOB_NAME):
        return False
    owner = pod.owner
    launcher = pod.labels.get(KUBEFLOW_JOB_ROLE) == "launcher"
    return not (launcher and owner is not None and owner[0] == kinds.JOB.kind)


def _has_job(pod: nodes.PodUsage, _lookup: owners.OwnerLookup) -> bool:
    return _job_names(pod)[1] is not None


# --- sizes and ranks ----------------------------------------------------------------------

def _explicit_or_job(source: SourceKind) -> Callable[[nodes.PodUsage, owners.OwnerLookup, str], Resolution]:
    def resolve(pod: nodes.PodUsage, lookup: owners.OwnerLookup, _gpu_resource: str) -> Resolution:
        name, job_name, job_uid = _job_names(pod)
        job = lookup.job(pod.namespace, job_name) if job_name else None
        if job is not None and (job_name != job.name or (job_uid and job_uid != job.uid)):
            job = None  # facts of another Job (or an older one of the same name): do not mix
        size_text = pod.annotations.get(identity.GANG_SIZE_ANNOTATION)
        if size_text is not None:
            size = parsing.count(size_text, f"annotation {identity.GANG_SIZE_ANNOTATION}",
                                 identity.MAX_GANG_SIZE, minimum=1)
        elif job_name is None:
            size = 1  # a lone pod: a single-pod gang (rule 3)
        elif job is None:
            shown = f"Job {pod.namespace}/{job_name}"
            return Unsized(source, f"{shown} is not known yet", shown)
        else:
            size = min(job.pods, identity.MAX_GANG_SIZE)
        rank = identity.rank_of(pod)
        if rank is not None and rank >= size:
            return Unsized(source, f"rank {rank} is outside a gang of {size}")
        return Membership(source, GangRef(pod.namespace, name, job_uid), size, rank, job_name)
    return resolve


def _resolve_pod_group(pod: nodes.PodUsage, lookup: owners.OwnerLookup, _gpu_resource: str) -> Resolution:
    name = pod.pod_group or ""
    facts = lookup.pod_group(pod.namespace, name)
    shown = f"PodGroup {pod.namespace}/{parsing.excerpt(name)}"
    if facts is None:
        return Unsized(SourceKind.POD_GROUP, f"waiting for {shown}", shown)
    if facts.gang_min_count is None or facts.gang_min_count < 1:
        return Unsized(SourceKind.POD_GROUP, f"{shown} has a gang minCount below 1")
    rank = identity.index_label(pod, identity.COMPLETION_INDEX)
    return Membership(SourceKind.POD_GROUP, _pod_group_ref(pod),
                      min(facts.gang_min_count, identity.MAX_GANG_SIZE), rank)


def _resolve_jobset(pod: nodes.PodUsage, lookup: owners.OwnerLookup, _gpu_resource: str) -> Resolution:
    ref = _jobset_ref(pod)
    shown = f"JobSet {pod.namespace}/{ref.name}"
    facts = lookup.jobset(pod.namespace, ref.name)
    if facts is None or (ref.uid and facts.uid != ref.uid):
        return Unsized(SourceKind.JOBSET, f"waiting for {shown}", shown)
    members = [rj for rj in facts.replicated_jobs if rj.gpus_per_pod > 0]
    size = sum(rj.replicas * rj.pods_per_job for rj in members)
    own = pod.labels.get(JOBSET_REPLICATED_JOB, "")
    if own not in {rj.name for rj in members}:
        return Unsized(SourceKind.JOBSET,
                       f"replicated Job {parsing.excerpt(own)} is not a GPU Job of {shown}")
    global_index = identity.index_label(pod, JOBSET_GLOBAL_INDEX)
    if global_index is None:
        job_index = identity.index_label(pod, JOBSET_JOB_INDEX)
        global_index = None if job_index is None else _global_starts(facts.replicated_jobs)[own] + job_index
    completion = identity.index_label(pod, identity.COMPLETION_INDEX)
    rank = None
    if global_index is not None and completion is not None:
        rank = _pods_before(facts.replicated_jobs, global_index) + completion
        if rank >= size:
            return Unsized(SourceKind.JOBSET, f"rank {rank} is outside {shown}'s {size} GPU pods")
    return Membership(SourceKind.JOBSET, ref, min(size, identity.MAX_GANG_SIZE), rank)


def _global_starts(replicated: tuple[owners.ReplicatedJob, ...]) -> dict[str, int]:
    """The first ``job-global-index`` of each replicated Job: Jobs are numbered in spec order."""
    out: dict[str, int] = {}
    start = 0
    for rj in replicated:
        out[rj.name] = start
        start += rj.replicas
    return out


def _pods_before(replicated: tuple[owners.ReplicatedJob, ...], global_index: int) -> int:
    """GPU pods of the Jobs whose ``job-global-index`` is below ``global_index``."""
    before, start = 0, 0
    for rj in replicated:
        jobs_before = max(0, min(rj.replicas, global_index - start))
        if rj.gpus_per_pod > 0:
            before += jobs_before * rj.pods_per_job
        start += rj.replicas
    return before


def _resolve_training_job(pod: nodes.PodUsage, lookup: owners.OwnerLookup, _gpu_resource: str) -> Resolution:
    name = pod.labels.get(KUBEFLOW_JOB_NAME, "")
    owner = pod.owner
    if owner is None or owner[0] not in kinds.TRAINING_KINDS:
        # The job the label names, so a user can find it (it may be gone, or never have existed).
        # A label value is at most 63 characters (the API server's rule); cut anyway.
        shown = f"{pod.namespace[:MAX_SHOWN]}/{name[:MAX_SHOWN]}"
        reason = (f"pod carries {KUBEFLOW_JOB_NAME}={name[:MAX_SHOWN]} but no PyTorchJob or MPIJob "
                  f"owner reference: is training job {shown} gone?")
        return Unsized(SourceKind.TRAINING_JOB, reason, f"PyTorchJob or MPIJob {shown}")
    kind, owner_name, uid = owner
    shown = f"{kind} {pod.namespace}/{owner_name}"
    facts = lookup.training_job(pod.namespace, kind, owner_name)
    if facts is None or facts.uid != uid:
        return Unsized(SourceKind.TRAINING_JOB, f"waiting for {shown}", shown)
    role = (pod.labels.get(KUBEFLOW_REPLICA_TYPE) or pod.labels.get(KUBEFLOW_JOB_ROLE) or "").lower()
    if kind == kinds.MPI_JOB.kind:
        return _mpi_worker(pod, facts, role, shown)
    members = {t: r for t, r in facts.replicas.items() if r.gpus_per_pod > 0}
    size = sum(r.replicas for r in members.values())
    index = identity.index_label(pod, KUBEFLOW_REPLICA_INDEX)
    lead = "master"
    if role not in members:
        return Unsized(SourceKind.TRAINING_JOB,
                       f"replica type {parsing.excerpt(role)} of {shown} has no GPU replicas")
    if index is None:
        return Unsized(SourceKind.TRAINING_JOB, f"pod of {shown} without {KUBEFLOW_REPLICA_INDEX}")
    # The master is rank 0 and the workers follow it, as PyTorch's RANK does.
    offset = members[lead].replicas if lead in members else 0
    rank = index if role == lead else offset + index
    if rank >= size:
        return Unsized(SourceKind.TRAINING_JOB, f"rank {rank} is outside {shown}'s {size} GPU replicas")
    return Membership(SourceKind.TRAINING_JOB, _training_ref(pod), min(size, identity.MAX_GANG_SIZE), rank)


def _mpi_worker(pod: nodes.PodUsage, facts: owners.TrainingJobFacts, role: str, shown: str) -> Resolution:
    """An MPIJob's gang: its GPU workers, ranked by ``replica-index``; with
    ``runLauncherAsWorker`` mpi-operator pads worker i's index to i + 1 (the launcher is 0)."""
    if role != "worker":
        what = parsing.excerpt(role) or "unlabelled"
        return Unsized(SourceKind.TRAINING_JOB, f"{what} pod of {shown}: only MPI workers are gang members "
                       "(mpi-operator runs the launcher as a Job's pod)")
    workers = facts.replicas.get("worker")
    if workers is None or workers.gpus_per_pod <= 0:
        return Unsized(SourceKind.TRAINING_JOB, f"{shown} has no GPU workers")
    index = identity.index_label(pod, KUBEFLOW_REPLICA_INDEX)
    if index is None:
        return Unsized(SourceKind.TRAINING_JOB, f"pod of {shown} without {KUBEFLOW_REPLICA_INDEX}")
    rank = index - 1 if facts.workers_counted_after_lead else index
    if not 0 <= rank < workers.replicas:
        return Unsized(SourceKind.TRAINING_JOB,
                       f"worker index {index} is outside {shown}'s {workers.replicas} GPU workers")
    size = min(workers.replicas, identity.MAX_GANG_SIZE)
    return Membership(SourceKind.TRAINING_JOB, _training_ref(pod), size, rank)


def _resolve_lws(pod: nodes.PodUsage, _lookup: owners.OwnerLookup, _gpu_resource: str) -> Resolution:
    group = identity.index_label(pod, LWS_GROUP_INDEX)
    size_text = pod.annotations.get(LWS_SIZE)
    if group is None or size_text is None:
        reason = f"LeaderWorkerSet pod without {LWS_GROUP_INDEX} or {LWS_SIZE}"
        return Unsized(SourceKind.LEADER_WORKER_SET, reason)
    size = parsing.count(size_text, f"annotation {LWS_SIZE}", identity.MAX_GANG_SIZE, minimum=1)
    rank = identity.index_label(pod, LWS_WORKER_INDEX)
    if rank is not None and rank >= size:
        return Unsized(SourceKind.LEADER_WORKER_SET, f"worker index {rank} is outside a group of {size}")
    return Membership(SourceKind.LEADER_WORKER_SET, _lws_ref(pod), size, rank)


# --- workload objects ---------------------------------------------------------------------

def _ref_of(kind: kinds.WorkloadKind, name: str, uid: str, namespace: str) -> notices.ObjectRef:
    return notices.ObjectRef(kind.api_version, kind.kind, name, uid, namespace)


def _job_workload(pod: nodes.PodUsage, _ref: GangRef, _pod_group_uid: str) -> notices.ObjectRef | None:
    job = identity.job_reference(pod)
    return None if job is None else _ref_of(kinds.JOB, job[0], job[1], pod.namespace)


def _pod_group_workload(pod: nodes.PodUsage, ref: GangRef, pod_group_uid: str) -> notices.ObjectRef | None:
    return _ref_of(kinds.POD_GROUP, ref.name, pod_group_uid, pod.namespace)


def _jobset_workload(pod: nodes.PodUsage, ref: GangRef, _pod_group_uid: str) -> notices.ObjectRef | None:
    # A TrainJob's Events go to the JobSet it runs as (its pods name only the JobSet).
    return _ref_of(kinds.JOBSET, ref.name, ref.uid, pod.namespace)


def _training_workload(pod: nodes.PodUsage, _ref: GangRef, _pod_group_uid: str) -> notices.ObjectRef | None:
    owner = pod.owner
    if owner is None or owner[0] not in kinds.TRAINING_KINDS:
        return None
    kind = kinds.named(owner[0])
    return None if kind is None else _ref_of(kind, owner[1], owner[2], pod.namespace)


def _lws_workload(pod: nodes.PodUsage, _ref: GangRef, _pod_group_uid: str) -> notices.ObjectRef | None:
    return _ref_of(kinds.LEADER_WORKER_SET, pod.labels.get(LWS_NAME, ""), "", pod.namespace)


def _no_workload(_pod: nodes.PodUsage, _ref: GangRef, _pod_group_uid: str) -> notices.ObjectRef | None:
    return None  # a lone pod's gang: its FabricPlacement has the Events


def _job_owner(pod: nodes.PodUsage) -> tuple[str, str, str] | None:
    _, job_name, _ = _job_names(pod)
    return None if job_name is None else (kinds.JOB.kind, job_name, "")


def _pod_group_owner(pod: nodes.PodUsage) -> tuple[str, str, str] | None:
    return kinds.POD_GROUP.kind, pod.pod_group or "", ""


def _jobset_owner(pod: nodes.PodUsage) -> tuple[str, str, str] | None:
    ref = _jobset_ref(pod)
    return kinds.JOBSET.kind, ref.name, ref.uid


def _training_owner(pod: nodes.PodUsage) -> tuple[str, str, str] | None:
    owner = pod.owner
    return owner if owner is not None and owner[0] in kinds.TRAINING_KINDS else None


def _no_owner(_pod: nodes.PodUsage) -> tuple[str, str, str] | None:
    return None


SOURCES: tuple[Source, ...] = (
    Source(SourceKind.EXPLICIT, lambda pod, _lookup: identity.GANG_LABEL in pod.labels, _job_ref,
           _explicit_or_job(SourceKind.EXPLICIT), _job_workload, _job_owner),
    Source(SourceKind.POD_GROUP, _claims_pod_group, _pod_group_ref, _resolve_pod_group, _pod_group_workload,
           _pod_group_owner),
    Source(SourceKind.JOBSET, _labelled(JOBSET_NAME), _jobset_ref, _resolve_jobset, _jobset_workload,
           _jobset_owner),
    Source(SourceKind.TRAINING_JOB, _claims_training, _training_ref, _resolve_training_job,
           _training_workload, _training_owner),
    Source(SourceKind.LEADER_WORKER_SET, _labelled(LWS_NAME), _lws_ref, _resolve_lws, _lws_workload,
           _no_owner),
    Source(SourceKind.JOB, _has_job, _job_ref, _explicit_or_job(SourceKind.JOB), _job_workload, _job_owner),
    Source(SourceKind.POD, lambda _pod, _lookup: True, _job_ref, _explicit_or_job(SourceKind.POD),
           _no_workload, _no_owner),
)
"""In precedence order; the last claims every pod."""

"""Every workload a gang comes from, mapped to (gang key, size, rank): the pod conventions.

In order of precedence (the first source a pod carries decides; a PodGroup with the basic
policy is no gang and lets the next source decide):

- explicit: label ``fabricsched.io/gang``; size annotation ``fabricsched.io/gang-size``; rank
  annotation ``fabricsched.io/rank`` (``gangs.identify``, unchanged);
- native PodGroup: ``spec.schedulingGroup.podGroupName`` + the PodGroup's UID; size its gang
  ``minCount``; rank the completion index when there is one;
- JobSet: ``jobset.sigs.k8s.io/jobset-name`` + ``jobset-uid``; size the GPU pods of all its
  replicated Jobs; rank the GPU pods of the Jobs with a lower ``job-global-index`` + the
  completion index;
- PyTorchJob / MPIJob: ``training.kubeflow.org/job-name`` + the owner's UID; size the GPU
  replicas of its replica specs; rank master 0 then worker ``replica-index`` + 1 (PyTorch's
  ``RANK``), MPI workers by ``replica-index`` (after a launcher only if it has GPUs);
- LeaderWorkerSet: ``leaderworkerset.sigs.k8s.io/name`` + ``group-index`` (``group-key`` as
  the UID part); size annotation ``leaderworkerset.sigs.k8s.io/size``; rank ``worker-index``;
- Job or lone pod: ``gangs.identify`` (an Indexed Job by its UID; a lone pod is its own gang).

Pure: what a pod's owners say (a JobSet's replicated Jobs, a PyTorchJob's replica specs, a
PodGroup's policy) comes through ``OwnerLookup``, a small typed port the adapter implements
from its watches. A pod whose source is known but whose gang cannot be sized is ``Unsized``,
never a lone pod: the caller fails every node with the reason. Every label is read with
``parsing`` (ASCII digits, bounded), so a forged value is that pod's reason and no one else's.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from fabricsched import ids, parsing
from fabricsched.extender import gangs
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
TRAINING_KINDS = ("PyTorchJob", "MPIJob")

_MAX_INDEX = gangs.MAX_GANG_SIZE - 1


class Source(enum.StrEnum):
    EXPLICIT = "explicit"
    POD_GROUP = "podgroup"
    JOBSET = "jobset"
    PYTORCH_JOB = "pytorchjob"
    MPI_JOB = "mpijob"
    LEADER_WORKER_SET = "leaderworkerset"
    JOB = "job"
    POD = "pod"
    """A lone GPU pod: a gang of one."""


@dataclass(frozen=True)
class ReplicatedJob:
    """One ``spec.replicatedJobs[]`` entry of a JobSet, in spec order."""

    name: str
    replicas: int
    pods_per_job: int
    """min(parallelism, completions) of its Job template."""
    gpus_per_pod: int
    """0 for Jobs without GPUs (a TrainJob's initializers): their pods are not members."""


@dataclass(frozen=True)
class JobSetFacts:
    name: str
    uid: str
    replicated_jobs: tuple[ReplicatedJob, ...]


@dataclass(frozen=True)
class Replica:
    """One replica spec of a PyTorchJob or MPIJob (``Master``, ``Worker``, ``Launcher``)."""

    replicas: int
    gpus_per_pod: int


@dataclass(frozen=True)
class TrainingJobFacts:
    kind: str
    name: str
    uid: str
    replicas: Mapping[str, Replica] = field(default_factory=dict)
    """By replica type in lower case, as the pods' labels spell it (``master``, ``worker``)."""
    workers_counted_after_lead: bool = False
    """An MPIJob with ``runLauncherAsWorker``: mpi-operator already labels worker ``i`` with
    replica index ``i + 1`` (the launcher is 0), so the index is the rank."""


@dataclass(frozen=True)
class PodGroupFacts:
    name: str
    uid: str
    gang_min_count: int | None
    """The gang policy's ``minCount``; None for the basic (non-gang) policy."""


class OwnerLookup(Protocol):
    """What the adapter knows of a pod's owners (from its watches); None = not known (yet)."""

    def job(self, namespace: str, name: str) -> gangs.JobFacts | None: ...

    def jobset(self, namespace: str, name: str) -> JobSetFacts | None: ...

    def training_job(self, namespace: str, kind: str, name: str) -> TrainingJobFacts | None: ...

    def pod_group(self, namespace: str, name: str) -> PodGroupFacts | None: ...


@dataclass(frozen=True)
class Membership:
    """A pod's gang: the same key for every pod of it, whatever asks."""

    source: Source
    key: ids.GangKey
    name: str
    size: int
    rank: int | None
    """None: no rank of its own (the book assigns one)."""


@dataclass(frozen=True)
class Unsized:
    """A known gang source whose gang cannot be sized now: never placed as a lone pod."""

    source: Source
    reason: str
    missing: str = ""
    """The owner object that is missing, e.g. ``JobSet train/llm`` (for the Warning Event)."""


Resolution = Membership | Unsized


def resolve(pod: nodes.PodUsage, spec: Mapping[str, Any], lookup: OwnerLookup,
            gpu_resource: str = gangs.DEFAULT_GPU_RESOURCE) -> Resolution | None:
    """The gang of a GPU pod (None: it requests no ``gpu_resource``, not fabricsched's).

    ``spec`` is the pod's ``spec`` as the API serves it (``schedulingGroup`` is not part of
    ``PodUsage``). Never raises on pod content.
    """
    if pod.gpus(gpu_resource) <= 0:
        return None
    try:
        if gangs.GANG_LABEL in pod.labels:
            return _from_gangs(pod, lookup, gpu_resource, Source.EXPLICIT)
        for source in (_pod_group, _jobset, _training_job, _leader_worker_set):
            found = source(pod, spec, lookup)
            if found is not None:
                return found
    except parsing.Invalid as e:
        return Unsized(_source_of(pod), str(e))
    return _from_gangs(pod, lookup, gpu_resource, Source.JOB if gangs.job_reference(pod) or
                       pod.labels.get(gangs.JOB_NAME_LABEL) else Source.POD)


def identify(pod: nodes.PodUsage, spec: Mapping[str, Any], lookup: OwnerLookup,
             gpu_resource: str = gangs.DEFAULT_GPU_RESOURCE) -> gangs.GangIdentity | gangs.NotOurs | Unsized:
    """What the extender plans with: the pod's gang with its tier constraint and GPU request.

    The key is ``gang_key``'s (the one every other caller derives); the legacy sources
    (explicit label, Job, lone pod) are exactly ``gangs.identify``."""
    found = resolve(pod, spec, lookup, gpu_resource)
    if found is None:
        return gangs.NotOurs(f"requests no {gpu_resource}")
    if isinstance(found, Unsized):
        return found
    if found.source in (Source.EXPLICIT, Source.JOB, Source.POD):
        _, job_name, _ = gangs.key_parts(pod)
        legacy = gangs.identify(pod, lookup.job(pod.namespace, job_name) if job_name else None, gpu_resource)
        if isinstance(legacy, gangs.GangIdentity):
            return legacy
        return Unsized(found.source, legacy.reason)
    owned = gangs.owned(pod, found.key, found.name, found.size, found.rank, gpu_resource)
    return owned if isinstance(owned, gangs.GangIdentity) else Unsized(found.source, owned.reason)


def gang_key(pod: nodes.PodUsage, lookup: OwnerLookup) -> ids.GangKey:
    """The gang key of any pod: from its labels, owner reference and PodGroup name alone (and
    a PodGroup's policy, to let a basic one fall through), never from the owner's size, so a
    pod whose owner is gone or not read yet still finds its gang. The one key function of the
    process: identify, membership, prioritize, bind tracking and restore all use it."""
    labels = pod.labels
    if gangs.GANG_LABEL in labels:
        return gangs.key_of(pod)
    group = pod.pod_group
    if group:
        try:
            facts = lookup.pod_group(pod.namespace, group)
        except parsing.Invalid:
            facts = None  # resolve refuses the pod with the reason
        if facts is None or facts.gang_min_count is not None:
            return _pod_group_key(pod.namespace, group)
    if labels.get(JOBSET_NAME):
        return _jobset_key(pod)
    if labels.get(KUBEFLOW_JOB_NAME):
        return _training_key(pod)
    if labels.get(LWS_NAME):
        return _lws_key(pod)[0]
    return gangs.key_of(pod)


def membership(pod: nodes.PodUsage, lookup: OwnerLookup,
               gpu_resource: str = gangs.DEFAULT_GPU_RESOURCE) -> tuple[ids.GangKey, int | None]:
    """(``gang_key``, the pod's rank when its owner says it now, else None). Never raises."""
    key = gang_key(pod, lookup)
    try:
        found = resolve(pod, {}, lookup, gpu_resource)
    except parsing.Invalid:  # pragma: no cover - resolve turns bad content into Unsized
        found = None
    if isinstance(found, Membership) and found.key == key:
        return key, found.rank
    # Explicit, Job and lone-pod gangs: the pod's own rank. An owner-ranked pod whose owner is
    # not known now has none (the book's assignment, or its node, tells).
    legacy_key, legacy_rank = gangs.membership(pod)
    return key, legacy_rank if legacy_key == key else None


def _pod_group_key(namespace: str, name: str) -> ids.GangKey:
    # The pod names its PodGroup but not the PodGroup's UID: the marker keeps a PodGroup apart
    # from an explicit gang label of the same name.
    return ids.gang_key(namespace, name, "podgroup")


def _jobset_key(pod: nodes.PodUsage) -> ids.GangKey:
    return ids.gang_key(pod.namespace, pod.labels.get(JOBSET_NAME, ""), pod.labels.get(JOBSET_UID, ""))


def _training_key(pod: nodes.PodUsage) -> ids.GangKey:
    owner = pod.owner
    uid = owner[2] if owner is not None and owner[0] in TRAINING_KINDS else ""
    return ids.gang_key(pod.namespace, pod.labels.get(KUBEFLOW_JOB_NAME, ""), uid)


def _lws_key(pod: nodes.PodUsage) -> tuple[ids.GangKey, str]:
    group = pod.labels.get(LWS_GROUP_INDEX, "")
    # A bad index: resolve refuses the pod with the reason; the key only has to be stable.
    with contextlib.suppress(parsing.Invalid):
        group = str(parsing.count(group, f"label {LWS_GROUP_INDEX}", _MAX_INDEX))
    gang = f"{pod.labels.get(LWS_NAME, '')}-{group}"
    # group-key is a hash that changes when the group is recreated: a new plan, as a Job UID gives.
    return ids.gang_key(pod.namespace, gang, pod.labels.get(LWS_GROUP_KEY, "")), gang


def _from_gangs(pod: nodes.PodUsage, lookup: OwnerLookup, gpu_resource: str, source: Source) -> Resolution:
    """Explicit gangs, Jobs and lone pods: exactly ``gangs.identify`` (the live path)."""
    _, job_name, _ = gangs.key_parts(pod)
    job = lookup.job(pod.namespace, job_name) if job_name else None
    found = gangs.identify(pod, job, gpu_resource)
    if isinstance(found, gangs.GangIdentity):
        return Membership(source, found.key, found.name, found.size, found.rank)
    if isinstance(found, gangs.Unresolved):
        missing = f"Job {pod.namespace}/{found.job_name}" if found.job_name else ""
        return Unsized(source, found.reason, missing)
    return Unsized(source, found.reason)  # pragma: no cover - GPU pods are always ours here


def _pod_group_name(pod: nodes.PodUsage, spec: Mapping[str, Any]) -> str | None:
    if pod.pod_group:
        return pod.pod_group
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return name if isinstance(name, str) and name else None


def _pod_group(pod: nodes.PodUsage, spec: Mapping[str, Any], lookup: OwnerLookup) -> Resolution | None:
    name = _pod_group_name(pod, spec)
    if name is None:
        return None
    facts = lookup.pod_group(pod.namespace, name)
    shown = f"PodGroup {pod.namespace}/{parsing.excerpt(name)}"
    if facts is None:
        return Unsized(Source.POD_GROUP, f"waiting for {shown}", shown)
    if facts.gang_min_count is None:
        return None  # the basic policy is no gang: the next source decides
    if facts.gang_min_count < 1:
        return Unsized(Source.POD_GROUP, f"{shown} has a gang minCount below 1")
    rank = _index(pod, gangs.COMPLETION_INDEX)
    return Membership(Source.POD_GROUP, _pod_group_key(pod.namespace, name), name,
                      min(facts.gang_min_count, gangs.MAX_GANG_SIZE), rank)


def _jobset(pod: nodes.PodUsage, spec: Mapping[str, Any], lookup: OwnerLookup) -> Resolution | None:
    name = pod.labels.get(JOBSET_NAME)
    if not name:
        return None
    uid = pod.labels.get(JOBSET_UID, "")
    shown = f"JobSet {pod.namespace}/{name}"
    facts = lookup.jobset(pod.namespace, name)
    if facts is None or (uid and facts.uid != uid):
        return Unsized(Source.JOBSET, f"waiting for {shown}", shown)
    members = [rj for rj in facts.replicated_jobs if rj.gpus_per_pod > 0]
    size = sum(rj.replicas * rj.pods_per_job for rj in members)
    own = pod.labels.get(JOBSET_REPLICATED_JOB, "")
    starts = _global_starts(facts.replicated_jobs)
    if own not in {rj.name for rj in members}:
        return Unsized(Source.JOBSET, f"replicated Job {parsing.excerpt(own)} is not a GPU Job of {shown}")
    global_index = _index(pod, JOBSET_GLOBAL_INDEX)
    if global_index is None:
        job_index = _index(pod, JOBSET_JOB_INDEX)
        global_index = None if job_index is None else starts[own] + job_index
    completion = _index(pod, gangs.COMPLETION_INDEX)
    rank = None
    if global_index is not None and completion is not None:
        rank = _pods_before(facts.replicated_jobs, global_index) + completion
        if rank >= size:
            return Unsized(Source.JOBSET, f"rank {rank} is outside {shown}'s {size} GPU pods")
    return Membership(Source.JOBSET, _jobset_key(pod), name, min(size, gangs.MAX_GANG_SIZE), rank)


def _global_starts(replicated: tuple[ReplicatedJob, ...]) -> dict[str, int]:
    """The first ``job-global-index`` of each replicated Job: Jobs are numbered in spec order."""
    out: dict[str, int] = {}
    start = 0
    for rj in replicated:
        out[rj.name] = start
        start += rj.replicas
    return out


def _pods_before(replicated: tuple[ReplicatedJob, ...], global_index: int) -> int:
    """GPU pods of the Jobs whose ``job-global-index`` is below ``global_index``."""
    before, start = 0, 0
    for rj in replicated:
        jobs = max(0, min(rj.replicas, global_index - start))
        if rj.gpus_per_pod > 0:
            before += jobs * rj.pods_per_job
        start += rj.replicas
    return before


def _training_job(pod: nodes.PodUsage, spec: Mapping[str, Any], lookup: OwnerLookup) -> Resolution | None:
    name = pod.labels.get(KUBEFLOW_JOB_NAME)
    if not name:
        return None
    owner = pod.owner
    if owner is None or owner[0] not in TRAINING_KINDS:
        reason = f"pod carries {KUBEFLOW_JOB_NAME} but no PyTorchJob or MPIJob owner"
        return Unsized(Source.PYTORCH_JOB, reason)
    kind, owner_name, uid = owner
    source = Source.PYTORCH_JOB if kind == "PyTorchJob" else Source.MPI_JOB
    shown = f"{kind} {pod.namespace}/{owner_name}"
    facts = lookup.training_job(pod.namespace, kind, owner_name)
    if facts is None or facts.uid != uid:
        return Unsized(source, f"waiting for {shown}", shown)
    members = {t: r for t, r in facts.replicas.items() if r.gpus_per_pod > 0}
    size = sum(r.replicas for r in members.values())
    role = (pod.labels.get(KUBEFLOW_REPLICA_TYPE) or pod.labels.get(KUBEFLOW_JOB_ROLE) or "").lower()
    index = _index(pod, KUBEFLOW_REPLICA_INDEX)
    lead = "master" if source is Source.PYTORCH_JOB else "launcher"
    if role not in members:
        return Unsized(source, f"replica type {parsing.excerpt(role)} of {shown} has no GPU replicas")
    if index is None:
        return Unsized(source, f"pod of {shown} without {KUBEFLOW_REPLICA_INDEX}")
    # The leading replica (PyTorch master, an MPI launcher with GPUs) is rank 0 and the
    # workers follow it, as PyTorch's RANK does.
    offset = members[lead].replicas if lead in members and not facts.workers_counted_after_lead else 0
    rank = index if role == lead else offset + index
    if rank >= size:
        return Unsized(source, f"rank {rank} is outside {shown}'s {size} GPU replicas")
    return Membership(source, _training_key(pod), name, min(size, gangs.MAX_GANG_SIZE), rank)


def _leader_worker_set(
    pod: nodes.PodUsage, spec: Mapping[str, Any], lookup: OwnerLookup
) -> Resolution | None:
    name = pod.labels.get(LWS_NAME)
    if not name:
        return None
    group = _index(pod, LWS_GROUP_INDEX)
    size_text = pod.annotations.get(LWS_SIZE)
    if group is None or size_text is None:
        reason = f"LeaderWorkerSet pod without {LWS_GROUP_INDEX} or {LWS_SIZE}"
        return Unsized(Source.LEADER_WORKER_SET, reason)
    size = parsing.count(size_text, f"annotation {LWS_SIZE}", gangs.MAX_GANG_SIZE, minimum=1)
    rank = _index(pod, LWS_WORKER_INDEX)
    if rank is not None and rank >= size:
        return Unsized(Source.LEADER_WORKER_SET, f"worker index {rank} is outside a group of {size}")
    key, gang = _lws_key(pod)
    return Membership(Source.LEADER_WORKER_SET, key, gang, size, rank)


def _index(pod: nodes.PodUsage, label: str) -> int | None:
    text = pod.labels.get(label)
    return None if text is None else parsing.count(text, f"label {label}", _MAX_INDEX)


def _source_of(pod: nodes.PodUsage) -> Source:
    """The source whose label failed to parse (in precedence order)."""
    labels = pod.labels
    if JOBSET_NAME in labels:
        return Source.JOBSET
    if KUBEFLOW_JOB_NAME in labels:
        return Source.MPI_JOB if pod.owner and pod.owner[0] == "MPIJob" else Source.PYTORCH_JOB
    if LWS_NAME in labels:
        return Source.LEADER_WORKER_SET
    return Source.POD_GROUP


# --- owners from their manifests (for the adapter that implements OwnerLookup) -------------

def jobset_facts(manifest: Mapping[str, Any], gpu_resource: str = gangs.DEFAULT_GPU_RESOURCE) -> JobSetFacts:
    """A JobSet (``jobset.x-k8s.io/v1alpha2``) as ``OwnerLookup.jobset`` returns it; raises
    ``parsing.Invalid`` for a shape the API server would not serve."""
    metadata = parsing.mapping(manifest.get("metadata"), "metadata")
    spec = parsing.mapping(manifest.get("spec"), "spec")
    replicated = []
    for entry in parsing.sequence(spec.get("replicatedJobs"), "spec.replicatedJobs"):
        item = parsing.mapping(entry, "spec.replicatedJobs[]")
        job = parsing.mapping(parsing.mapping(item.get("template"), "template").get("spec"), "template.spec")
        replicated.append(ReplicatedJob(
            name=parsing.string(item.get("name"), "spec.replicatedJobs[].name"),
            replicas=_whole(item.get("replicas"), 1),
            pods_per_job=_pods_per_job(job),
            gpus_per_pod=_template_gpus(job.get("template"), gpu_resource),
        ))
    return JobSetFacts(parsing.string(metadata.get("name"), "metadata.name"),
                       parsing.string(metadata.get("uid"), "metadata.uid"), tuple(replicated))


def training_job_facts(manifest: Mapping[str, Any],
                       gpu_resource: str = gangs.DEFAULT_GPU_RESOURCE) -> TrainingJobFacts:
    """A PyTorchJob (``kubeflow.org/v1``, ``pytorchReplicaSpecs``) or an MPIJob
    (``kubeflow.org/v2beta1``, ``mpiReplicaSpecs``); replica types in lower case."""
    metadata = parsing.mapping(manifest.get("metadata"), "metadata")
    spec = parsing.mapping(manifest.get("spec"), "spec")
    kind = parsing.string(manifest.get("kind"), "kind")
    field_name = "pytorchReplicaSpecs" if kind == "PyTorchJob" else "mpiReplicaSpecs"
    replicas = {}
    for replica_type, entry in parsing.mapping(spec.get(field_name), f"spec.{field_name}").items():
        item = parsing.mapping(entry, f"spec.{field_name}.{replica_type}")
        replicas[str(replica_type).lower()] = Replica(
            _whole(item.get("replicas"), 1), _template_gpus(item.get("template"), gpu_resource))
    return TrainingJobFacts(kind, parsing.string(metadata.get("name"), "metadata.name"),
                            parsing.string(metadata.get("uid"), "metadata.uid"), replicas,
                            kind == "MPIJob" and spec.get("runLauncherAsWorker") is True)


def pod_group_facts(manifest: Mapping[str, Any]) -> PodGroupFacts:
    """A PodGroup (``scheduling.k8s.io/v1beta1``): ``spec.schedulingPolicy.gang.minCount``, or
    None for the basic policy."""
    metadata = parsing.mapping(manifest.get("metadata"), "metadata")
    policy = parsing.mapping(parsing.mapping(manifest.get("spec"), "spec").get("schedulingPolicy"),
                             "spec.schedulingPolicy")
    gang = policy.get("gang")
    if gang is None:
        count = None
    else:
        count = _whole(parsing.mapping(gang, "spec.schedulingPolicy.gang").get("minCount"), 0)
    return PodGroupFacts(parsing.string(metadata.get("name"), "metadata.name"),
                         parsing.string(metadata.get("uid"), "metadata.uid"), count)


def _whole(value: object, default: int) -> int:
    """An integer field of an API object (JSON number), bounded like every gang size."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise parsing.Invalid(f"{parsing.excerpt(value)} is not a whole number")
    return max(0, min(value, gangs.MAX_GANG_SIZE))


def _pods_per_job(job_spec: Mapping[str, Any]) -> int:
    parallelism = _whole(job_spec.get("parallelism"), 1)
    completions = job_spec.get("completions")
    return parallelism if completions is None else min(parallelism, _whole(completions, 1))


def _template_gpus(template: object, gpu_resource: str) -> int:
    spec = parsing.mapping(parsing.mapping(template, "template").get("spec"), "template.spec")
    return nodes.effective_requests(spec).get(gpu_resource, 0)

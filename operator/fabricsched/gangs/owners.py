"""What the owners of a gang's pods say: the facts that size and rank a gang, and the port
through which the adapter hands them over.

Pure: the facts are parsed from an owner's manifest here (strictly: a shape the API server would
not serve raises ``parsing.Invalid``); reading the manifest is the adapter's
(``extender.decide.owners``), which implements ``OwnerLookup`` from what it read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from fabricsched import parsing
from fabricsched.gangs import identity
from fabricsched.ports import jobs
from fabricsched.topology import nodes


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
    """An MPIJob with ``runLauncherAsWorker``: mpi-operator labels worker ``i`` with replica
    index ``i + 1`` (the launcher is 0), so the worker's rank is its index less one."""


@dataclass(frozen=True)
class PodGroupFacts:
    name: str
    uid: str
    gang_min_count: int | None
    """The gang policy's ``minCount``; None for the basic (non-gang) policy."""
    topology_key: str | None = None
    """``spec.schedulingConstraints.topology[0].key``: a node label key (KEP-5732)."""
    workload: tuple[str, str] | None = None
    """``spec.workloadRef``: (workloadName, templateName) of the template it was made from."""
    template_topology_key: str | None = None
    """The key of that Workload template, filled in by the adapter that read the Workload."""
    priority: int | None = None
    """``spec.priority`` (1.37: set from ``spec.priorityClassName``); None: not set."""
    preemption_policy: str | None = None
    """``spec.preemptionPolicy``; None: not set (the pods' policy holds)."""


@dataclass(frozen=True)
class WorkloadFacts:
    """A Workload (``scheduling.k8s.io/v1beta1``): the topology key of each PodGroup template."""

    name: str
    uid: str
    template_keys: Mapping[str, str] = field(default_factory=dict)
    """templateName -> ``schedulingConstraints.topology[0].key``, for templates that set one."""


class OwnerLookup(Protocol):
    """What the adapter knows of a pod's owners (from its watches and reads); None = not known
    (yet). Raises ``parsing.Invalid`` naming an owner that does not exist or does not parse."""

    def job(self, namespace: str, name: str) -> jobs.JobInfo | None: ...

    def jobset(self, namespace: str, name: str) -> JobSetFacts | None: ...

    def training_job(self, namespace: str, kind: str, name: str) -> TrainingJobFacts | None: ...

    def pod_group(self, namespace: str, name: str) -> PodGroupFacts | None: ...


def facts_of(kind: str, manifest: Mapping[str, Any], gpu_resource: str) -> object:
    """The facts of an owner of ``kind`` (one of ``kinds.OWNER_KINDS``); raises ``parsing.Invalid``."""
    if kind == "JobSet":
        return jobset_facts(manifest, gpu_resource)
    if kind == "PodGroup":
        return pod_group_facts(manifest)
    if kind == "Workload":
        return workload_facts(manifest)
    return training_job_facts(manifest, gpu_resource)


def jobset_facts(manifest: Mapping[str, Any],
                 gpu_resource: str = identity.DEFAULT_GPU_RESOURCE) -> JobSetFacts:
    """A JobSet (``jobset.x-k8s.io/v1alpha2``) as ``OwnerLookup.jobset`` returns it."""
    metadata = parsing.mapping(manifest.get("metadata"), "metadata")
    spec = parsing.mapping(manifest.get("spec"), "spec")
    replicated = []
    for entry in parsing.sequence(spec.get("replicatedJobs"), "spec.replicatedJobs"):
        item = parsing.mapping(entry, "spec.replicatedJobs[]")
        job = parsing.mapping(parsing.mapping(item.get("template"), "template").get("spec"), "template.spec")
        completions = job.get("completions")
        replicated.append(ReplicatedJob(
            name=parsing.string(item.get("name"), "spec.replicatedJobs[].name"),
            replicas=_whole(item.get("replicas"), 1),
            pods_per_job=jobs.pods_at_once(_whole(job.get("parallelism"), 1),
                                           None if completions is None else _whole(completions, 1)),
            gpus_per_pod=_template_gpus(job.get("template"), gpu_resource),
        ))
    return JobSetFacts(parsing.string(metadata.get("name"), "metadata.name"),
                       parsing.string(metadata.get("uid"), "metadata.uid"), tuple(replicated))


def training_job_facts(manifest: Mapping[str, Any],
                       gpu_resource: str = identity.DEFAULT_GPU_RESOURCE) -> TrainingJobFacts:
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
    None for the basic policy; its topology key and the Workload template it came from."""
    metadata = parsing.mapping(manifest.get("metadata"), "metadata")
    spec = parsing.mapping(manifest.get("spec"), "spec")
    policy = parsing.mapping(spec.get("schedulingPolicy"), "spec.schedulingPolicy")
    gang = policy.get("gang")
    if gang is None:
        count = None
    else:
        count = _whole(parsing.mapping(gang, "spec.schedulingPolicy.gang").get("minCount"), 0)
    priority = None if spec.get("priority") is None else nodes.priority_of(spec["priority"], "spec.priority")
    preempting = spec.get("preemptionPolicy")
    if preempting is not None:
        preempting = nodes.policy_of(preempting, "spec.preemptionPolicy")
    ref = spec.get("workloadRef")
    workload = None
    if ref is not None:
        ref = parsing.mapping(ref, "spec.workloadRef")
        workload = (_name(ref.get("workloadName"), "spec.workloadRef.workloadName"),
                    _name(ref.get("templateName"), "spec.workloadRef.templateName"))
    return PodGroupFacts(parsing.string(metadata.get("name"), "metadata.name"),
                         parsing.string(metadata.get("uid"), "metadata.uid"), count,
                         _topology_key(spec.get("schedulingConstraints"), "spec.schedulingConstraints"),
                         workload,
                         priority=priority, preemption_policy=preempting)


def workload_facts(manifest: Mapping[str, Any]) -> WorkloadFacts:
    """A Workload: the topology key of each ``spec.podGroupTemplates[]`` that sets one (the
    ``compositePodGroupTemplates`` are not read: docs/workloads.md)."""
    metadata = parsing.mapping(manifest.get("metadata"), "metadata")
    spec = parsing.mapping(manifest.get("spec"), "spec")
    keys: dict[str, str] = {}
    templates = parsing.sequence(spec.get("podGroupTemplates"), "spec.podGroupTemplates")
    for entry in templates[:MAX_TEMPLATES]:
        item = parsing.mapping(entry, "spec.podGroupTemplates[]")
        key = _topology_key(item.get("schedulingConstraints"),
                            "spec.podGroupTemplates[].schedulingConstraints")
        if key is not None:
            keys[_name(item.get("name"), "spec.podGroupTemplates[].name")] = key
    return WorkloadFacts(parsing.string(metadata.get("name"), "metadata.name"),
                         parsing.string(metadata.get("uid"), "metadata.uid"), keys)


MAX_TEMPLATES = 8
"""The API server's bound on a Workload's templates."""


def _topology_key(constraints: object, what: str) -> str | None:
    """``topology[0].key`` of a ``schedulingConstraints`` (at most one entry in 1.37)."""
    topology = parsing.sequence(parsing.mapping(constraints, what).get("topology"), f"{what}.topology")
    if not topology:
        return None
    first = parsing.mapping(topology[0], f"{what}.topology[0]")
    return _label_key(first.get("key"), f"{what}.topology[0].key")


def _label_key(value: object, what: str) -> str:
    text = parsing.string(value, what)
    if len(text) > MAX_LABEL_KEY or not _LABEL_KEY.fullmatch(text):
        raise parsing.Invalid(f"{what}={parsing.excerpt(text)} is not a label key")
    return text


def _name(value: object, what: str) -> str:
    text = parsing.string(value, what)
    if not 0 < len(text) <= 253:
        raise parsing.Invalid(f"{what}={parsing.excerpt(text)} is not an object name")
    return text


MAX_LABEL_KEY = 317
"""A node label key: an optional DNS prefix (253), ``/`` and a name (63)."""
_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def _whole(value: object, default: int) -> int:
    """An integer field of an API object (JSON number), bounded like every gang size."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise parsing.Invalid(f"{parsing.excerpt(value)} is not a whole number")
    return max(0, min(value, identity.MAX_GANG_SIZE))


def _template_gpus(template: object, gpu_resource: str) -> int:
    """GPUs a template's pods request; a template whose pods claim DRA devices counts as a GPU
    one (1) even without: its GPUs may come from claims (docs/dra.md), whose pods the extender
    counts when they come."""
    spec = parsing.mapping(parsing.mapping(template, "template").get("spec"), "template.spec")
    requested = nodes.effective_requests(spec).get(gpu_resource, 0)
    claims = parsing.sequence(spec.get("resourceClaims"), "template.spec.resourceClaims")
    return requested or (1 if claims else 0)

"""Which gang a pod belongs to, its rank, size, tier constraint and GPU request.

Pure: reads a pod record (``topology.nodes.PodUsage``) plus what is known of its owning Job;
no I/O. The conventions are DESIGN.md's "Pod conventions".
"""

from __future__ import annotations

from dataclasses import dataclass

from fabricsched import ids
from fabricsched.topology import nodes

GANG_LABEL = "fabricsched.io/gang"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
GANG_SIZE_ANNOTATION = "fabricsched.io/gang-size"
RANK_ANNOTATION = "fabricsched.io/rank"
REQUIRED_TIER_ANNOTATION = "fabricsched.io/required-tier"
PREFERRED_TIER_ANNOTATION = "fabricsched.io/preferred-tier"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class JobFacts:
    """What a gang needs to know of the pod's owning Job (from the cluster state or the API)."""

    name: str
    uid: str
    parallelism: int | None = None
    completions: int | None = None

    @property
    def size(self) -> int | None:
        """min(parallelism, completions), either alone when the other is unset."""
        known = [v for v in (self.parallelism, self.completions) if v is not None]
        return min(known) if known else None


@dataclass(frozen=True)
class GangIdentity:
    """One pod's place in its gang."""

    key: ids.GangKey
    """``namespace/name@jobUID``; a recreated Job with the same name gets a new key."""
    namespace: str
    name: str
    """The gang's name: the gang label, else the Job's name, else the pod's name."""
    job_name: str | None
    job_uid: str
    """The owning Job's UID (the pod's own UID for a pod without a Job)."""
    size: int
    rank: int | None
    """None when neither a completion index nor a rank annotation is set: any free rank will do."""
    tier: str | None
    """Tier named by the constraint annotation; None means the lowest tier."""
    required: bool
    gpus_per_pod: int

    @property
    def display(self) -> str:
        """``namespace/name``: how reasons and Events name the gang."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class NotOurs:
    """The pod requests no GPU: fabricsched does not steer it."""

    reason: str


@dataclass(frozen=True)
class Unresolved:
    """The pod is ours but its gang cannot be identified yet (e.g. the Job is not known)."""

    reason: str
    job_name: str | None = None


Identification = GangIdentity | NotOurs | Unresolved


def job_reference(pod: nodes.PodUsage) -> tuple[str, str] | None:
    """(name, uid) of the Job controlling the pod."""
    if pod.owner is not None and pod.owner[0] == "Job" and pod.owner[1]:
        return pod.owner[1], pod.owner[2]
    return None


def identify(
    pod: nodes.PodUsage, job: JobFacts | None, gpu_resource: str = DEFAULT_GPU_RESOURCE
) -> Identification:
    """The gang of ``pod``; ``job`` is its owning Job when one is known.

    The extender converts the wire pod with ``nodes.PodUsage.from_manifest`` first, so a pod
    seen in a request and the same pod seen in the cluster state identify the same way.
    """
    gpus = pod.gpus(gpu_resource)
    if gpus <= 0:
        return NotOurs(f"requests no {gpu_resource}")
    annotations = pod.annotations
    name, job_name, job_uid = _names(pod)
    if job is not None and (job_name != job.name or (job_uid and job_uid != job.uid)):
        job = None  # facts of another Job (or an older one of the same name): do not mix
    if not job_uid and job is not None:
        job_uid = job.uid

    size: int | None
    size_text = annotations.get(GANG_SIZE_ANNOTATION)
    if size_text is not None:
        size = _positive_int(size_text)
        if size is None:
            return Unresolved(f"annotation {GANG_SIZE_ANNOTATION}={size_text!r} is not a positive integer")
    elif job_name is None:
        size = 1  # a lone pod: a single-pod gang (rule 3)
    elif job is None:
        return Unresolved(f"Job {pod.namespace}/{job_name} is not known yet", job_name=job_name)
    else:
        size = job.size if job.size is not None else 1

    rank_text = _rank_text(pod)
    rank = _non_negative_int(rank_text) if rank_text is not None else None
    if rank_text is not None and rank is None:
        return Unresolved(f"rank {rank_text!r} is not a non-negative integer")
    if rank is not None and rank >= size:
        return Unresolved(f"rank {rank} is outside a gang of {size}")

    required_tier = annotations.get(REQUIRED_TIER_ANNOTATION)
    preferred_tier = annotations.get(PREFERRED_TIER_ANNOTATION)
    return GangIdentity(
        key=ids.gang_key(pod.namespace, name, job_uid),
        namespace=pod.namespace,
        name=name,
        job_name=job_name,
        job_uid=job_uid,
        size=size,
        rank=rank,
        tier=required_tier or preferred_tier or None,
        required=bool(required_tier),
        gpus_per_pod=gpus,
    )


def membership(pod: nodes.PodUsage) -> tuple[ids.GangKey, int | None]:
    """Gang key and own rank (if any) of a pod seen in the cluster state, whose Job may be gone:
    the same key ``identify`` gives, without needing the gang's size."""
    name, _, job_uid = _names(pod)
    rank_text = _rank_text(pod)
    return ids.gang_key(pod.namespace, name, job_uid), (
        _non_negative_int(rank_text) if rank_text is not None else None
    )


def pod_ended(pod: nodes.PodUsage) -> bool:
    """Succeeded, Failed, or being deleted: its rank is free for a replacement."""
    return pod.phase in nodes.FINISHED_PHASES or pod.terminating


def _names(pod: nodes.PodUsage) -> tuple[str, str | None, str]:
    """(gang name, Job name, UID part of the key) of a pod."""
    owner = job_reference(pod)
    labels = pod.labels
    job_name = owner[0] if owner else labels.get(JOB_NAME_LABEL) or labels.get(LEGACY_JOB_NAME_LABEL)
    name = labels.get(GANG_LABEL) or job_name or pod.name
    job_uid = owner[1] if owner else ""
    if job_name is None and GANG_LABEL not in labels:
        job_uid = pod.uid  # a lone pod is its own gang; pods sharing a gang label share one key
    return name, job_name, job_uid


def _rank_text(pod: nodes.PodUsage) -> str | None:
    text = pod.labels.get(COMPLETION_INDEX) or pod.annotations.get(COMPLETION_INDEX)
    return text if text is not None else pod.annotations.get(RANK_ANNOTATION)


def _positive_int(text: str) -> int | None:
    value = _non_negative_int(text)
    return value if value else None


def _non_negative_int(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None

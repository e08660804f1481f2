"""Which gang a pod belongs to, its rank, size, tier constraint and GPU request.

Pure: reads a pod record (``topology.nodes.PodUsage``) plus what is known of its owning Job;
no I/O. The conventions are docs/design.md "Pod conventions".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fabricsched import ids, parsing
from fabricsched.topology import nodes

GANG_LABEL = "fabricsched.io/gang"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
GANG_SIZE_ANNOTATION = "fabricsched.io/gang-size"
RANK_ANNOTATION = "fabricsched.io/rank"
REQUIRED_TIER_ANNOTATION = "fabricsched.io/required-tier"
PREFERRED_TIER_ANNOTATION = "fabricsched.io/preferred-tier"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"

MAX_GANG_SIZE = 1_000_000
"""Largest gang size (and rank + 1) read from a pod; larger values are refused with a reason."""
MAX_TIER_NAME = 63


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
    # The key is the pod's alone (``_names``), never completed from ``job``: ``membership``,
    # which has no Job to ask, must find the same gang (prioritize, bind tracking, restore).

    size: int | None
    size_text = annotations.get(GANG_SIZE_ANNOTATION)
    if size_text is not None:
        try:
            size = parsing.count(size_text, f"annotation {GANG_SIZE_ANNOTATION}", MAX_GANG_SIZE, minimum=1)
        except parsing.Invalid as e:
            return Unresolved(str(e))
    elif job_name is None:
        size = 1  # a lone pod: a single-pod gang (rule 3)
    elif job is None:
        return Unresolved(f"Job {pod.namespace}/{job_name} is not known yet", job_name=job_name)
    else:
        size = min(job.size, MAX_GANG_SIZE) if job.size is not None else 1

    try:
        rank = rank_of(pod)
    except parsing.Invalid as e:
        return Unresolved(str(e))
    if rank is not None and rank >= size:
        return Unresolved(f"rank {rank} is outside a gang of {size}")

    try:
        required_tier = _tier(annotations, REQUIRED_TIER_ANNOTATION)
        preferred_tier = _tier(annotations, PREFERRED_TIER_ANNOTATION)
    except parsing.Invalid as e:
        return Unresolved(str(e))
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


def owned(
    pod: nodes.PodUsage, key: ids.GangKey, name: str, size: int, rank: int | None,
    gpu_resource: str = DEFAULT_GPU_RESOURCE,
) -> GangIdentity | Unresolved:
    """The identity of a pod whose gang an owner other than a Job sizes (``gang_sources``):
    its key, name, size and rank come from there, its tier constraint and GPUs from the pod."""
    try:
        required_tier = _tier(pod.annotations, REQUIRED_TIER_ANNOTATION)
        preferred_tier = _tier(pod.annotations, PREFERRED_TIER_ANNOTATION)
    except parsing.Invalid as e:
        return Unresolved(str(e))
    return GangIdentity(
        key=key,
        namespace=pod.namespace,
        name=name,
        job_name=None,
        job_uid=key.rpartition("@")[2] if "@" in key else "",
        size=size,
        rank=rank,
        tier=required_tier or preferred_tier or None,
        required=bool(required_tier),
        gpus_per_pod=pod.gpus(gpu_resource),
    )


def membership(pod: nodes.PodUsage) -> tuple[ids.GangKey, int | None]:
    """Gang key and own rank (if any) of a pod seen in the cluster state, whose Job may be gone:
    the same key ``identify`` gives, without needing the gang's size.

    Never raises: a pod whose rank does not parse is a member without a rank of its own
    (``identify`` refuses it, with the reason, when it is scheduled), so one bad pod cannot
    stop the loops over every pod (rank assignment, housekeeping, restore)."""
    try:
        rank = rank_of(pod)
    except parsing.Invalid:
        rank = None
    return key_of(pod), rank


def key_of(pod: nodes.PodUsage) -> ids.GangKey:
    """``membership``'s key alone: the scans over a namespace's pods ask it of every pod, and
    parsing a rank they do not use was half of its cost."""
    name, _, job_uid = _names(pod)
    return ids.gang_key(pod.namespace, name, job_uid)


def rank_of(pod: nodes.PodUsage) -> int | None:
    """The pod's own rank: its completion index (label, else annotation), else the
    ``fabricsched.io/rank`` annotation; None when it has none. Raises ``parsing.Invalid``
    for a value that is not a whole number below ``MAX_GANG_SIZE`` in ASCII digits."""
    if pod.labels.get(COMPLETION_INDEX):
        return parsing.count(pod.labels[COMPLETION_INDEX], f"label {COMPLETION_INDEX}", MAX_GANG_SIZE - 1)
    for key in (COMPLETION_INDEX, RANK_ANNOTATION):
        text = pod.annotations.get(key)
        if text or (text is not None and key == RANK_ANNOTATION):
            return parsing.count(text, f"annotation {key}", MAX_GANG_SIZE - 1)
    return None


def key_parts(pod: nodes.PodUsage) -> tuple[str, str | None, str]:
    """(gang name, Job name, UID part of the key) of a pod: from the pod alone, so every
    caller (filter, prioritize, bind tracking, restore) derives the same key."""
    return _names(pod)


def pod_ended(pod: nodes.PodUsage) -> bool:
    """Succeeded, Failed, or being deleted: its rank is free for a replacement."""
    return pod.phase in nodes.FINISHED_PHASES or pod.terminating


def _names(pod: nodes.PodUsage) -> tuple[str, str | None, str]:
    """(gang name, Job name, UID part of the key) of a pod."""
    owner = job_reference(pod)
    labels = pod.labels
    job_name = owner[0] if owner else labels.get(JOB_NAME_LABEL) or labels.get(LEGACY_JOB_NAME_LABEL)
    name = labels.get(GANG_LABEL) or job_name or pod.name
    # Without an owner reference, the Job controller's own label still names the Job's UID.
    job_uid = owner[1] if owner else (labels.get(CONTROLLER_UID_LABEL, "") if job_name else "")
    if job_name is None and GANG_LABEL not in labels:
        job_uid = pod.uid  # a lone pod is its own gang; pods sharing a gang label share one key
    return name, job_name, job_uid


def _tier(annotations: Mapping[str, str], key: str) -> str | None:
    """A tier constraint's name: at most 63 printable ASCII characters (what ``spec.tiers``
    allows), so a message that names it stays short."""
    text = annotations.get(key)
    if not text:
        return None
    if len(text) > MAX_TIER_NAME or not text.isascii() or not text.isprintable():
        raise parsing.Invalid(f"annotation {key}={parsing.excerpt(text)} is not a tier name")
    return text

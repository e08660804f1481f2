"""One pod's place in its gang, and the pod conventions every source shares.

Pure: reads a pod record (``topology.nodes.PodUsage``); no I/O. The conventions are
docs/design.md "Pod conventions"; which workload decides a pod's gang is ``sources``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fabricsched import ids, parsing
from fabricsched.placement import request
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
MAX_INDEX = MAX_GANG_SIZE - 1
MAX_TIER_NAME = 63


@dataclass(frozen=True)
class GangIdentity:
    """One pod's place in its gang: what the extender plans with."""

    key: ids.GangKey
    """``namespace/name@uid`` (``keys.GangRef``); a recreated owner gets a new key."""
    namespace: str
    name: str
    """The gang's name: the gang label, the workload's name, else the pod's name."""
    job_name: str | None
    """The owning Job's name (explicit gangs and Jobs); None for other sources."""
    job_uid: str
    """The UID part of the key (the pod's own UID for a lone pod)."""
    size: int
    rank: int | None
    """None when the pod carries no rank of its own: any free rank will do."""
    tier: str | None
    """Tier named by the constraint annotation; None means the lowest tier."""
    required: bool
    gpus_per_pod: int
    preferred_tier: str | None = None
    """A lower preferred tier beside a required ``tier`` (both annotations set)."""
    slices: request.Slices | None = None
    """Consecutive ranks in groups inside one domain of a tier (``fabricsched.io/slice-*``)."""
    topology_key: str | None = None
    """The native constraint's node label key (its PodGroup's or Workload template's), read when
    no annotation names a tier: the extender maps it to the tier with that ``nodeLabel``."""
    traffic: request.Pattern | None = None
    """``fabricsched.io/traffic``; None: the fabric's default (``spec.traffic``), else all-to-all."""

    @property
    def display(self) -> str:
        """``namespace/name``: how reasons and Events name the gang."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class NotOurs:
    """The pod requests no GPU: fabricsched does not steer it."""

    reason: str


def job_reference(pod: nodes.PodUsage) -> tuple[str, str] | None:
    """(name, uid) of the Job controlling the pod."""
    if pod.owner is not None and pod.owner[0] == "Job" and pod.owner[1]:
        return pod.owner[1], pod.owner[2]
    return None


def pod_ended(pod: nodes.PodUsage) -> bool:
    """Succeeded, Failed, or being deleted: its rank is free for a replacement."""
    return pod.phase in nodes.FINISHED_PHASES or pod.terminating


def rank_of(pod: nodes.PodUsage) -> int | None:
    """The pod's own rank: its completion index (label, else annotation), else the
    ``fabricsched.io/rank`` annotation; None when it has none. Raises ``parsing.Invalid``
    for a value that is not a whole number below ``MAX_GANG_SIZE`` in ASCII digits."""
    if pod.labels.get(COMPLETION_INDEX):
        return parsing.count(pod.labels[COMPLETION_INDEX], f"label {COMPLETION_INDEX}", MAX_INDEX)
    for key in (COMPLETION_INDEX, RANK_ANNOTATION):
        text = pod.annotations.get(key)
        if text or (text is not None and key == RANK_ANNOTATION):
            return parsing.count(text, f"annotation {key}", MAX_INDEX)
    return None


def index_label(pod: nodes.PodUsage, label: str) -> int | None:
    """A whole-number label of the pod (an index), None when absent; raises ``parsing.Invalid``."""
    text = pod.labels.get(label)
    return None if text is None else parsing.count(text, f"label {label}", MAX_INDEX)


def tier_constraint_pair(annotations: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(required, preferred) tier names from the constraint annotations, either None; both may
    be set (a required tier and a lower preferred one). Raises ``parsing.Invalid``."""
    return (tier_annotation(annotations, REQUIRED_TIER_ANNOTATION),
            tier_annotation(annotations, PREFERRED_TIER_ANNOTATION))


def tier_annotation(annotations: Mapping[str, str], key: str) -> str | None:
    """A tier constraint's name: at most 63 printable ASCII characters (what ``spec.tiers``
    allows), so a message that names it stays short."""
    text = annotations.get(key)
    if not text:
        return None
    if len(text) > MAX_TIER_NAME or not text.isascii() or not text.isprintable():
        raise parsing.Invalid(f"annotation {key}={parsing.excerpt(text)} is not a tier name")
    return text

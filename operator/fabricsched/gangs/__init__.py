"""Gang identity: which gang a pod belongs to, its size, rank, constraint and workload object.

Rule: pure. No I/O, no kubernetes client, aiohttp, prometheus_client, threading or kopf
(import-linter holds it). What the owners of a pod say comes through ``OwnerLookup``, which the
adapters implement from their reads and watches. The controller, ``explain``, the fabric page and
the extender all use this package, so a pod is keyed the same way everywhere.

- ``kinds``: the workload kinds (one table: API group, version, plural, pod labels);
- ``sources``: the ordered pod conventions, each with its key, size, rank and workload object;
- ``resolution``: ``key_of`` (the one key function), ``membership``, ``identify``, ``workload_of``;
- ``identity``: the pod conventions every source shares (labels, ranks, tier constraints);
- ``owners``: the facts an owner gives (JobSet, training job, PodGroup, Workload), parsed from manifests;
- ``constraints``: the tiers and slices a gang asks for (annotations, the native topology key);
- ``keys``: the structured gang key and its one string form.
"""

from fabricsched.gangs.identity import (
    COMPLETION_INDEX,
    DEFAULT_GPU_RESOURCE,
    GANG_LABEL,
    GANG_SIZE_ANNOTATION,
    MAX_GANG_SIZE,
    PREFERRED_TIER_ANNOTATION,
    RANK_ANNOTATION,
    REQUIRED_TIER_ANNOTATION,
    GangIdentity,
    NotOurs,
    job_reference,
    pod_ended,
    rank_of,
)
from fabricsched.gangs.keys import GangRef
from fabricsched.gangs.kinds import KINDS, LABEL_PREFIXES, OWNER_KINDS, WorkloadKind
from fabricsched.gangs.owners import (
    JobSetFacts,
    OwnerLookup,
    PodGroupFacts,
    Replica,
    ReplicatedJob,
    TrainingJobFacts,
    WorkloadFacts,
    facts_of,
)
from fabricsched.gangs.resolution import identify, key_of, membership, resolve, source_of, workload_of
from fabricsched.gangs.sources import SOURCES, Membership, Source, SourceKind, Unsized

__all__ = [
    "COMPLETION_INDEX", "DEFAULT_GPU_RESOURCE", "GANG_LABEL", "GANG_SIZE_ANNOTATION", "KINDS",
    "LABEL_PREFIXES", "MAX_GANG_SIZE", "OWNER_KINDS", "PREFERRED_TIER_ANNOTATION", "RANK_ANNOTATION",
    "REQUIRED_TIER_ANNOTATION", "SOURCES", "GangIdentity", "GangRef", "JobSetFacts", "Membership",
    "NotOurs", "OwnerLookup", "PodGroupFacts", "Replica", "ReplicatedJob", "Source", "SourceKind",
    "TrainingJobFacts", "Unsized", "WorkloadFacts", "WorkloadKind", "facts_of", "identify", "job_reference",
    "key_of",
    "membership", "pod_ended", "rank_of", "resolve", "source_of", "workload_of",
]

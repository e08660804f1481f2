"""A pod's gang through the ordered sources: its key, its membership, its identity, its workload.

``key_of`` is the one key function of the process: the extender's filter, prioritize, bind
tracking, admission and restore, the cluster state's records and the fabric page all use it.
"""

from __future__ import annotations

from typing import cast

from fabricsched import ids, parsing
from fabricsched.gangs import constraints, identity, owners
from fabricsched.gangs.sources import SOURCES, Membership, Resolution, Source, SourceKind, Unsized
from fabricsched.ports import notices
from fabricsched.topology import nodes


def source_of(pod: nodes.PodUsage, lookup: owners.OwnerLookup) -> Source:
    """The first source that claims the pod (the lone-pod source claims every pod)."""
    return next(s for s in SOURCES if s.claims(pod, lookup))


_KEY = "gang-key"


def key_of(pod: nodes.PodUsage, lookup: owners.OwnerLookup) -> ids.GangKey:
    """The gang key of any pod, from its labels, owner reference and PodGroup name alone (and a
    PodGroup's policy, so a basic one falls through), never from the owner's size.

    Without a PodGroup name the lookup decides nothing, so the key is kept on the pod's record:
    the loops over a namespace's pods (admission, bind tracking) compute it once per pod change."""
    if pod.pod_group:
        return source_of(pod, lookup).ref(pod).key  # the PodGroup's policy may change: never kept
    kept = pod.derived.get(_KEY)
    if kept is None:
        kept = pod.derived[_KEY] = source_of(pod, lookup).ref(pod).key
    return cast(ids.GangKey, kept)


def resolve(pod: nodes.PodUsage, lookup: owners.OwnerLookup,
            gpu_resource: str = identity.DEFAULT_GPU_RESOURCE) -> Resolution:
    """The pod's gang with its size and rank; never raises on pod or owner content."""
    source = source_of(pod, lookup)
    try:
        return source.resolve(pod, lookup, gpu_resource)
    except parsing.Invalid as e:
        return Unsized(source.kind, str(e))


def membership(pod: nodes.PodUsage, lookup: owners.OwnerLookup,
               gpu_resource: str = identity.DEFAULT_GPU_RESOURCE) -> tuple[ids.GangKey, int | None]:
    """(``key_of``, the pod's rank when its source says it now, else None). Never raises: a pod
    whose rank does not parse is a member without a rank of its own (``identify`` refuses it,
    with the reason, when it is scheduled), so one bad pod cannot stop the loops over every pod."""
    source = source_of(pod, lookup)
    key = source.ref(pod).key
    try:
        found = source.resolve(pod, lookup, gpu_resource)
    except parsing.Invalid:
        found = None
    if isinstance(found, Membership) and found.key == key:
        return key, found.rank
    # A pod whose owner is not known now (or is refused) keeps its own rank if it carries one;
    # an owner-ranked pod has none (the book's assignment, or its node, tells).
    if source.kind in _OWN_RANK:
        try:
            return key, identity.rank_of(pod)
        except parsing.Invalid:
            return key, None
    return key, None


def identify(
    pod: nodes.PodUsage, lookup: owners.OwnerLookup, gpu_resource: str = identity.DEFAULT_GPU_RESOURCE
) -> identity.GangIdentity | identity.NotOurs | Unsized:
    """What the extender plans with: the pod's gang with its tier constraint and GPU request."""
    gpus = pod.gpus(gpu_resource)
    if gpus <= 0:
        return identity.NotOurs(f"requests no {gpu_resource}")
    found = resolve(pod, lookup, gpu_resource)
    if isinstance(found, Unsized):
        return found
    ref = found.ref
    try:
        group = lookup.pod_group(pod.namespace, pod.pod_group) if found.source is SourceKind.POD_GROUP \
            and pod.pod_group else None
        jobset = lookup.jobset(pod.namespace, ref.name) if found.source is SourceKind.JOBSET else None
        asked = constraints.of_pod(pod.annotations, group, jobset)
    except parsing.Invalid as e:
        return Unsized(found.source, str(e))
    return identity.GangIdentity(
        key=ref.key, namespace=ref.namespace, name=ref.name, job_name=found.job_name, job_uid=ref.uid,
        size=found.size, rank=found.rank, tier=asked.tier, required=asked.required, gpus_per_pod=gpus,
        preferred_tier=asked.preferred, slices=asked.slices, topology_key=asked.topology_key,
        traffic=asked.traffic,
    )


def workload_of(pod: nodes.PodUsage, lookup: owners.OwnerLookup,
                pod_group_uid: str = "") -> notices.ObjectRef | None:
    """The object a user submitted for the pod's gang (None: a lone pod's gang), where its
    Events go besides its FabricPlacement; ``pod_group_uid`` when known (the pod lacks it)."""
    source = source_of(pod, lookup)
    return source.workload(pod, source.ref(pod), pod_group_uid)


_OWN_RANK = frozenset({SourceKind.EXPLICIT, SourceKind.JOB, SourceKind.POD})
"""Sources whose pods carry their own rank (completion index or rank annotation) even when the
size cannot be read now; the other sources' ranks need their owner."""

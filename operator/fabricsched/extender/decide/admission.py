"""When a gang may be planned: only once its pods exist.

A plan reserves GPUs for every rank, so planning on a gang's first pod lets one pod that
claims a large gang size hold capacity for pods that never come. As the native PodGroup's
PreEnqueue barrier does, the extender plans a gang only when the cluster state has seen as
many of its live pods as the gang has ranks; until then every node fails with the number
still missing (a Pending reason, re-asked by the scheduler on the next pod event).

A per-namespace limit (``fabricsched run --max-reserved-gpus-per-namespace``) caps what one
tenant's gangs may hold reserved but unbound: a new plan that would put the namespace over it is
refused with the numbers, and asked again when the scheduler retries.

Pure: reads the pods and entries it is given, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fabricsched import gangs, ids, parsing
from fabricsched.extender.book import reservations
from fabricsched.topology import nodes

KeyOf = Callable[[nodes.PodUsage], ids.GangKey]
"""The process's one gang key function (``gangs.key_of`` over the owner cache)."""


@dataclass(frozen=True)
class Mixed:
    """The gang's pods ask for different GPU counts: refused like a gang that cannot be sized."""

    reason: str


def missing_pods(
    key: ids.GangKey, size: int, asking: nodes.PodUsage, pods: Iterable[nodes.PodUsage],
    key_of: KeyOf, gpu_resource: str,
) -> int | Mixed:
    """How many more live pods gang ``key`` needs before it is planned (0: plan it), or
    ``Mixed`` when one of them asks for another GPU count than ``asking``.

    ``asking`` counts even when the state has not seen it yet; ended pods do not count (their
    replacements will). The size is the owner's (a JobSet's GPU pods, a PodGroup's
    ``minCount``), so pods that claim a larger gang cannot hold more than their owner has."""
    seen = {asking.uid}
    wanted = asking.gpus(gpu_resource)
    for pod in pods:
        if len(seen) >= size:
            break
        if pod.uid not in seen and not gangs.pod_ended(pod) and key_of(pod) == key:
            if pod.gpus(gpu_resource) != wanted:
                return Mixed(mixed_reason(pod, wanted, gpu_resource))
            if (pod.priority, pod.preemption_policy) != (asking.priority, asking.preemption_policy):
                return Mixed(mixed_priority(pod, asking))
            seen.add(pod.uid)
    return max(0, size - len(seen))


def mixed_reason(pod: nodes.PodUsage, wanted: int, gpu_resource: str) -> str:
    return (
        f"pods of one gang ask for different GPU counts: {pod.namespace}/{parsing.excerpt(pod.name)} "
        f"asks {pod.gpus(gpu_resource)} {gpu_resource}, this pod {wanted}"
    )


def mixed_priority(pod: nodes.PodUsage, asking: nodes.PodUsage) -> str:
    """Why a gang whose pods differ in priority (or preemption policy) is refused: it could
    not be ranked against another gang."""
    return (
        f"pods of one gang have different priorities: {pod.namespace}/{parsing.excerpt(pod.name)} has "
        f"priority {pod.priority} ({pod.preemption_policy}), this pod {asking.priority} "
        f"({asking.preemption_policy})"
    )


def mixed_gpus(gang: gangs.GangIdentity, planned: int) -> str:
    """Why a pod asking for other GPUs than its gang's plan is refused."""
    return (
        f"pods of one gang ask for different GPU counts: gang {gang.display} is planned with "
        f"{planned} GPUs per pod, this pod asks {gang.gpus_per_pod}"
    )


def waiting_reason(missing: int, display: str) -> str:
    """The Pending reason of a gang short of pods (``display`` is already bounded by the caller)."""
    return f"waiting for {missing} more pod{'s' if missing != 1 else ''} of gang {display}"


def refusal(
    gang: gangs.GangIdentity,
    asking: nodes.PodUsage,
    entry: reservations.Entry | None,
    pods: Iterable[nodes.PodUsage],
    entries: Iterable[reservations.Entry],
    namespace_limit: int,
    key_of: KeyOf,
    gpu_resource: str,
) -> str | Mixed | None:
    """Why gang ``gang`` may not be planned now (``entry``: its Expired plan, if any), or None.

    ``namespace_limit`` is the most GPUs the namespace's gangs may hold reserved but unbound
    (0: no limit)."""
    missing = missing_pods(gang.key, gang.size, asking, pods, key_of, gpu_resource)
    if isinstance(missing, Mixed):
        return missing
    if missing:
        return waiting_reason(missing, gang.display)
    if namespace_limit <= 0:
        return None
    held = sum(
        e.gpus_per_pod * sum(1 for _ in e.held()) for e in entries if e.namespace == gang.namespace
    )
    wanted = gang.gpus_per_pod * (len(entry.unbound()) if entry is not None else gang.size)
    if held + wanted <= namespace_limit:
        return None
    return (
        f"gang {gang.display} would reserve {wanted} GPUs; namespace {gang.namespace} already holds "
        f"{held} reserved GPUs of its limit of {namespace_limit}"
    )

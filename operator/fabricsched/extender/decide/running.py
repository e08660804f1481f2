"""The running workloads preemption weighs, kept from one decision to the next (docs/preemption.md).

At 5,000 nodes the fabric holds some 30,000 GPU pods, most of them lone pods. Grouping them by
gang key and building a ``RunningWorkload`` for each, at every decision, cost about half a
second. ``RunningIndex`` keeps both between decisions:

- a pod's gang key, and whether it counts (active, on a host of the fabric, holding its GPUs),
  is computed once per pod record: the state replaces a pod's record whenever the pod changes,
  so a record seen before (the same object) has the same key. A key reads the owner cache only
  through the pod's PodGroup (a PodGroup whose policy is no gang falls through to the next
  source), so the keys of pods naming one are computed again whenever the cache stored or
  dropped an owner (``OwnerCache.version``);
- a workload's ``Candidate`` is built again only when its pods, its namespace's budgets or
  opt-out, its plan's traffic pattern or (when none of its pods has a start time) the clock
  changed.

The groups come in the order of the state's pods, as a full pass finds them: the answer is the
one the pass over every pod gives (tests/unit/extender/decide/test_running_index.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fabricsched import ids
from fabricsched.extender.decide import budgets, owners
from fabricsched.placement import preemption, ranks, request
from fabricsched.topology import fabric, nodes

PodKey = tuple[str, str]
Namespace = tuple[Sequence[budgets.Budget], bool]
"""A namespace's PodDisruptionBudgets, and whether it opted out of preemption."""


@dataclass(frozen=True)
class Candidate:
    pods: list[nodes.PodUsage]
    workload: preemption.RunningWorkload


class RunningIndex:
    """Gang key -> the workload's pods on one fabric, and their candidates, kept current."""

    def __init__(self, owner_cache: owners.OwnerCache) -> None:
        self._owners = owner_cache
        self._keys: dict[PodKey, tuple[nodes.PodUsage, ids.GangKey | None]] = {}
        """Pod -> (its record when the key was computed, its key; None: it does not count)."""
        self._grouped: set[PodKey] = set()
        """Pods whose key reads the owner cache (they name a PodGroup)."""
        self._on: tuple[Mapping[ids.NodeName, object], str, int] | None = None
        """(the fabric's hosts, the GPU resource, the owner cache's version) the keys are for."""
        self._made: dict[ids.GangKey, tuple[tuple[object, ...], Candidate]] = {}

    def groups(
        self, pods: Mapping[PodKey, nodes.PodUsage], hosts: Mapping[ids.NodeName, object], resource: str
    ) -> dict[ids.GangKey, list[nodes.PodUsage]]:
        """Every GPU workload on ``hosts`` (active pods holding ``resource``), by gang key."""
        version = self._owners.version
        if self._on is None or self._on[0] is not hosts or self._on[1] != resource:
            self._keys.clear()
            self._grouped.clear()
            self._made.clear()
        elif self._on[2] != version:
            for gone in self._grouped:
                self._keys.pop(gone, None)
            self._grouped.clear()
        self._on = (hosts, resource, version)
        if len(self._keys) > 2 * len(pods) + 1024:  # deleted pods: forget them now and then
            self._keys = {k: v for k, v in self._keys.items() if k in pods}
        keys = self._keys
        out: dict[ids.GangKey, list[nodes.PodUsage]] = {}
        for at, pod in pods.items():
            seen = keys.get(at)
            if seen is not None and seen[0] is pod:
                key = seen[1]
            else:
                key = None
                if pod.active and pod.node in hosts and pod.gpus(resource) > 0:
                    key = self._owners.key(pod)
                    if pod.pod_group:
                        self._grouped.add(at)
                keys[at] = (pod, key)
            if key is not None:
                group = out.get(key)
                if group is None:
                    out[key] = [pod]
                else:
                    group.append(pod)
        return out

    def candidate(
        self, key: ids.GangKey, pods: list[nodes.PodUsage], priority: int, namespace: Namespace,
        pattern: request.Pattern, now: float, fab: fabric.Fabric, resource: str,
    ) -> Candidate:
        """The workload ``key`` as a victim candidate: kept when nothing it is made of changed."""
        unstarted = all(p.started_at is None for p in pods)
        tag = (priority, namespace, pattern, now if unstarted else None)
        kept = self._made.get(key)
        if kept is not None and kept[1].pods == pods and kept[0] == tag:
            return kept[1]
        made = _candidate(key, pods, priority, namespace, pattern, now, fab, resource)
        self._made[key] = (tag, made)
        return made

    def keep(self, keys: Mapping[ids.GangKey, object]) -> None:
        """Forget the candidates of workloads that are gone."""
        if len(self._made) > 2 * len(keys) + 1024:
            self._made = {k: v for k, v in self._made.items() if k in keys}


def _candidate(
    key: ids.GangKey, pods: list[nodes.PodUsage], priority: int, namespace: Namespace,
    pattern: request.Pattern, now: float, fab: fabric.Fabric, resource: str,
) -> Candidate:
    covering, opted = namespace
    starts = [p.started_at for p in pods if p.started_at is not None]
    placed = [(p.node, p.gpus(resource)) for p in pods if p.node is not None]
    if pattern == request.Pattern.RING:  # its traffic follows its plan's rank order: the fabric's
        placed.sort(key=lambda pod: ranks.fabric_order(fab, pod[0]))
    return Candidate(pods, preemption.RunningWorkload(
        key, priority, tuple(placed), min(starts) if starts else now, gang=len(pods) > 1,
        pattern=pattern,
        # A terminating pod is on its way out already: evicting its workload again frees nothing.
        protected=any([p.terminating for p in pods]) or bool(covering and budgets.protected(pods, covering)),
        kueue=budgets.kueue_managed(pods), opted_out=opted,
    ))

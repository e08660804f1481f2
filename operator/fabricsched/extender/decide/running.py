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
- the groups are followed pod by pod through the state's log of changed pods on nodes
  (``placed_pods_since``), not made by a pass over every pod, when few pods changed;
- a workload's ``Candidate`` is built again only when its pods, its namespace's budgets or
  opt-out, or its plan's traffic pattern changed; when the groups were followed, only the
  changed ones are looked at (and the host map the victim search reads is followed with them).

A group's pods are in name order, whatever order they came in: the answer is the one the pass
over every pod gives (tests/unit/extender/decide/test_running_index.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from fabricsched import ids
from fabricsched.extender.decide import budgets, owners
from fabricsched.extender.decide import kept as kept_maps
from fabricsched.placement import preemption, ranks, request
from fabricsched.topology import fabric, nodes

PodKey = tuple[str, str]
Groups = dict[ids.GangKey, list[nodes.PodUsage]]
GroupsView = Mapping[ids.GangKey, list[nodes.PodUsage]]
Changed = Callable[[int], Collection[PodKey] | None]
"""The state's ``placed_pods_since``: the pods on nodes changed after a version, or None."""
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
        self._made: dict[ids.GangKey, tuple[tuple[Namespace, request.Pattern], Candidate]] = {}
        """Workload -> (namespace facts and pattern, its candidate)."""
        self._grouped_at: tuple[int, dict[ids.GangKey, list[nodes.PodUsage]]] | None = None
        """The last groups, and the state's ``placed_pods_version`` they are for."""
        self._all: _Built | None = None
        """The last candidates of every priority, and what they were built from."""
        self._kept = kept_maps.KeptMaps()
        self._delta: tuple[GroupsView, Groups, frozenset[ids.GangKey]] | None = None
        """Groups followed pod by pod: (from, to, the keys of the groups that changed between)."""
        self.whole_builds = 0
        """Candidates made for every workload at once (not followed): counted."""

    def groups(
        self, pods: Mapping[PodKey, nodes.PodUsage], hosts: Mapping[ids.NodeName, object], resource: str,
        version: int | None = None, changed: Changed | None = None,
    ) -> dict[ids.GangKey, list[nodes.PodUsage]]:
        """Every GPU workload on ``hosts`` (active pods holding ``resource``), by gang key, each
        one's pods in name order: the same object as the last call's while ``version`` (the
        state's ``placed_pods_version``), the fabric's hosts and the owner cache stayed put (a
        pass over 30,000 pods saved); the last call's with the pods ``changed`` names since
        moved when it can tell them (a few pods followed instead of that pass)."""
        self._on_fabric(hosts, resource)
        if version is not None and self._followed(pods, hosts, version, changed):
            assert self._grouped_at is not None
            return self._grouped_at[1]
        if len(self._keys) > 2 * len(pods) + 1024:  # deleted pods: forget them now and then
            self._keys = {k: v for k, v in self._keys.items() if k in pods}
        out = _in_name_order(self._grouped_by_key(pods.items(), hosts))
        self._grouped_at = None if version is None else (version, out)
        return out

    async def warm(
        self, pods: Mapping[PodKey, nodes.PodUsage], hosts: Mapping[ids.NodeName, object], resource: str,
        version: int, chunk: int = 2000, changed: Changed | None = None,
    ) -> bool:
        """The groups of ``groups`` made ahead of a decision, the loop handed back every
        ``chunk`` pods (30,000 keys take a few hundred ms, the pass over them tens: a decision
        paid them); kept for ``version``, the state's ``placed_pods_version`` when it started.
        False when they could not be kept (the owner cache moved meanwhile)."""
        self._on_fabric(hosts, resource)
        if self._followed(pods, hosts, version, changed):
            return True
        items = list(pods.items())  # the state's dict may change while the loop is handed back
        out: dict[ids.GangKey, list[nodes.PodUsage]] = {}
        for start in range(0, len(items), chunk):
            for key, found in self._grouped_by_key(items[start:start + chunk], hosts).items():
                group = out.get(key)
                if group is None:
                    out[key] = found
                else:
                    group.extend(found)
            await asyncio.sleep(0)
        if self._on is None or self._on[2] != self._owners.version:
            return False  # the owner cache moved meanwhile: keys naming a PodGroup may be stale
        self._grouped_at = (version, _in_name_order(out))
        return True

    def _followed(
        self, pods: Mapping[PodKey, nodes.PodUsage], hosts: Mapping[ids.NodeName, object], version: int,
        changed: Changed | None,
    ) -> bool:
        """The last groups brought to ``version``: kept as they are, or the pods changed since
        followed when they are few (a quarter of all pods or more: a full pass is as cheap)."""
        if self._grouped_at is None:
            return False
        at, last = self._grouped_at
        if at == version:
            return True
        moved = None if changed is None else changed(at)
        if moved is None or len(moved) > len(pods) // 4 + 64:
            return False
        out, regrouped = self._regrouped(last, moved, pods, hosts)
        delta = self._delta
        if delta is not None and delta[1] is last and (self._all is None or self._all.groups is not last):
            self._delta = (delta[0], out, delta[2] | regrouped)  # followed again, no candidates made between
        else:
            self._delta = (last, out, regrouped)
        self._grouped_at = (version, out)
        return True

    def _on_fabric(self, hosts: Mapping[ids.NodeName, object], resource: str) -> None:
        """Forget what no longer holds: every key on another fabric or resource, the keys that
        read the owner cache once it changed."""
        version = self._owners.version
        # A fabric rebuilt (a node's health moved) keeps its hosts: a set comparison, in C.
        if self._on is None or self._on[1] != resource or (
                self._on[0] is not hosts and self._on[0].keys() != hosts.keys()):
            self._keys.clear()
            self._grouped.clear()
            self._made.clear()
            self._grouped_at = None
        elif self._on[2] != version:
            for gone in self._grouped:
                self._keys.pop(gone, None)
            self._grouped.clear()
            self._grouped_at = None
        self._on = (hosts, resource, version)

    def _grouped_by_key(
        self, pods: Iterable[tuple[PodKey, nodes.PodUsage]], hosts: Mapping[ids.NodeName, object],
    ) -> dict[ids.GangKey, list[nodes.PodUsage]]:
        resource = self._on[1] if self._on is not None else ""
        keys = self._keys
        out: dict[ids.GangKey, list[nodes.PodUsage]] = {}
        for at, pod in pods:
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

    def _regrouped(
        self, last: GroupsView, moved: Iterable[PodKey],
        pods: Mapping[PodKey, nodes.PodUsage], hosts: Mapping[ids.NodeName, object],
    ) -> tuple[Groups, frozenset[ids.GangKey]]:
        """``last`` with the pods of ``moved`` taken out of their groups and put in again as
        their records now are; a new dict, whose changed groups are new lists (the candidates
        kept for ``last`` stay as they were); and the keys of those groups."""
        lists: kept_maps.CopiedOnWrite[ids.GangKey, nodes.PodUsage] = kept_maps.CopiedOnWrite(last)
        group = lists.at
        for at in moved:
            seen, pod = self._keys.get(at), pods.get(at)
            if seen is not None and seen[0] is pod:
                continue
            if seen is not None and seen[1] is not None:
                members = group(seen[1])
                for i, member in enumerate(members):
                    if member is seen[0]:
                        del members[i]
                        break
            if pod is None:
                self._keys.pop(at, None)
                self._grouped.discard(at)
                continue
            self._grouped_by_key(((at, pod),), hosts)  # the pod's key, remembered
            key = self._keys[at][1]
            if key is not None:
                group(key).append(pod)
        for key in lists.copied:
            lists.out[key].sort(key=_name)
        return lists.done(), frozenset(lists.copied)  # emptied groups too: their candidates go

    async def candidates(
        self, groups: GroupsView, below: int,
        namespace_of: Callable[[str], Awaitable[Namespace]], patterns: Mapping[ids.GangKey, request.Pattern],
        fab: fabric.Fabric, resource: str,
    ) -> list[Candidate]:
        """The workloads of ``groups`` of priority below ``below`` as victim candidates, each
        kept from the last decision when nothing it is made of changed. ``namespace_of`` is read
        once per namespace that has one; ``patterns`` are the plans' (all-to-all without one).

        The candidates of every priority are kept between calls, and only those whose workload
        may have changed are looked at again: those of the groups changed since, when ``groups``
        were followed pod by pod from the last ones (or are the same); those whose plan's pattern
        changed. Anything else (a namespace's budgets or opt-out changed, groups made by a full
        pass) looks at all of them again. A workload none of whose pods has started has no
        progress to lose (not the clock's: nothing here moves with the clock)."""
        last = self._all
        if last is not None:
            changed = frozenset() if last.groups is groups else self._changed_since(last.groups, groups)
            if changed is not None:
                namespaces = {ns: await namespace_of(ns) for ns in last.namespaces}
                if namespaces == last.namespaces:
                    again = changed | _moved_patterns(last.patterns, patterns)
                    if again or last.groups is not groups:
                        last = self._all = await self._rebuilt(
                            last, groups, again, namespace_of, patterns, fab, resource)
                    return [c for c in last.candidates.values() if c.workload.priority < below]
        self._all = await self._built(groups, namespace_of, patterns, fab, resource)
        return [c for c in self._all.candidates.values() if c.workload.priority < below]

    def _changed_since(
        self, before: GroupsView, after: GroupsView,
    ) -> frozenset[ids.GangKey] | None:
        """The keys of the groups that changed from ``before`` to ``after`` when ``after`` was
        followed from it (else None)."""
        delta = self._delta
        if delta is None or delta[0] is not before or delta[1] is not after:
            return None
        return delta[2]

    def kept(self) -> kept_maps.KeptMaps:
        """The victim search's maps (``victims.KeptIndexes``) of the last candidates (of every
        priority), followed from the last ones when the candidates were."""
        built = self._all
        if built is not None:
            derived = None if built.derived is None else (built.derived[0].candidates, built.derived[1])
            self._kept.follow(built.candidates, derived)
        return self._kept

    def _made_again(
        self, key: ids.GangKey, pods: list[nodes.PodUsage], facts: Namespace, pattern: request.Pattern,
        fab: fabric.Fabric, resource: str,
    ) -> Candidate:
        """The workload's candidate, kept when nothing it is made of changed."""
        kept = self._made.get(key)
        if kept is not None and kept[1].pods == pods and kept[0] == (facts, pattern):
            return kept[1]
        priority = pods[0].priority if len(pods) == 1 else max(p.priority for p in pods)
        candidate = _candidate(key, pods, priority, facts, pattern, fab, resource)
        self._made[key] = ((facts, pattern), candidate)
        return candidate

    async def _built(
        self, groups: GroupsView,
        namespace_of: Callable[[str], Awaitable[Namespace]], patterns: Mapping[ids.GangKey, request.Pattern],
        fab: fabric.Fabric, resource: str,
    ) -> _Built:
        out: dict[ids.GangKey, Candidate] = {}
        namespaces: dict[str, Namespace] = {}
        self.whole_builds += 1
        await self._made_into(out, namespaces, groups.items(), namespace_of, patterns, fab, resource)
        if len(self._made) > 2 * len(groups) + 1024:  # workloads gone: forget them now and then
            self._made = {k: v for k, v in self._made.items() if k in groups}
        return _Built(groups, namespaces, dict(patterns), out)

    async def _rebuilt(
        self, last: _Built, groups: GroupsView, again: frozenset[ids.GangKey],
        namespace_of: Callable[[str], Awaitable[Namespace]], patterns: Mapping[ids.GangKey, request.Pattern],
        fab: fabric.Fabric, resource: str,
    ) -> _Built:
        """``last`` with the candidates of ``again`` alone looked at again."""
        out, namespaces = dict(last.candidates), dict(last.namespaces)
        changed = ((key, groups.get(key)) for key in again)
        await self._made_into(out, namespaces, changed, namespace_of, patterns, fab, resource)
        return _Built(groups, namespaces, dict(patterns), out, (last, again))

    async def _made_into(
        self, out: dict[ids.GangKey, Candidate], namespaces: dict[str, Namespace],
        groups: Iterable[tuple[ids.GangKey, list[nodes.PodUsage] | None]],
        namespace_of: Callable[[str], Awaitable[Namespace]], patterns: Mapping[ids.GangKey, request.Pattern],
        fab: fabric.Fabric, resource: str,
    ) -> None:
        """The candidates of ``groups`` into ``out`` (a group gone: its candidate out), each
        namespace read once into ``namespaces``."""
        # Thousands of workloads at 5,000 nodes, most of them one pod: one plain loop.
        for n, (key, pods) in enumerate(groups, 1):
            if pods is None:
                out.pop(key, None)
                continue
            namespace = pods[0].namespace
            facts = namespaces.get(namespace)
            if facts is None:
                facts = namespaces[namespace] = await namespace_of(namespace)
            pattern = patterns.get(key, request.Pattern.ALL_TO_ALL)
            out[key] = self._made_again(key, pods, facts, pattern, fab, resource)
            if n % 2000 == 0:  # the first decision builds thousands: let /filter in between
                await asyncio.sleep(0)


def _moved_patterns(
    before: Mapping[ids.GangKey, request.Pattern], after: Mapping[ids.GangKey, request.Pattern],
) -> frozenset[ids.GangKey]:
    """The workloads whose plan's traffic pattern is not the same (one plan per gang: hundreds)."""
    if before == after:
        return frozenset()
    return frozenset(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def _name(pod: nodes.PodUsage) -> str:
    return pod.name


def _in_name_order(groups: Groups) -> Groups:
    """A gang's pods by name (a workload's pods are in one namespace): the order the groups
    followed pod by pod keep, whatever order the pods came in."""
    for members in groups.values():
        if len(members) > 1:
            members.sort(key=_name)
    return groups


@dataclass(frozen=True)
class _Built:
    groups: GroupsView
    namespaces: dict[str, Namespace]
    patterns: dict[ids.GangKey, request.Pattern]
    candidates: dict[ids.GangKey, Candidate]
    derived: tuple[_Built, frozenset[ids.GangKey]] | None = None
    """The candidates these were made from, and the keys made again (the kept maps follow them)."""


def _candidate(
    key: ids.GangKey, pods: list[nodes.PodUsage], priority: int, namespace: Namespace,
    pattern: request.Pattern, fab: fabric.Fabric, resource: str,
) -> Candidate:
    covering, opted = namespace
    starts = [p.started_at for p in pods if p.started_at is not None]
    placed = [(p.node, p.gpus(resource)) for p in pods if p.node is not None]
    if pattern == request.Pattern.RING:  # its traffic follows its plan's rank order: the fabric's
        placed.sort(key=lambda pod: ranks.fabric_order(fab, pod[0]))
    return Candidate(pods, preemption.RunningWorkload(
        key, priority, tuple(placed), min(starts) if starts else None, gang=len(pods) > 1,
        pattern=pattern,
        # A terminating pod is on its way out already: evicting its workload again frees nothing.
        protected=any([p.terminating for p in pods]) or bool(covering and budgets.protected(pods, covering)),
        kueue=budgets.kueue_managed(pods), opted_out=opted,
    ))

"""Gangs that fit one host: they put no traffic on the fabric (NVLink/PCIe inside the host).

Rule 3 for a single pod: prefer a host whose fabric link is degraded or down (the pod loses
nothing there), then a host in a partly used leaf, then best fit top down; healthy whole
leaves stay whole for gangs. A multi-pod gang that fits one host takes best fit top down
(rule 2), a partly used leaf and a degraded link as tie-breaks. Best fit top down is the
tightest top-tier domain that has a host with room, then the tightest domain inside it, and so
on to the leaf, then the tightest host: the loose domains above stay whole, not only the
hosts. A one-host gang never crosses its host's access link, so a down link does not stop it;
the health-blind policy cannot tell, so it leaves down hosts alone.

The tightness of a domain is its slots (pods of this size it could take) on candidate hosts;
``slots.tightest`` walks down from the tightest domains, so only the leaves under them are asked
whether a host there has room.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set

from fabricsched import ids
from fabricsched.placement import slots, tree
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey


def pick(
    fab: fabric.Fabric, start: slots.Base, pods: int, health_aware: bool, top_down: bool = True
) -> tuple[ids.NodeName, str] | None:
    """The host for a gang that fits one host, and why; None when no single host has room.
    ``top_down`` False: the rule before best fit top down (``FitOrder.HOLDING``, ``_holding``)."""
    index = start.index
    need = pods * start.gpus_per_pod
    free = start.free
    if not health_aware:
        down = [index.position[n] for n in fab.degraded_hosts if fab.hosts[n].down]
        if down:
            free = list(free)
            for i in down:
                free[i] = 0
    top = start.most_free() if free is start.free else max(free, default=0)
    if top < need:
        return None
    free_per_leaf = start.free_per_leaf()
    partly = {leaf for leaf, total in zip(index.leaves, index.leaf_gpus, strict=True)
              if leaf != index.root and free_per_leaf[leaf] < total}
    degraded: Set[ids.NodeName] = set(fab.degraded_hosts) if health_aware else frozenset()
    if not top_down:
        return _holding(fab, index, free, need, top, pods, partly, free_per_leaf, health_aware)

    if pods == 1 and degraded:
        # Rule 3: degraded or down links first (they are few), then partly used leaves, then
        # the tightest host, then the fullest leaf.
        held = [n for n in degraded if free[index.position[n]] >= need]
        if held:
            host = min(held, key=lambda n: (
                0 if index.leaf_of[n] in partly else 1, free[index.position[n]],
                free_per_leaf[index.leaf_of[n]], n))
            return host, _reason(fab, index, partly, host, health_aware)
    spans = index.span
    if free is start.free:
        rooms = start.per_domain()
    else:
        rooms = slots.up_the_tree(index, start.leaf_sums([n // start.gpus_per_pod for n in free]))
    host_gpus = index.host_gpus
    spoilt = {index.leaf_of[n] for n in degraded if free[index.position[n]] >= need}

    def fits(leaf: DomainKey) -> bool:
        lo, hi = spans[leaf]
        return max(free[lo:hi], default=0) >= need

    def used_host_fits(leaf: DomainKey) -> bool:  # room on a host already partly used
        lo, hi = spans[leaf]
        return any(need <= free[i] < host_gpus[i] for i in range(lo, hi))

    def leaf_order(leaf: DomainKey) -> tuple[int, bool, bool, str]:
        # On a tie of the rooms above: the tightest leaf, then the most room left whole (a
        # partly used leaf, then one with a degraded host that holds it).
        return rooms[leaf], leaf not in partly, leaf not in spoilt, leaf[1]

    # A single pod keeps out of whole hosts and whole leaves while partly used ones have room
    # (rule 3); a multi-pod gang on one host is best fit first (rule 2).
    groups: list[tuple[Callable[[DomainKey], bool], bool]]
    if pods == 1:
        groups = [(lambda leaf: leaf in partly and used_host_fits(leaf), True),
                  (lambda leaf: leaf in partly and fits(leaf), False),
                  (lambda leaf: leaf not in partly and fits(leaf), False)]
    else:
        groups = [(fits, False)]
    for holds, only_used in groups:
        leaf = slots.tightest(index, rooms, holds, leaf_order)
        if leaf is None:
            continue
        lo, hi = spans[leaf]
        host = min((index.order[i] for i in range(lo, hi)
                    if free[i] >= need and (not only_used or free[i] < host_gpus[i])),
                   key=lambda n: (free[index.position[n]], n not in degraded, n))
        if pods == 1:
            return host, _reason(fab, index, partly, host, health_aware)
        return host, f"fits one host {host}"
    return None


def _holding(
    fab: fabric.Fabric, index: tree.Tree, free: Sequence[int], need: int, top: int, pods: int,
    partly: Set[DomainKey], free_per_leaf: Mapping[DomainKey, int], health_aware: bool,
) -> tuple[ids.NodeName, str] | None:
    """``pick`` before best fit top down (``FitOrder.HOLDING``): the tightest host anywhere,
    not the tightest domains above it. A single pod: a degraded or down link first, then the
    tightest host of a partly used leaf (the fullest leaf on a tie), then of a whole leaf. A
    multi-pod gang: the tightest host, then a degraded link, then a partly used leaf, then the
    name. Free GPUs per host are small integers: each value from the need upwards is asked in
    turn (``in`` on list slices runs in C)."""
    spans = index.span
    partly_leaves = [leaf for leaf in index.leaves if leaf in partly]
    whole = [leaf for leaf in index.leaves if leaf not in partly]

    def hosts_with(value: int, leaf: DomainKey) -> list[ids.NodeName]:
        lo, hi = spans[leaf]
        return [index.order[i] for i in range(lo, hi) if free[i] == value]

    def leaves_with(value: int, leaves: list[DomainKey]) -> list[DomainKey]:
        return [leaf for leaf in leaves if value in free[spans[leaf][0]:spans[leaf][1]]]

    def degraded_with(value: int) -> list[ids.NodeName]:
        if not health_aware:
            return []
        return [n for n in fab.degraded_hosts if free[index.position[n]] == value]

    if pods == 1:
        if health_aware:
            group = [n for n in fab.degraded_hosts if free[index.position[n]] >= need]
            if group:
                host = min(group, key=lambda n: (
                    0 if index.leaf_of[n] in partly else 1, free[index.position[n]],
                    free_per_leaf[index.leaf_of[n]], n))
                return host, _reason(fab, index, partly, host, health_aware)
        for leaves in (partly_leaves, whole):
            for value in range(need, top + 1):
                found = leaves_with(value, leaves)
                if found:
                    leaf = min(found, key=lambda k: (free_per_leaf[k], k[1]))
                    host = min(hosts_with(value, leaf))
                    return host, _reason(fab, index, partly, host, health_aware)
        return None
    for value in range(need, top + 1):
        held = degraded_with(value)
        if held:
            host = min(held, key=lambda n: (0 if index.leaf_of[n] in partly else 1, n))
            return host, f"fits one host {host}"
        for leaves in (partly_leaves, whole):
            found = leaves_with(value, leaves)
            if found:
                host = min(n for leaf in found for n in hosts_with(value, leaf))
                return host, f"fits one host {host}"
    return None


def _reason(
    fab: fabric.Fabric, index: tree.Tree, partly: Set[DomainKey], host: ids.NodeName, health_aware: bool
) -> str:
    record = fab.hosts[host]
    if health_aware and record.degraded:
        state = "down" if record.down else "degraded"
        return f"single pod on host {host}: its fabric link is {state}, and a single pod does not use it"
    leaf = index.leaf_of[host]
    if leaf in partly:
        return f"single pod on host {host} in partly used {fab.tiers[0].name} {leaf[1]}"
    return f"single pod on host {host}"

"""Gangs that fit one host: they put no traffic on the fabric (NVLink/PCIe inside the host).

Rule 3 for a single pod: prefer a host whose fabric link is degraded or down (the pod loses
nothing there), then a host in a partly used leaf, then the best fit on the host; healthy
whole leaves stay whole for gangs. A multi-pod gang that fits one host takes the best fit
first (rule 2), with the same preferences as tie-breaks. A one-host gang never crosses its
host's access link, so a down link does not stop it; the health-blind policy cannot tell, so
it leaves down hosts alone.

Best fit is found without visiting every host: free GPUs per host are small integers, so the
engine asks, for each value from the need upwards, which leaves hold a host with exactly that
many free (``in`` on list slices runs in C).
"""

from __future__ import annotations

from fabricsched import ids
from fabricsched.placement import slots, tree
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey


def pick(
    fab: fabric.Fabric, start: slots.Base, pods: int, health_aware: bool
) -> tuple[ids.NodeName, str] | None:
    """The host for a gang that fits one host, and why; None when no single host has room."""
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
    partly = [leaf for leaf, total in zip(index.leaves, index.leaf_gpus, strict=True)
              if leaf != index.root and free_per_leaf[leaf] < total]
    partly_set = set(partly)
    whole = [leaf for leaf in index.leaves if leaf not in partly_set]

    def hosts_with(value: int, leaf: DomainKey) -> list[ids.NodeName]:
        lo, hi = index.span[leaf]
        return [index.order[i] for i in range(lo, hi) if free[i] == value]

    def leaves_with(value: int, leaves: list[DomainKey]) -> list[DomainKey]:
        spans = index.span
        return [leaf for leaf in leaves if value in free[spans[leaf][0]:spans[leaf][1]]]

    def degraded_with(value: int) -> list[ids.NodeName]:
        if not health_aware:
            return []
        return [n for n in fab.degraded_hosts if free[index.position[n]] == value]

    if pods == 1:
        # Rule 3: degraded or down links first (they are few), then partly used leaves, then
        # the tightest host, then the fullest leaf.
        if health_aware:
            group = [n for n in fab.degraded_hosts if free[index.position[n]] >= need]
            if group:
                host = min(group, key=lambda n: (
                    0 if index.leaf_of[n] in partly_set else 1, free[index.position[n]],
                    free_per_leaf[index.leaf_of[n]], n))
                return host, _reason(fab, index, partly_set, host, health_aware)
        for leaves in (partly, whole):
            for value in range(need, top + 1):
                found = leaves_with(value, leaves)
                if found:
                    leaf = min(found, key=lambda k: (free_per_leaf[k], k[1]))
                    host = min(hosts_with(value, leaf))
                    return host, _reason(fab, index, partly_set, host, health_aware)
        return None
    # A multi-pod gang on one host: the tightest host, then a degraded link, then a partly
    # used leaf, then the name.
    for value in range(need, top + 1):
        degraded = degraded_with(value)
        if degraded:
            host = min(degraded, key=lambda n: (0 if index.leaf_of[n] in partly_set else 1, n))
            return host, f"fits one host {host}"
        for leaves in (partly, whole):
            found = leaves_with(value, leaves)
            if found:
                host = min(n for leaf in found for n in hosts_with(value, leaf))
                return host, f"fits one host {host}"
    return None


def _reason(
    fab: fabric.Fabric, index: tree.Tree, partly: set[DomainKey], host: ids.NodeName, health_aware: bool
) -> str:
    record = fab.hosts[host]
    if health_aware and record.degraded:
        state = "down" if record.down else "degraded"
        return f"single pod on host {host}: its fabric link is {state}, and a single pod does not use it"
    leaf = index.leaf_of[host]
    if leaf in partly:
        return f"single pod on host {host} in partly used {fab.tiers[0].name} {leaf[1]}"
    return f"single pod on host {host}"

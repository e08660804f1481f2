"""Gangs that fit one host: they put no traffic on the fabric (NVLink/PCIe inside the host).

Rule 3 for a single pod: prefer a host whose fabric link is degraded or down (the pod loses
nothing there), then a host in a partly used leaf, then the best fit on the host; healthy
whole leaves stay whole for gangs. A multi-pod gang that fits one host takes the best fit
first (rule 2), with the same preferences as tie-breaks. A one-host gang never crosses its
host's access link, so a down link does not stop it; the health-blind policy cannot tell, so
it leaves down hosts alone.
"""

from __future__ import annotations

from collections.abc import Mapping

from fabricsched import ids
from fabricsched.placement import slots, tree
from fabricsched.topology import fabric


def _hosts_with_room(
    fab: fabric.Fabric, index: tree.Tree, start: slots.Base, pods: int, health_aware: bool
) -> list[ids.NodeName]:
    """Hosts with room for ``pods``, visiting only leaves whose fullest host has that room."""
    found: list[ids.NodeName] = []
    room = start.slots
    for leaf, (lo, hi) in zip(index.leaves, index.bounds, strict=True):
        if start.max_per_leaf.get(leaf, 0) >= pods:
            found.extend(n for n in index.order[lo:hi] if room[n] >= pods)
    if not health_aware:
        found = [n for n in found if not tree.host_down(fab.hosts[n])]
    return found


def pick(
    fab: fabric.Fabric,
    index: tree.Tree,
    start: slots.Base,
    free: Mapping[ids.NodeName, int],
    pods: int,
    health_aware: bool,
) -> tuple[ids.NodeName, str] | None:
    """The host for a gang that fits one host, and why; None when no single host has room."""
    need = pods * start.gpus_per_pod
    leaf_gpus = dict(zip(index.leaves, index.leaf_gpus, strict=True))

    def partly_used(name: ids.NodeName) -> int:
        leaf = index.leaf_of[name]
        return 0 if leaf != index.root and start.free_per_leaf[leaf] < leaf_gpus[leaf] else 1

    def degraded_first(name: ids.NodeName) -> int:
        return 0 if health_aware and tree.host_degraded(fab.hosts[name]) else 1

    if pods == 1 and health_aware:
        # The degraded hosts are few and, when any has room, decide alone.
        group = [n for n in index.degraded_hosts if start.slots[n] >= 1]
        if group:
            host = min(group, key=lambda n: (partly_used(n), free[n] - need,
                                             start.free_per_leaf[index.leaf_of[n]], n))
            return host, _single_reason(fab, index, start, host, health_aware)
    hosts = _hosts_with_room(fab, index, start, pods, health_aware)
    if not hosts:
        return None
    if pods == 1:
        host = min(hosts, key=lambda n: (partly_used(n), free[n] - need,
                                         start.free_per_leaf[index.leaf_of[n]], n))
        return host, _single_reason(fab, index, start, host, health_aware)
    least_left = min(free[n] - need for n in hosts)
    group = [n for n in hosts if free[n] - need == least_left]
    host = min(group, key=lambda n: (degraded_first(n), partly_used(n), n))
    return host, f"fits one host {host}"


def _single_reason(
    fab: fabric.Fabric, index: tree.Tree, start: slots.Base, host: ids.NodeName, health_aware: bool
) -> str:
    record = fab.hosts[host]
    if health_aware and tree.host_degraded(record):
        state = "down" if tree.host_down(record) else "degraded"
        return f"single pod on host {host}: its fabric link is {state}, and a single pod does not use it"
    leaf = index.leaf_of[host]
    if leaf != index.root and start.free_per_leaf[leaf] < fab.domains[leaf].gpus:
        return f"single pod on host {host} in partly used {fab.tiers[0].name} {leaf[1]}"
    return f"single pod on host {host}"

"""Free GPUs: one representation, a map from host to GPUs free (never below 0), and the two
ways it is made: from what pods hold (the operator's snapshots), and once reservations are
taken out (the extender's decisions, the topology status)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fabricsched import ids
from fabricsched.topology import fabric

Free = dict[ids.NodeName, int]
"""GPUs free per host of a fabric, never negative."""


def free_of(fab: fabric.Fabric, used: Callable[[ids.NodeName], int]) -> Free:
    """Allocatable GPUs of every host minus ``used(host)``, what active pods hold (floor 0)."""
    return {name: max(0, host.gpus - used(name)) for name, host in fab.hosts.items()}


def unreserved(free: int, held: int) -> int:
    """One host's free GPUs once ``held`` of them are reserved for plans: the one "free minus
    reserved" (floor 0), for maps (``free_after``) and single hosts (the fabric page's rows)."""
    return max(0, free - held)


def free_after(free: Mapping[ids.NodeName, int], reserved: Mapping[ids.NodeName, int]) -> Free:
    """``free`` once ``reserved`` (GPUs held for plans, per node) is taken out (floor 0); nodes
    outside ``free`` are not in the answer."""
    out = dict(free)
    for node, held in reserved.items():
        if node in out:
            out[node] = unreserved(out[node], held)
    return out

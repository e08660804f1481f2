"""Why each node a pod may not use fails the filter: one reason per node, naming the rule.

These strings are what ``kubectl describe pod`` shows under "0/N nodes are available", so
they name the gang, the domain and the rule rather than the algorithm's internals.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fabricsched import ids
from fabricsched.extender import reservations
from fabricsched.placement import tree
from fabricsched.topology import fabric

_MAX_LISTED = 4


@dataclass(frozen=True)
class Footprint:
    """The parts of a plan the reasons refer to, computed once per filter call."""

    gang: str
    rank: int
    target: ids.NodeName
    multi_host: bool
    by_tier: tuple[tuple[int, str, frozenset[ids.DomainName]], ...]
    """(tier index, tier name, domains the gang uses), lowest tier first."""

    @classmethod
    def of(cls, fab: fabric.Fabric, entry: reservations.Entry, rank: int, target: ids.NodeName) -> Footprint:
        by_tier = []
        for index, tier in enumerate(fab.tiers):
            used = entry.domains.get(tier.name)
            if used:
                by_tier.append((index, str(tier.name), frozenset(used)))
        hosts = {node for _, node in entry.placed()}
        return cls(entry.display, rank, target, len(hosts) > 1 or entry.size > 1, tuple(by_tier))


def holders(entries: Iterable[reservations.Entry], exclude: ids.GangKey) -> dict[ids.NodeName, str]:
    """Node -> the first other gang holding unbound ranks there (one pass over the book)."""
    out: dict[ids.NodeName, str] = {}
    for entry in entries:
        if entry.key == exclude:
            continue
        for _, node in entry.held():
            out.setdefault(node, entry.display)
    return out


def failed(
    fab: fabric.Fabric,
    topology: ids.TopologyName,
    candidates: Iterable[ids.NodeName],
    plan: Footprint,
    free: Mapping[ids.NodeName, int],
    gpus_per_pod: int,
    reserved_by: Mapping[ids.NodeName, str],
) -> dict[str, str]:
    """A reason for every candidate but the rank's planned node.

    ``free`` is free GPUs after other gangs' reservations; a node short of room because of
    them says whose reservation it is, which is what an operator looks for first.
    """
    out: dict[str, str] = {}
    for node in candidates:
        if node == plan.target:
            continue
        out[node] = _reason(fab, topology, node, plan, free, gpus_per_pod, reserved_by)
    return out


def _reason(
    fab: fabric.Fabric,
    topology: ids.TopologyName,
    node: ids.NodeName,
    plan: Footprint,
    free: Mapping[ids.NodeName, int],
    gpus_per_pod: int,
    reserved_by: Mapping[ids.NodeName, str],
) -> str:
    host = fab.hosts.get(node)
    if host is None:
        return f"not part of fabric {topology}, where gang {plan.gang} is planned"
    holder = reserved_by.get(node)
    if holder is not None and free.get(node, 0) < gpus_per_pod:
        return f"reserved for gang {holder}"
    if plan.multi_host and tree.host_degraded(host):
        state = "down" if tree.host_down(host) else "degraded"
        return f"fabric link of this host is {state}"
    # Name the gang's home (its lowest single domain) first, then the domains it uses below.
    home = next((i for i, (_, _, used) in enumerate(plan.by_tier) if len(used) == 1), len(plan.by_tier))
    order = [home] if home < len(plan.by_tier) else []
    order += list(range(home - 1, -1, -1))
    for i in order:
        tier_index, tier_name, used = plan.by_tier[i]
        if host.path[tier_index] not in used:
            return f"outside gang {plan.gang}'s {_domains(tier_name, used)}"
    return f"rank {plan.rank} of gang {plan.gang} is planned on {plan.target}"


def _domains(tier: str, used: frozenset[ids.DomainName]) -> str:
    names = sorted(used)
    if len(names) == 1:
        return f"{tier} {names[0]}"
    shown = ", ".join(names[:_MAX_LISTED])
    more = f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else ""
    plural = tier if tier.endswith("s") else f"{tier}s"
    return f"{plural} {shown}{more}"

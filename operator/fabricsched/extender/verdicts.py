"""Why each node a pod may not use fails the filter: one reason per node, naming the rule.

These strings are what ``kubectl describe pod`` shows under "0/N nodes are available", so
they name the gang, the domain and the rule rather than the algorithm's internals.

The scheduler gets one reason per candidate node (10k of them) and the filter answer repeats
each, so every reason is at most ``MAX_REASON_BYTES`` (``bounded``), user text inside one is
only ever a short excerpt (``parsing.excerpt``, made where the text is read), and a map gives
every node that fails for the same reason the same string object (``every``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fabricsched import ids, parsing
from fabricsched.extender import reservations
from fabricsched.topology import fabric

MAX_REASON_BYTES = 160
"""Longest reason given for one node (UTF-8 bytes): a filter answer for N nodes stays near
N x (160 + the node's name), whatever a pod carries."""

_MAX_LISTED = 4
_DEGRADED = "fabric link of this host is degraded"
_DOWN = "fabric link of this host is down"


@dataclass(frozen=True)
class Footprint:
    """The parts of a plan the reasons refer to, with their messages made once per filter call
    (a 10k-node filter asks for one reason per node)."""

    gang: str
    target: ids.NodeName
    multi_host: bool
    checks: tuple[tuple[int, frozenset[ids.DomainName], str], ...]
    """(tier index, domains the gang uses there, reason for a node outside them), in the order
    they are asked: the gang's home (its lowest single domain) first, then the tiers below it."""
    default: str

    @classmethod
    def of(cls, fab: fabric.Fabric, entry: reservations.Entry, rank: int, target: ids.NodeName) -> Footprint:
        by_tier = []
        for index, tier in enumerate(fab.tiers):
            used = entry.domains.get(tier.name)
            if used:
                message = f"outside gang {entry.display}'s {_domains(tier.name, used)}"
                by_tier.append((index, frozenset(used), bounded(message)))
        home = next((i for i, (_, used, _) in enumerate(by_tier) if len(used) == 1), len(by_tier))
        order = ([home] if home < len(by_tier) else []) + list(range(home - 1, -1, -1))
        hosts = {node for _, node in entry.placed()}
        return cls(
            gang=entry.display,
            target=target,
            multi_host=len(hosts) > 1 or entry.size > 1,
            checks=tuple(by_tier[i] for i in order),
            default=bounded(f"rank {rank} of gang {entry.display} is planned on {target}"),
        )


def bounded(reason: str) -> str:
    """``reason`` cut to ``MAX_REASON_BYTES``, with an ellipsis when cut."""
    return parsing.truncate(reason, MAX_REASON_BYTES)


def every(nodes: Iterable[str], reason: str) -> dict[str, str]:
    """The same bounded reason for every node: one string object shared by all of them."""
    return dict.fromkeys(nodes, bounded(reason))


def rank_taken(entry: reservations.Entry, rank: int) -> str:
    """Why a pod whose rank another live pod of its gang is bound to gets no node."""
    return bounded(
        f"rank {rank} of gang {entry.display} is already bound on {entry.bound[rank]} by another pod "
        "(a duplicated rank, or its previous pod is still terminating)"
    )


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
    candidates: Iterable[str],
    plan: Footprint,
    free: Mapping[ids.NodeName, int],
    gpus_per_pod: int,
    reserved_by: Mapping[ids.NodeName, str],
) -> dict[str, str]:
    """A reason for every candidate but the rank's planned node (``reason`` of each).

    ``free`` is free GPUs after other gangs' reservations; a node short of room because of
    them says whose reservation it is, which is what an operator looks for first.

    The scheduler passes every node that fits (10k), and nearly all of them fail for one
    reason: outside the domains the plan's first check keeps (the gang's home). So every
    candidate starts with that reason (one C-level ``dict.fromkeys``), and ``reason`` is asked
    only for the few nodes whose answer can differ: hosts inside those domains, hosts with a
    degraded link, nodes holding another gang's reservation, and nodes outside the fabric.
    """
    if plan.checks:
        tier_index, used, bulk = plan.checks[0]
        inside: list[ids.NodeName] = []
        for name in used:
            domain = fab.domains.get((tier_index, name))
            if domain is not None:
                inside.extend(domain.hosts)
    else:
        bulk, inside = plan.default, []
    out = dict.fromkeys(candidates, bulk)
    hosts = fab.hosts.keys()
    if not out.keys() <= hosts:  # a C-level pass without a copy; usually all are in the fabric
        # The first rule needs no per-node work either: one message for every node outside it.
        out.update(dict.fromkeys(out.keys() - hosts, _outside_fabric(topology, plan)))
    if plan.multi_host:
        # In the fabric, so the link rule is what applies unless a reservation does (below).
        for node in fab.degraded_hosts:
            if node in out:
                out[node] = _DOWN if fab.hosts[node].down else _DEGRADED
    shared: dict[str, str] = {}  # equal reasons share one string object, as the bulk ones do
    for node in inside:
        if node in out:
            found = reason(fab, topology, node, plan, free, gpus_per_pod, reserved_by)
            out[node] = shared.setdefault(found, found)
    # Outside the home, a node another gang holds differs from its bulk reason only when that
    # hold leaves it too little room (``reason``'s first rule): one message per holding gang,
    # not one ``reason`` per held node (at 300 planned gangs that was most of a filter call).
    held: dict[str, str] = {}
    for node, holder in reserved_by.items():
        if node in out and node in hosts and free.get(node, 0) < gpus_per_pod:
            message = held.get(holder)
            if message is None:
                message = held[holder] = _reserved_for(holder)
            out[node] = message
    out.pop(plan.target, None)
    return out


def reason(
    fab: fabric.Fabric,
    topology: ids.TopologyName,
    node: ids.NodeName,
    plan: Footprint,
    free: Mapping[ids.NodeName, int],
    gpus_per_pod: int,
    reserved_by: Mapping[ids.NodeName, str],
) -> str:
    """Why ``node`` (not the rank's planned node) fails: the first rule that excludes it."""
    host = fab.hosts.get(node)
    if host is None:
        return _outside_fabric(topology, plan)
    holder = reserved_by.get(node)
    if holder is not None and free.get(node, 0) < gpus_per_pod:
        return _reserved_for(holder)
    if plan.multi_host and host.degraded:
        return _DOWN if host.down else _DEGRADED
    for tier_index, used, message in plan.checks:
        if host.path[tier_index] not in used:
            return message
    return plan.default


def _reserved_for(holder: str) -> str:
    return bounded(f"reserved for gang {holder}")


def _outside_fabric(topology: ids.TopologyName, plan: Footprint) -> str:
    return bounded(f"not part of fabric {topology}, where gang {plan.gang} is planned")


def _domains(tier: str, used: Iterable[ids.DomainName]) -> str:
    names = sorted(used)
    if len(names) == 1:
        return f"{tier} {names[0]}"
    shown = ", ".join(names[:_MAX_LISTED])
    more = f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else ""
    plural = tier if tier.endswith("s") else f"{tier}s"
    return f"{plural} {shown}{more}"

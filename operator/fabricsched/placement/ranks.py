"""Rank order (rule 4): consecutive ranks on one host, then one leaf, then one spine.

Rings and trees of collectives connect rank i to rank i+1; numbering pods in fabric order
keeps most of those neighbours on the same host or leaf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fabricsched import ids
from fabricsched.topology import fabric


def fabric_order(fab: fabric.Fabric, name: ids.NodeName) -> tuple[tuple[str, ...], str]:
    """Top tier first, then down to the host name: sorting by it groups every subtree."""
    return tuple(reversed(fab.hosts[name].path)), name


def order(fab: fabric.Fabric, pods_per_host: Mapping[ids.NodeName, int]) -> tuple[ids.NodeName, ...]:
    """One entry per pod (the node of every rank), rank 0 first."""
    out: list[ids.NodeName] = []
    for name in sorted(pods_per_host, key=lambda n: fabric_order(fab, n)):
        out.extend([name] * pods_per_host[name])
    return tuple(out)


def domains_used(fab: fabric.Fabric, ranks: Sequence[ids.NodeName]) -> dict[int, tuple[ids.DomainName, ...]]:
    """Distinct domains per tier index, in rank order."""
    used: dict[int, list[ids.DomainName]] = {t: [] for t in range(len(fab.tiers))}
    for name in dict.fromkeys(ranks):
        for tier, domain in enumerate(fab.hosts[name].path):
            if domain not in used[tier]:
                used[tier].append(domain)
    return {t: tuple(names) for t, names in used.items()}


def slice_domains(
    fab: fabric.Fabric, ranks: Sequence[ids.NodeName], size: int, tier: int
) -> tuple[ids.DomainName, ...]:
    """The domain of ``tier`` holding each group of ``size`` consecutive ranks, slice 0 first;
    empty when a slice spans two domains."""
    named: list[ids.DomainName] = []
    for lo in range(0, len(ranks), size):
        inside = {fab.hosts[n].path[tier] for n in ranks[lo:lo + size]}
        if len(inside) != 1:
            return ()
        named.extend(inside)
    return tuple(named)

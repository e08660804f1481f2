"""The fabric tree as the engine walks it: keys and links of one fabric's structure.

A ``Tree`` depends on the hosts, their GPUs and paths only, never on health: the snapshot
(``placement.snapshot``) keeps one per fabric structure and reuses it across health changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fabricsched import ids
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey


@dataclass(frozen=True)
class Tree:
    """Keys and links of one fabric, in deterministic (name) order.

    The whole fabric is a pseudo-domain ``root`` = ``(len(tiers), "")``: a gang that spans
    several top-tier domains is "inside the root", and those top-tier domains are then
    partially spanned (their uplinks carry its traffic).
    """

    levels: int
    """Number of tiers; ``root`` sits at this tier index."""
    root: DomainKey
    by_tier: tuple[tuple[DomainKey, ...], ...]
    """Domain keys per tier sorted by name; ``by_tier[levels]`` is ``(root,)``."""
    children: Mapping[DomainKey, tuple[DomainKey, ...]]
    """Child domains of every domain above tier 0, and of the root when there are tiers."""
    parent: Mapping[DomainKey, DomainKey]
    """The inverse of ``children``: the domain (or root) whose sums include each domain."""
    hosts_under: Mapping[DomainKey, tuple[ids.NodeName, ...]]
    """Hosts directly below every tier-0 domain (and below the root of a tier-less fabric)."""
    leaf_of: Mapping[ids.NodeName, DomainKey]
    """The domain a host hangs from: its tier-0 domain, or the root of a tier-less fabric."""
    order: tuple[ids.NodeName, ...]
    """Every host, grouped by the domain it hangs from (``leaves`` order), in fabric order."""
    position: Mapping[ids.NodeName, int]
    """Index of every host in ``order``."""
    leaves: tuple[DomainKey, ...]
    """The domains hosts hang from; ``order[lo[i]:hi[i]]`` hang from ``leaves[i]``."""
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    span: Mapping[DomainKey, tuple[int, int]]
    """``(lo, hi)`` of every entry of ``leaves``."""
    leaf_gpus: tuple[int, ...]
    """Total GPUs per entry of ``leaves``."""
    host_gpus: tuple[int, ...]
    """Allocatable GPUs of every host in ``order``."""
    gpus_under: Mapping[DomainKey, int]
    """Total GPUs under every domain and the root."""
    host_leaf: tuple[int, ...]
    """Index into ``leaves`` of every host in ``order``."""

    def is_leaf(self, key: DomainKey) -> bool:
        return key in self.hosts_under


def build(fab: fabric.Fabric) -> Tree:
    levels = len(fab.tiers)
    root: DomainKey = (levels, ids.DomainName(""))
    by_tier: list[list[DomainKey]] = [[] for _ in range(levels)]
    for key in fab.domains:
        by_tier[key[0]].append(key)
    for keys in by_tier:
        keys.sort(key=lambda k: k[1])
    children: dict[DomainKey, tuple[DomainKey, ...]] = {}
    hosts_under: dict[DomainKey, tuple[ids.NodeName, ...]] = {}
    for key, domain in fab.domains.items():
        if key[0] == 0:
            hosts_under[key] = domain.hosts
        else:
            children[key] = tuple(sorted(((key[0] - 1, c) for c in domain.children), key=lambda k: k[1]))
    if levels:
        children[root] = tuple(by_tier[levels - 1])
        leaf_of = {name: (0, host.path[0]) for name, host in fab.hosts.items()}
    else:
        hosts_under[root] = tuple(sorted(fab.hosts))
        leaf_of = {name: root for name in fab.hosts}
    leaves = tuple(by_tier[0]) if levels else (root,)
    order: list[ids.NodeName] = []
    lo: list[int] = []
    for leaf in leaves:
        lo.append(len(order))
        order.extend(hosts_under[leaf])
    hi = [*lo[1:], len(order)] if lo else []  # a fabric with tiers but no host has no leaf
    parent = {c: key for key, kids in children.items() for c in kids}
    return Tree(
        levels=levels,
        order=tuple(order),
        position={name: i for i, name in enumerate(order)},
        leaves=leaves,
        lo=tuple(lo),
        hi=tuple(hi),
        span={leaf: (a, b) for leaf, a, b in zip(leaves, lo, hi, strict=True)},
        leaf_gpus=tuple(sum(fab.hosts[h].gpus for h in hosts_under[leaf]) for leaf in leaves),
        host_gpus=tuple(fab.hosts[h].gpus for h in order),
        gpus_under={**{key: domain.gpus for key, domain in fab.domains.items()},
                    root: sum(host.gpus for host in fab.hosts.values())},
        root=root,
        by_tier=(*(tuple(keys) for keys in by_tier), (root,)),
        children=children,
        parent=parent,
        hosts_under=hosts_under,
        leaf_of=leaf_of,
        host_leaf=tuple(i for i, (a, b) in enumerate(zip(lo, hi, strict=True)) for _ in range(a, b)),
    )

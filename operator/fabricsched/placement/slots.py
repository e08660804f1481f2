"""Room for one gang: pod slots per host, summed up the tree, and how a plan splits them.

A slot is room for one pod: ``free // gpus_per_pod`` on a candidate host. The engine never
looks at hosts to compare plans; it compares domains by their slot sums (``Room``), and picks
hosts only inside the one plan it keeps. That is what keeps a decision at 10k hosts in a few ms.

Which elements a multi-host gang may use depends on the ``Mode``: a healthy plan uses no
degraded element on its path; a fallback (or health-blind) plan uses anything but a down one.
Below the domain that holds the whole gang every domain is partially spanned, so its uplinks
are on the path: that is why ``part`` (room usable while partially spanned) drops a domain
whose uplinks are excluded, and ``full`` (room when the domain holds the whole gang) does not.
"""

from __future__ import annotations

import enum
import itertools
import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fabricsched import ids
from fabricsched.placement import tree
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey
K = TypeVar("K", ids.NodeName, DomainKey)


class Mode(enum.Enum):
    HEALTHY = "healthy"
    """No degraded or down host, no degraded or down uplink of a partially spanned domain."""
    NOT_DOWN = "not-down"
    """Anything but a down element (fallback, and the health-blind policy)."""


@dataclass(frozen=True)
class Base:
    """Slots on every host of the fabric (0 outside the candidates), whatever its health."""

    gpus_per_pod: int
    slots: Mapping[ids.NodeName, int]
    """Every host of the fabric; 0 when it has no room or is not a candidate."""
    per_leaf: Mapping[DomainKey, int]
    """Sum of ``slots`` under every tier-0 domain (or the root of a tier-less fabric)."""
    free_per_leaf: Mapping[DomainKey, int]
    """Free GPUs under every tier-0 domain, candidates or not (rule 3's "partly used")."""
    max_per_leaf: Mapping[DomainKey, int]
    """Most slots on one host under every tier-0 domain."""


def base(
    index: tree.Tree, free: Mapping[ids.NodeName, int], gpus_per_pod: int,
    allowed: Collection[ids.NodeName] | None,
) -> Base:
    """The one per-host pass of a decision, in C-level maps over the tree's host order
    (a Python loop over 10k hosts alone would cost milliseconds)."""
    free_gpus = list(map(free.get, index.order, itertools.repeat(0)))
    room = list(map(operator.floordiv, free_gpus, itertools.repeat(gpus_per_pod)))
    if allowed is not None:
        room = list(map(operator.mul, room, map(allowed.__contains__, index.order)))
    if room and min(room) < 0:
        room = [max(0, n) for n in room]  # over-reserved hosts: no room, not negative room
    per_leaf: dict[DomainKey, int] = {}
    free_per_leaf: dict[DomainKey, int] = {}
    max_per_leaf: dict[DomainKey, int] = {}
    for leaf, (lo, hi) in zip(index.leaves, index.bounds, strict=True):
        if lo == hi:
            continue
        part = room[lo:hi]
        per_leaf[leaf] = sum(part)
        max_per_leaf[leaf] = max(part)
        free_per_leaf[leaf] = sum(free_gpus[lo:hi])
    return Base(gpus_per_pod, dict(zip(index.order, room, strict=True)), per_leaf, free_per_leaf, max_per_leaf)


@dataclass(frozen=True)
class Room:
    """Slots a multi-host gang may use in one mode, per host and per domain."""

    mode: Mode
    slots: Mapping[ids.NodeName, int]
    full: Mapping[DomainKey, int]
    """Slots when the domain (or the root) holds the whole gang."""
    part: Mapping[DomainKey, int]
    """Slots when the domain is partially spanned: 0 if its uplinks are excluded in this mode."""


def room(fab: fabric.Fabric, index: tree.Tree, start: Base, mode: Mode) -> Room:
    host_out = tree.host_degraded if mode is Mode.HEALTHY else tree.host_down
    domain_out = tree.domain_degraded if mode is Mode.HEALTHY else tree.domain_down
    excluded = [n for n in index.degraded_hosts if start.slots[n] and host_out(fab.hosts[n])]
    slots: Mapping[ids.NodeName, int] = start.slots
    per_leaf = dict(start.per_leaf)
    if excluded:
        kept = dict(start.slots)
        for name in excluded:
            per_leaf[index.leaf_of[name]] -= kept[name]
            kept[name] = 0
        slots = kept
    bad = {k for k in index.degraded_domains if domain_out(fab.domains[k])}
    full = {leaf: per_leaf.get(leaf, 0) for leaf in index.leaves}
    part = dict(full)
    for key in bad:
        if key[0] == 0:
            part[key] = 0
    for keys in index.by_tier[1:]:
        for key in keys:
            total = sum(part[c] for c in index.children[key])
            full[key] = total
            part[key] = 0 if key in bad else total
    return Room(mode, slots, full, part)


def pack(items: Sequence[tuple[K, int]], pods: int) -> list[tuple[K, int]] | None:
    """Fewest items, then best fit: the largest ones whole, then the smallest that holds the rest.

    Leaves the least room behind in the items it touches, so large holes stay whole.
    """
    order = sorted((it for it in items if it[1] > 0), key=lambda it: (-it[1], it[0]))
    taken: list[tuple[K, int]] = []
    left = pods
    for i, (key, cap) in enumerate(order):
        if cap >= left:
            j = i
            while j + 1 < len(order) and order[j + 1][1] >= left:
                j += 1
            while j > i and order[j - 1][1] == order[j][1]:
                j -= 1  # among equal fits, the first name
            taken.append((order[j][0], left))
            return taken
        taken.append((key, cap))
        left -= cap
    return None


def fill(
    items: Sequence[tuple[K, int]], pods: int, key: Callable[[tuple[K, int]], tuple[Any, ...]]
) -> list[tuple[K, int]] | None:
    """Take items in ``key`` order, each as full as needed: used where preference beats packing."""
    taken: list[tuple[K, int]] = []
    left = pods
    for name, cap in sorted((it for it in items if it[1] > 0), key=key):
        take = min(cap, left)
        taken.append((name, take))
        left -= take
        if left == 0:
            return taken
    return None


Chooser = Callable[[Sequence[tuple[K, int]], int], list[tuple[K, int]] | None]


@dataclass(frozen=True)
class Split:
    """Pods per domain below the holding domain, and per host."""

    domains: Mapping[DomainKey, int]
    hosts: Mapping[ids.NodeName, int]


def split(
    index: tree.Tree,
    space: Room,
    holder: DomainKey,
    pods: int,
    pick_first: Chooser[DomainKey],
    pick_domains: Chooser[DomainKey],
    pick_hosts: Chooser[ids.NodeName] | None,
) -> Split | None:
    """Spread ``pods`` below ``holder``: ``pick_first`` splits the holder among its children,
    ``pick_domains`` every domain below; hosts are only chosen when ``pick_hosts`` is given
    (comparing holders needs pods per domain only)."""
    domains: dict[DomainKey, int] = {}
    hosts: dict[ids.NodeName, int] = {}
    stack = [(holder, pods)]
    while stack:
        key, n = stack.pop()
        if index.is_leaf(key):
            if pick_hosts is None:
                continue
            room_here = [(h, space.slots[h]) for h in index.hosts_under[key] if space.slots.get(h)]
            chosen_hosts = pick_hosts(room_here, n)
            if chosen_hosts is None:
                return None
            hosts.update(chosen_hosts)
            continue
        pick = pick_first if key == holder else pick_domains
        chosen = pick([(c, space.part[c]) for c in index.children[key]], n)
        if chosen is None:
            return None
        for child, m in chosen:
            domains[child] = m
            stack.append((child, m))
    return Split(domains, hosts)


def shape(index: tree.Tree, holder: DomainKey, domains: Mapping[DomainKey, int]) -> tuple[int, ...]:
    """Domains used per tier, from just below the holder down to tier 0: fewer is better."""
    counts = [0] * holder[0]
    for key in domains:
        counts[key[0]] += 1
    return tuple(reversed(counts))

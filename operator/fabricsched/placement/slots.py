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

import bisect
import dataclasses
import itertools
import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fabricsched import ids
from fabricsched.placement import modes, tree
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey
K = TypeVar("K", ids.NodeName, DomainKey)


Mode = modes.Mode

Sums = tuple[dict[DomainKey, int], dict[DomainKey, int]]
"""A room's ``full`` and ``part`` slot sums per domain."""


@dataclass
class Derived:
    """What decisions derive from one ``Base``, filled in on first use; never anything that
    refers back to the Base (a Base holding Rooms holding it would live until the cyclic GC)."""

    free_per_leaf: Mapping[DomainKey, int] | None = None
    """Free GPUs under every leaf, candidates or not."""
    top: int | None = None
    """The most free GPUs on one candidate host."""
    sums: dict[Mode, Sums] = dataclasses.field(default_factory=dict)
    """Slot sums per mode (``room``)."""
    per_domain: Mapping[DomainKey, int] | None = None
    """Slots under every domain, whatever the mode (best fit for gangs on one host)."""
    free_per_domain: Mapping[DomainKey, int] | None = None
    """Free GPUs under every domain, candidates or not (is the domain whole?)."""


@dataclass(frozen=True)
class Base:
    """Free GPUs and slots on every host of the fabric, whatever its health, as lists in the
    tree's host order: a decision touches 10k hosts only through C-level maps and sums.

    ``state`` keeps one per snapshot and gang shape and patches it where free GPUs changed, so
    a Base is never changed once another decision may hold it; ``derived`` only fills in."""

    index: tree.Tree
    gpus_per_pod: int
    free: Sequence[int]
    """Free GPUs per host in ``index.order``; 0 outside the candidates, never negative."""
    free_all: Sequence[int]
    """Free GPUs per host in ``index.order``, candidates or not (what is in use)."""
    room: Sequence[int]
    """Slots per host in ``index.order``."""
    per_leaf: Mapping[DomainKey, int]
    """Sum of slots under every tier-0 domain (or the root of a tier-less fabric)."""
    derived: Derived = dataclasses.field(default_factory=Derived, compare=False, repr=False)

    def slots(self, name: ids.NodeName) -> int:
        return self.room[self.index.position[name]]

    def leaf_sums(self, values: Sequence[int]) -> dict[DomainKey, int]:
        """Sum of ``values`` (in host order) under every leaf, by prefix sums."""
        prefix = list(itertools.accumulate(values, initial=0))
        his = map(prefix.__getitem__, self.index.hi)
        los = map(prefix.__getitem__, self.index.lo)
        return dict(zip(self.index.leaves, map(operator.sub, his, los), strict=True))

    def free_per_leaf(self) -> Mapping[DomainKey, int]:
        """Free GPUs under every leaf, candidates or not (is the leaf partly used?)."""
        found = self.derived.free_per_leaf
        if found is None:
            found = self.derived.free_per_leaf = self.leaf_sums(self.free_all)
        return found

    def per_domain(self) -> Mapping[DomainKey, int]:
        """Slots under every domain and the root, whatever the mode."""
        found = self.derived.per_domain
        if found is None:
            found = self.derived.per_domain = up_the_tree(self.index, self.per_leaf)
        return found

    def whole(self, key: DomainKey) -> bool:
        """Nothing under the domain is in use (the root is never whole: it holds everything)."""
        found = self.derived.free_per_domain
        if found is None:
            found = self.derived.free_per_domain = up_the_tree(self.index, self.free_per_leaf())
        return key != self.index.root and found[key] == self.index.gpus_under[key]

    def most_free(self) -> int:
        """The most free GPUs on one candidate host."""
        top = self.derived.top
        if top is None:
            top = self.derived.top = max(self.free, default=0)
        return top


def base(
    index: tree.Tree, free: Mapping[ids.NodeName, int], gpus_per_pod: int,
    allowed: Collection[ids.NodeName] | None,
) -> Base:
    """The per-host pass of a decision from scratch (a Python loop over 10k hosts would cost ms)."""
    every = list(map(free.get, index.order, itertools.repeat(0)))
    mask = None if allowed is None else list(map(allowed.__contains__, index.order))
    return from_lists(index, gpus_per_pod, every, mask)


def from_lists(index: tree.Tree, gpus_per_pod: int, every: list[int], mask: list[bool] | None) -> Base:
    """``base`` from free GPUs per host in tree order and which hosts are candidates."""
    gpus = every if mask is None else list(map(operator.mul, every, mask))
    if gpus and min(gpus) < 0:
        gpus = [max(0, n) for n in gpus]  # an over-reserved host has no room, not negative room
    room = list(map(operator.floordiv, gpus, itertools.repeat(gpus_per_pod)))
    start = Base(index, gpus_per_pod, gpus, every, room, {})
    return dataclasses.replace(start, per_leaf=start.leaf_sums(room))


@dataclass(frozen=True)
class Room:
    """Slots a multi-host gang may use in one mode, per host and per domain."""

    mode: Mode
    start: Base
    excluded: frozenset[ids.NodeName]
    """Hosts the mode leaves out (with room or not: the set belongs to the snapshot)."""
    full: Mapping[DomainKey, int]
    """Slots when the domain (or the root) holds the whole gang."""
    part: Mapping[DomainKey, int]
    """Slots when the domain is partially spanned: 0 if its uplinks are excluded in this mode."""

    def slots(self, name: ids.NodeName) -> int:
        return 0 if name in self.excluded else self.start.slots(name)

    def total(self) -> int:
        return sum(self.start.room) - sum(self.start.slots(n) for n in self.excluded)


def up_the_tree(index: tree.Tree, per_leaf: Mapping[DomainKey, int]) -> dict[DomainKey, int]:
    """Leaf sums summed up every tier to the root."""
    sums = dict(per_leaf)
    for keys in index.by_tier[1:]:
        for key in keys:
            sums[key] = sum(sums[c] for c in index.children[key])
    return sums


def ancestors(index: tree.Tree, rooms: Mapping[DomainKey, int], key: DomainKey) -> tuple[int, ...]:
    """``rooms`` of the domains above ``key``, top tier first (the root left out): best fit top
    down compares these first, so the tightest top-tier domain wins, then the tightest below."""
    found: list[int] = []
    up = index.parent.get(key)
    while up is not None and up != index.root:
        found.append(rooms[up])
        up = index.parent.get(up)
    return tuple(reversed(found))


def tightest(
    index: tree.Tree, rooms: Mapping[DomainKey, int], holds: Callable[[DomainKey], bool],
    leaf_order: Callable[[DomainKey], Any],
) -> DomainKey | None:
    """Best fit top down: of the leaves that ``holds`` accepts, the one under the tightest
    top-tier domain, then the tightest domain below it, and so on (``rooms``), then the least
    by ``leaf_order``; None when no leaf holds. It equals the least leaf by the key
    ``(slots.ancestors(...), leaf_order(leaf))`` (every leaf hangs at tier 0), but walks down
    from the tightest domains and asks ``holds`` only under them: at 10,000 hosts the key of
    every leaf cost a single pod's filter 2 ms."""
    held: dict[DomainKey, bool] = {}

    def holds_under(key: DomainKey) -> bool:
        found = held.get(key)
        if found is None:
            found = held[key] = (holds(key) if index.is_leaf(key)
                                 else any(map(holds_under, index.children[key])))
        return found

    tied = [index.root]
    for _ in range(index.levels - 1):  # the tiers above the leaves, top first
        below = sorted((c for key in tied for c in index.children[key]), key=rooms.__getitem__)
        tied = []
        for key in below:
            if tied and rooms[key] > rooms[tied[0]]:
                break
            if holds_under(key):
                tied.append(key)
        if not tied:
            return None
    leaves = [c for key in tied for c in index.children[key]] if index.levels else tied
    return min(filter(holds_under, leaves), key=leaf_order, default=None)


def sliced(index: tree.Tree, space: Room, size: int, tier: int) -> Room:
    """``space`` for a gang cut in slices of ``size`` pods, each inside one domain of ``tier``:
    a domain of that tier holds whole slices only, and the tiers above sum what is left."""
    full, part = dict(space.full), dict(space.part)
    for key in index.by_tier[tier]:
        full[key] -= full[key] % size
        part[key] -= part[key] % size
    for keys in index.by_tier[tier + 1:]:
        for key in keys:
            total = sum(part[c] for c in index.children[key])
            excluded = space.full[key] > 0 and space.part[key] == 0  # its uplinks are left out
            full[key], part[key] = total, 0 if excluded else total
    return Room(space.mode, space.start, space.excluded, full, part)


def room(start: Base, mode: Mode, left_out: modes.LeftOut) -> Room:
    """Slots of ``mode`` per domain, summed up the tree (``left_out``: what the mode leaves out
    of this snapshot); the sums are kept in ``start.derived``, not the Room."""
    index = start.index
    excluded, bad = left_out
    sums = start.derived.sums.get(mode)
    if sums is not None:
        return Room(mode, start, excluded, *sums)
    full = dict(start.per_leaf)
    for name in excluded:
        full[index.leaf_of[name]] -= start.slots(name)
    part = dict(full)
    for key in bad:
        if key[0] == 0:
            part[key] = 0
    for keys in index.by_tier[1:]:
        for key in keys:
            total = sum(part[c] for c in index.children[key])
            full[key] = total
            part[key] = 0 if key in bad else total
    start.derived.sums[mode] = (full, part)
    return Room(mode, start, excluded, full, part)


def fewest(space: Room, children: Sequence[DomainKey], pods: int) -> int:
    """How many of ``children`` (partially spanned) it takes at least to hold ``pods``: the
    count ``pack`` reaches (largest first), without building the split."""
    caps = sorted(map(space.part.__getitem__, children), reverse=True)
    return bisect.bisect_left(list(itertools.accumulate(caps)), pods) + 1


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
            lo, hi = index.span[key]
            room_here = [(h, n) for h, n in zip(index.order[lo:hi], space.start.room[lo:hi], strict=True)
                         if n and h not in space.excluded]
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

"""Slots carried from one decision to the next on the same snapshot.

Between two decisions on one snapshot only a few hosts change: the gang just reserved, a pod
that ended. Reading the free map costs one C-level pass over the hosts and cannot be avoided
(callers hand a fresh or changed map), but everything derived from it can: the ``slots.Base``
of the previous decision with the same GPUs per pod, and the rooms per mode it computed, are
patched at the hosts whose free GPUs (or candidacy) changed instead of being rebuilt.

What is kept lives in ``snapshot.Snapshot.carry``, so it dies with the snapshot; it holds a few gang
shapes at most and never changes a result (tests/unit/placement/test_engine_frozen.py).
Kept objects are never modified: a patch builds new ones, so a decision running at the same
time on the same snapshot keeps a consistent view.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from fabricsched import ids
from fabricsched.placement import slots, snapshot, tree
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey

KEPT_SHAPES = 4
"""GPUs-per-pod values kept per snapshot (most recently used)."""
_CHUNK = 256
"""Hosts compared at once when looking for what changed (C-level slice comparison)."""
_PATCH_SHARE = 8
"""Patch when at most 1/_PATCH_SHARE of the hosts changed; rebuild beyond."""


def base(
    snap: snapshot.Snapshot, free: Mapping[ids.NodeName, int], gpus_per_pod: int,
    candidates: Collection[ids.NodeName] | None,
) -> slots.Base:
    """``slots.base`` for this decision, from the last one with the same ``gpus_per_pod``."""
    index, kept_bases = snap.tree, snap.carry.bases
    every = _read(snap, free)
    kept = kept_bases.get(gpus_per_pod)
    mask, seen = _mask(index, candidates, kept)
    if kept is not None:
        changed = _changed(kept.base.free_all, every)
        if mask is not kept.mask:
            changed = sorted({*changed, *_changed_masks(index, kept.mask, mask)})
        if not changed:
            fresh = kept.base
        elif len(changed) * _PATCH_SHARE <= len(every):
            fresh = _patch(snap, kept.base, every, mask, changed)
        else:
            fresh = slots.from_lists(index, gpus_per_pod, every, mask)
    else:
        fresh = slots.from_lists(index, gpus_per_pod, every, mask)
    if kept is None or fresh is not kept.base or seen is not kept.seen:
        kept_bases.pop(gpus_per_pod, None)  # re-insert: the dict's order is the use order
        kept_bases[gpus_per_pod] = snapshot.Kept(fresh, mask, seen)
        for old in list(kept_bases)[:-KEPT_SHAPES]:
            del kept_bases[old]
    return fresh


def _read(snap: snapshot.Snapshot, free: Mapping[ids.NodeName, int]) -> list[int]:
    """Free GPUs per host in tree order; a host missing from ``free`` has none."""
    index = snap.tree
    getter = snap.free_reader
    if getter is not None:
        try:
            return list(getter(free))  # a third faster than dict.get, when every host is there
        except KeyError:
            pass
    return list(map(free.get, index.order, itertools.repeat(0)))


def _mask(
    index: tree.Tree, candidates: Collection[ids.NodeName] | None, kept: snapshot.Kept | None
) -> tuple[list[bool] | None, Any]:
    """Which hosts are candidates, reused when the candidates equal the last ones."""
    if candidates is None:
        return None, None
    is_set = isinstance(candidates, set | frozenset)
    if kept is not None and kept.seen is not None:
        if is_set and isinstance(kept.seen, frozenset) and candidates == kept.seen:
            return kept.mask, kept.seen
        if isinstance(candidates, list | tuple) and type(candidates) is type(kept.seen) \
                and candidates == kept.seen:
            return kept.mask, kept.seen
    seen: Any
    if is_set:
        seen = frozenset(candidates)
        allowed: Collection[ids.NodeName] = candidates
    else:
        seen = list(candidates) if isinstance(candidates, list) else tuple(candidates)
        allowed = frozenset(seen)
    mask = list(map(allowed.__contains__, index.order))
    return (None if all(mask) else mask), seen


def _changed(old: Sequence[Any], new: Sequence[Any]) -> list[int]:
    """Positions where two equally long lists differ, comparing slices in C first."""
    if old == new:
        return []
    found: list[int] = []
    for lo in range(0, len(new), _CHUNK):
        hi = lo + _CHUNK
        if old[lo:hi] != new[lo:hi]:
            found.extend(i for i in range(lo, min(hi, len(new))) if old[i] != new[i])
    return found


def _changed_masks(index: tree.Tree, old: list[bool] | None, new: list[bool] | None) -> list[int]:
    every = [True] * len(index.order)
    return _changed(every if old is None else old, every if new is None else new)


def _patch(
    snap: snapshot.Snapshot, old: slots.Base, every: list[int], mask: list[bool] | None,
    changed: Sequence[int],
) -> slots.Base:
    """``old`` with the hosts at ``changed`` recomputed; sums and kept rooms moved by the deltas."""
    index = snap.tree
    g = old.gpus_per_pod
    free, room = list(old.free), list(old.room)
    per_leaf = dict(old.per_leaf)
    old_free_leaf = old.derived.free_per_leaf
    free_leaf = dict(old_free_leaf) if old_free_leaf is not None else None
    moved: list[tuple[int, int]] = []  # (host position, change of slots)
    for i in changed:
        gpus = every[i] if mask is None else every[i] * mask[i]
        gpus = max(0, gpus)
        slots_now = gpus // g
        leaf = index.leaves[index.host_leaf[i]]
        if free_leaf is not None:
            free_leaf[leaf] += every[i] - old.free_all[i]
        free[i] = gpus
        if slots_now != room[i]:
            moved.append((i, slots_now - room[i]))
            per_leaf[leaf] += slots_now - room[i]
            room[i] = slots_now
    fresh = slots.Base(index, g, free, every, room, per_leaf)
    if free_leaf is not None:
        fresh.derived.free_per_leaf = free_leaf
    top = old.derived.top
    if top is not None and all(old.free[i] < top or free[i] >= top for i in changed):
        fresh.derived.top = max(top, *(free[i] for i in changed))  # the most free GPUs on a host
    for mode, sums in old.derived.sums.items():
        fresh.derived.sums[mode] = _patch_sums(snap, mode, sums, moved)
    return fresh


def _patch_sums(
    snap: snapshot.Snapshot, mode: slots.Mode, sums: slots.Sums, moved: Sequence[tuple[int, int]],
) -> slots.Sums:
    """A room's sums moved by the change of slots of some hosts: up from each host's leaf until
    a domain whose uplinks the mode leaves out (its parent sees none of it)."""
    index = snap.tree
    excluded, bad = snap.left_out(mode)
    full, part = dict(sums[0]), dict(sums[1])
    parent = index.parent
    for i, delta in moved:
        if index.order[i] in excluded:
            continue
        key = index.leaves[index.host_leaf[i]]
        while True:
            full[key] += delta
            if key in bad:
                break
            part[key] += delta
            up = parent.get(key)
            if up is None:
                break
            key = up
    return full, part

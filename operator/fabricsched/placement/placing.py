"""The placement engine: one gang, the fabric, free GPUs and running traffic -> a plan or NoFit.

The extender (first pod of each gang), the simulator (``fabric`` and ``tas-bestfit``) and the
benchmarks all call ``place``; docs/design.md "Placement rules" is the specification.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricsched import ids
from fabricsched.placement import capacity, ranks, reasons, request, singles, slots, snapshot, state, tree
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey
Mode = slots.Mode


@dataclass(frozen=True)
class _Choice:
    level: int
    """Tier index of the holding domain (``levels`` for the whole fabric)."""
    holder: DomainKey
    split: slots.Split


# Algorithm overview
# ------------------
# 1. One pass over the free map turns GPUs into pod slots (free // gpus_per_pod) on candidate
#    hosts, summed per leaf (state.base: patched from the last decision on this snapshot where
#    hosts changed, else slots.base). Everything after works on domain sums.
# 2. One host first: a gang that fits one host uses no fabric at all (singles: rule 3 for a
#    single pod, best fit top down for a multi-pod gang). Health does not matter there.
# 3. Otherwise climb the levels, lowest first: one leaf, one spine, ..., the whole fabric
#    (rule 2), stopping at the required tier. At each level the holders are the domains whose
#    usable slots (slots.Room.full) reach the gang size. Health-aware, "usable" first
#    means healthy: no degraded host, no degraded uplink below the holder, where every
#    domain is partially spanned (rule 1). The first level with a holder wins; among its
#    holders (only those needing the fewest children: slots.fewest, from domain sums):
#    fewest domains per tier, then lowest comm_slowdown given the traffic, then best fit
#    top down (_fit: the room of every domain above the holder, top tier first, then the
#    room the holder has left), then the fewest whole domains broken (_broken), then name.
#    Inside a holder pods go to the largest children whole and the smallest child that
#    takes the rest (slots.pack), down to the tightest hosts; with traffic, a second split
#    favouring quiet uplinks competes on the same key. A gang cut in slices (N pods inside
#    one domain of tier T) sees each tier-T domain's room rounded down to whole slices
#    (slots.sliced), so no plan can split a slice; a preferred slice tier that no plan
#    keeps is dropped and noted.
# 4. No healthy plan but health-aware: every holder at every allowed level whose room
#    without down elements suffices is split healthiest-first, and the plan with the lowest
#    exact comm_slowdown wins (then level, shape, fit, name). It is placed now and says so.
# 5. Nothing: NoFit, unresolvable when the gang could not fit even the empty fabric (or any
#    domain of its required tier), with the reason.
# Ranks follow the fabric (ranks.order); the plan's comm_slowdown and degraded_path are the
# capacity model's, computed on the final ranks with the true health.
def place(
    snap: snapshot.Snapshot,
    free: Mapping[ids.NodeName, int],
    gang: request.GangRequest,
    traffic: capacity.Traffic | None = None,
    options: request.PlacementOptions = request.PlacementOptions(),  # noqa: B008 - frozen, shared safely
    candidates: Collection[ids.NodeName] | None = None,
) -> request.Plan | request.NoFit:
    """Plan ``gang`` on the snapshot's fabric, or say why not.

    ``snap`` is the caller's snapshot of the fabric (``snapshot.build``, kept while the
    fabric is the same: decisions on one snapshot reuse each other's work). ``free`` is GPUs
    free per host after every other gang's reservation; ``candidates``
    restricts the hosts (the nodes the kube-scheduler passed). ``traffic`` is the load of the
    gangs running now, without this one. ``Plan.tier`` is None on one host, the holding
    domain's tier index otherwise, and ``len(fab.tiers)`` when the gang spans several
    top-tier domains.
    """
    pods, g = gang.pods, gang.gpus_per_pod
    if pods < 1 or g < 1:
        return request.NoFit(f"invalid gang: {reasons.gang(pods, g)}", unresolvable=True)
    levels = snap.tree.levels
    asked = (("tier", gang.tier), ("preferred tier", gang.preferred_tier), ("slice tier", gang.slice_tier))
    for what, tier in asked:
        if tier is not None and not 0 <= tier < levels:
            return request.NoFit(f"no {what} index {tier} in a fabric of {levels} tiers", unresolvable=True)
    if gang.slice_pods < 1 or pods % gang.slice_pods:
        return request.NoFit(f"a gang of {pods} pods cannot be cut in slices of {gang.slice_pods}",
                             unresolvable=True)
    top = gang.tier if gang.required and gang.tier is not None else levels
    if not gang.sliced or gang.slice_tier is None or top <= gang.slice_tier:
        # No slices, or the whole gang inside one domain of the slice tier or below: every
        # plan keeps them whole.
        return _slices_named(snap, gang, _place(snap, free, gang, top, traffic, options, candidates, None))
    cut = (gang.slice_pods, gang.slice_tier)
    found = _place(snap, free, gang, top, traffic, options, candidates, cut)
    if isinstance(found, request.Plan):
        return _slices_named(snap, gang, found)
    what = reasons.slices(snap.fabric, *cut)
    if gang.slice_required and not _slices_ever(snap.fabric, pods, gang.gpus_per_pod, top, *cut):
        return request.NoFit(f"required {what}: no domain could ever hold the gang in whole slices",
                             unresolvable=True, required_tier=True)
    loose = _place(snap, free, gang, top, traffic, options, candidates, None)
    if isinstance(loose, request.NoFit):
        return loose
    if not gang.slice_required:
        why = f"preferred {what}: no plan keeps every slice whole now"
        return dataclasses.replace(loose, reasons=(*loose.reasons, why))
    return request.NoFit(f"required {what}: no plan keeps every slice whole now", required_tier=True)


def _slices_named(snap: snapshot.Snapshot, gang: request.GangRequest,
                  found: request.Plan | request.NoFit) -> request.Plan | request.NoFit:
    """The plan with the domain of every slice, when its slices are whole."""
    if not isinstance(found, request.Plan) or not gang.sliced or gang.slice_tier is None:
        return found
    named = ranks.slice_domains(snap.fabric, found.ranks, gang.slice_pods, gang.slice_tier)
    return dataclasses.replace(found, slice_domains=named) if named else found


def _slices_ever(fab: fabric.Fabric, pods: int, g: int, top: int, size: int, tier: int) -> bool:
    """Could the empty fabric hold the gang in whole slices inside one domain of ``top``?"""
    held: dict[str, int] = {}
    for domain in fab.tier_domains(tier):
        whole = fab.empty_slots(g, domain.hosts) // size * size
        above = fab.hosts[domain.hosts[0]].path[top] if top < len(fab.tiers) and domain.hosts else ""
        held[above] = held.get(above, 0) + whole
    return max(held.values(), default=0) >= pods


def _place(
    snap: snapshot.Snapshot,
    free: Mapping[ids.NodeName, int],
    gang: request.GangRequest,
    top: int,
    traffic: capacity.Traffic | None,
    options: request.PlacementOptions,
    candidates: Collection[ids.NodeName] | None,
    cut: tuple[int, int] | None,
) -> request.Plan | request.NoFit:
    """``place`` below the checks; ``cut``: slices of so many pods inside one domain of a tier."""
    pods, g = gang.pods, gang.gpus_per_pod
    fab, index = snap.fabric, snap.tree
    start = state.base(snap, free, g, candidates)
    aware = options.health_aware

    top_down = options.fit_order is not request.FitOrder.HOLDING
    one = singles.pick(fab, start, pods, aware, top_down)
    if one is not None:
        host, why = one
        return _plan(snap, {host: pods}, None, g, traffic, [why], gang.pattern)
    if pods == 1:
        return _no_fit(fab, index, start, gang, top, None, None)

    rooms: dict[Mode, slots.Room] = {}

    def room(mode: Mode) -> slots.Room:
        if mode not in rooms:
            rooms[mode] = slots.room(start, mode, snap.left_out(mode))
            if cut is not None:
                rooms[mode] = slots.sliced(index, rooms[mode], *cut)
        return rooms[mode]

    unhealthy = fab.unhealthy
    choice = _best(snap, room(Mode.HEALTHY if aware else Mode.NOT_DOWN), gang, top, traffic, aware, top_down)
    if choice is not None:
        notes: list[str] = []
        if aware and unhealthy:
            holders = [choice.holder]
            # Where the gang would go if health did not matter: what it avoided is there.
            lower = _lowest(index, room(Mode.NOT_DOWN), pods, top)
            if lower is not None and lower != choice.holder:
                holders.append(lower)
                if lower[0] < choice.level:
                    notes.append(f"a lower tier ({reasons.tier_name(fab, lower[0])}) would hold it only "
                                 "across degraded elements")
            notes.extend(reasons.avoided(fab, index, start, holders))
        return _plan_of(snap, gang, choice, g, traffic, notes)
    if aware and unhealthy:
        rescue = _fallback(snap, room, gang, top, traffic)
        if rescue is not None:
            plan = _plan_of(snap, gang, rescue, g, traffic, [])
            why = reasons.fallback(fab, plan.ranks, plan.comm_slowdown)
            return dataclasses.replace(plan, reasons=(why, *plan.reasons))
    return _no_fit(fab, index, start, gang, top, room(Mode.NOT_DOWN), room(Mode.ANY))


def _holders(index: tree.Tree, space: slots.Room, level: int, pods: int) -> list[DomainKey]:
    """Domains of ``level`` whose room reaches ``pods``, in name order (C-level over ~1k keys)."""
    keys = index.by_tier[level]
    return list(itertools.compress(keys, map(pods.__le__, map(space.full.__getitem__, keys))))


def _lowest(index: tree.Tree, space: slots.Room, pods: int, top: int) -> DomainKey | None:
    """The holder a plan would use at the lowest level with room in ``space`` (best fit)."""
    for level in range(top + 1):
        fits = _holders(index, space, level, pods)
        if fits:
            return _tightest(space, fits)
    return None


def _tightest(space: slots.Room, holders: Sequence[DomainKey]) -> DomainKey:
    """Best fit, then name: the least room left (names are unique within a tier)."""
    rooms = map(space.full.__getitem__, holders)
    return min(zip(rooms, map(operator.itemgetter(1), holders), holders, strict=True))[2]


def _best(
    snap: snapshot.Snapshot,
    space: slots.Room,
    gang: request.GangRequest,
    top: int,
    traffic: capacity.Traffic | None,
    aware: bool,
    top_down: bool = True,
) -> _Choice | None:
    """Rule 2 in ``space``: the lowest level with a holder, then shape, slowdown, fit, name;
    ``top_down`` False: the fit is only the room the holder has left (``FitOrder.HOLDING``)."""
    fab, index = snap.fabric, snap.tree
    pods, g, pattern = gang.pods, gang.gpus_per_pod, gang.pattern
    caps = snap.capacities_for(aware)
    for level in range(top + 1):
        holders = _holders(index, space, level, pods)
        if not holders:
            continue
        if index.is_leaf(holders[0]):
            # Inside one leaf nothing is partially spanned and every usable host is alike:
            # only the fit tells holders apart, top down.
            holder = (_tightest_leaf(index, space, holders, pods) if top_down
                      else _tightest(space, holders))
            found = slots.split(index, space, holder, pods, slots.pack, slots.pack, slots.pack)
            return _Choice(level, holder, found) if found is not None else None
        # The shape comes first in the ranking, and packing reaches each holder's fewest
        # children (slots.fewest): a holder that needs more children than another cannot win.
        fewest = [slots.fewest(space, index.children[holder], pods) for holder in holders]
        least = min(fewest)
        best: tuple[tuple[object, ...], DomainKey, slots.Chooser[DomainKey]] | None = None
        for holder in itertools.compress(holders, map(least.__eq__, fewest)):
            for first in _first_splits(snap, holder, traffic, aware):
                shaped = slots.split(index, space, holder, pods, first, slots.pack, None)
                if shaped is None:
                    continue
                slowdown = capacity.slowdown_of_counts(fab, shaped.domains, pods, g, traffic, aware, caps,
                                                       pattern)
                fit: tuple[object, ...] = (
                    (_fit(index, space, holder, pods), _broken(space, holder, shaped.domains)) if top_down
                    else (space.full[holder] - pods,))
                rank = (slots.shape(index, holder, shaped.domains), round(slowdown, 9), *fit, holder[1])
                if best is None or rank < best[0]:
                    best = (rank, holder, first)
        if best is None:
            continue
        _, holder, first = best
        found = slots.split(index, space, holder, pods, first, slots.pack, slots.pack)
        return _Choice(level, holder, found) if found is not None else None
    return None


def _tightest_leaf(index: tree.Tree, space: slots.Room, holders: Sequence[DomainKey], pods: int) -> DomainKey:
    """Best fit top down among leaves that hold the gang: the least by ``_fit``, then
    ``_broken``, then name, found walking down from the tightest domains (``slots.tightest``)."""
    held = set(holders)
    found = slots.tightest(index, space.full, held.__contains__,
                           lambda h: (space.full[h] - pods, _broken(space, h, ()), h[1]))
    assert found is not None  # holders is not empty
    return found


def _fit(index: tree.Tree, space: slots.Room, holder: DomainKey, pods: int) -> tuple[int, ...]:
    """Best fit top down: the room of every domain above the holder, top tier first, then what
    the holder has left; the least wins at the first tier where they differ."""
    return (*slots.ancestors(index, space.full, holder), space.full[holder] - pods)


def _broken(space: slots.Room, holder: DomainKey, below: Collection[DomainKey]) -> int:
    """Whole domains the plan starts to use (the holder and the domains below it): fewer leaves
    more room whole."""
    start = space.start
    return sum(map(start.whole, (holder, *below)))


def _first_splits(
    snap: snapshot.Snapshot, holder: DomainKey, traffic: capacity.Traffic | None, aware: bool
) -> list[slots.Chooser[DomainKey]]:
    """How to split the holder among its children: packed, and, when some child's uplinks
    already carry traffic, quietest uplinks first."""
    fab, caps = snap.fabric, snap.capacities_for(aware)
    choosers: list[slots.Chooser[DomainKey]] = [slots.pack]
    if traffic and any(c in traffic.load for c in snap.tree.children[holder]):
        def quiet_first(
            items: Sequence[tuple[DomainKey, int]], pods: int
        ) -> list[tuple[DomainKey, int]] | None:
            return slots.fill(items, pods, key=lambda it: (
                round(capacity.domain_load(fab, it[0], 0.0, traffic, aware, caps), 9), -it[1], it[0]))
        choosers.append(quiet_first)
    return choosers


def _fallback(
    snap: snapshot.Snapshot,
    room: Callable[[Mode], slots.Room],
    gang: request.GangRequest,
    top: int,
    traffic: capacity.Traffic | None,
) -> _Choice | None:
    """Rule 1's escape: no healthy plan, so the lowest exact comm_slowdown without down elements.

    Rare, so it may try every holder of every level, in three rooms: healthy hosts across
    degraded uplinks, healthy uplinks with degraded hosts, and anything not down; packed, and
    healthiest first. Hosts are always taken healthiest first.
    """
    fab, index, caps = snap.fabric, snap.tree, snap.capacities
    pods, g, pattern = gang.pods, gang.gpus_per_pod, gang.pattern

    def healthiest_domains(
        items: Sequence[tuple[DomainKey, int]], n: int
    ) -> list[tuple[DomainKey, int]] | None:
        return slots.fill(items, n, key=lambda it: (-fab.domains[it[0]].uplink_health, -it[1], it[0]))

    def healthiest_hosts(
        items: Sequence[tuple[ids.NodeName, int]], n: int
    ) -> list[tuple[ids.NodeName, int]] | None:
        return slots.fill(items, n, key=lambda it: (-fab.hosts[it[0]].health, -it[1], it[0]))

    choosers: list[slots.Chooser[DomainKey]] = [slots.pack, healthiest_domains]
    best: tuple[tuple[Any, ...], _Choice] | None = None
    for mode in (Mode.HEALTHY_HOSTS, Mode.HEALTHY_UPLINKS, Mode.NOT_DOWN):
        space = room(mode)
        for level in range(top + 1):
            for holder in index.by_tier[level]:
                if space.full[holder] < pods:
                    continue
                for choose in choosers[:1] if index.is_leaf(holder) else choosers:
                    found = slots.split(index, space, holder, pods, choose, choose, healthiest_hosts)
                    if found is None:
                        continue
                    slowdown = capacity.comm_slowdown(fab, ranks.order(fab, found.hosts), g, traffic, caps,
                                                      pattern)
                    if math.isinf(slowdown):
                        continue
                    rank = (round(slowdown, 9), level, slots.shape(index, holder, found.domains),
                            space.full[holder] - pods, holder[1])
                    if best is None or rank < best[0]:
                        best = (rank, _Choice(level, holder, found))
    return best[1] if best is not None else None


def _plan_of(
    snap: snapshot.Snapshot,
    gang: request.GangRequest,
    choice: _Choice,
    g: int,
    traffic: capacity.Traffic | None,
    notes: Sequence[str],
) -> request.Plan:
    fab = snap.fabric
    why = [reasons.shape(fab, snap.tree, choice.holder, choice.split.domains)]
    preferred = gang.preferred
    if preferred is not None and choice.level > preferred:
        name = reasons.tier_name(fab, preferred)
        why.append(f"preferred tier {name}: no single {name} holds it now")
    plan = _plan(snap, choice.split.hosts, choice.level, g, traffic, [*why, *notes], gang.pattern)
    if plan.degraded_path:
        return plan
    extra = reasons.slowdown_note(fab, plan.ranks, g, traffic, plan.comm_slowdown, snap.capacities,
                                  gang.pattern)
    if not extra:
        return plan
    return dataclasses.replace(plan, reasons=(*plan.reasons, *extra))


def _plan(
    snap: snapshot.Snapshot,
    pods_per_host: Mapping[ids.NodeName, int],
    tier: int | None,
    g: int,
    traffic: capacity.Traffic | None,
    why: Sequence[str],
    pattern: capacity.Pattern,
) -> request.Plan:
    fab = snap.fabric
    order = ranks.order(fab, pods_per_host)
    return request.Plan(
        ranks=order,
        tier=tier,
        domains=ranks.domains_used(fab, order),
        comm_slowdown=capacity.comm_slowdown(fab, order, g, traffic, snap.capacities, pattern),
        degraded_path=capacity.on_degraded_path(fab, order),
        reasons=tuple(why),
    )


def _no_fit(
    fab: fabric.Fabric,
    index: tree.Tree,
    start: slots.Base,
    gang: request.GangRequest,
    top: int,
    usable: slots.Room | None,
    raw: slots.Room | None,
) -> request.NoFit:
    """Why not, and whether it ever could: judged on the empty fabric, whatever its health."""
    pods, g = gang.pods, gang.gpus_per_pod
    what = reasons.gang(pods, g)
    largest = max((h.gpus for h in fab.hosts.values()), default=0)
    if largest < g:
        return request.NoFit(f"no host has {g} GPUs (largest: {largest})", unresolvable=True)
    if usable is None:
        return request.NoFit(f"no candidate host has {g} free GPUs for {what}")
    down_note = ""
    if raw is not None and _lowest(index, raw, pods, top) is not None:
        down_note = " (it would fit only on down elements)"
    if top < index.levels:
        name = reasons.tier_name(fab, top)
        biggest, held = fab.largest_domain(top, g)
        if biggest is None or held < pods:
            holds = f"largest, {biggest[1]}, holds {held} when empty" if biggest else f"no {name}"
            return request.NoFit(f"required tier {name}: no {name} could ever hold {what} ({holds})",
                                 unresolvable=True, required_tier=True)
        most = max(sorted(index.by_tier[top]), key=lambda k: usable.full[k])
        return request.NoFit(f"required tier {name}: no {name} has room for {what} now "
                             f"(most: {most[1]} with room for {usable.full[most]}){down_note}",
                             required_tier=True)
    empty_total = fab.empty_slots(g)
    if empty_total < pods:
        return request.NoFit(f"the fabric could never hold {what} (room for {empty_total} when empty)",
                             unresolvable=True)
    return request.NoFit(f"room for {usable.full[index.root]} of {what} on "
                         f"{sum(1 for n in start.room if n)} candidate hosts{down_note}")

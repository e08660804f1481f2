"""Asking the one engine (``placement.placing.place``) for a gang's plan, or for new nodes for
some of its ranks, on a topology snapshot minus other gangs' reservations.

No rule is decided here: the engine applies rules 1-4; this module only builds its inputs
(free GPUs, candidates, traffic of the gangs already placed) and turns its answer into a
book entry. No I/O.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from fabricsched import gangs, ids
from fabricsched.extender.book import reservations
from fabricsched.placement import capacity, ranks, request, session
from fabricsched.ports import views
from fabricsched.topology import fabric, gpus

DomainKey = fabric.DomainKey


@dataclass(frozen=True)
class Inputs:
    """What one decision sees: a snapshot and the capacity other gangs hold on it."""

    session: session.Session
    """The extender's placement session (snapshots, floors, running gangs' demands)."""
    snapshot: views.SnapshotView
    reserved: Mapping[ids.NodeName, int]
    """GPUs held for other gangs' unbound ranks (and this gang's ranks that keep their node)."""
    traffic: capacity.Traffic
    """Off-domain load of every other gang placed in this topology (``traffic``)."""

    @property
    def fabric(self) -> fabric.Fabric:
        return self.snapshot.fabric

    def free(self) -> dict[ids.NodeName, int]:
        """Free GPUs per host once reservations are taken out."""
        return gpus.free_after(self.snapshot.free_gpus, self.reserved)

    def place(
        self, gang: request.GangRequest, options: request.PlacementOptions,
        candidates: Collection[ids.NodeName], free: Mapping[ids.NodeName, int] | None = None,
        before: request.Previous | None = None,
    ) -> request.Plan | request.NoFit:
        return self.session.place(self.fabric, self.free() if free is None else free, gang, self.traffic,
                                  options, candidates, owner=self.snapshot.name, before=before)


def inputs(
    placing_session: session.Session, book: reservations.Book, snapshot: views.SnapshotView,
    exclude: ids.GangKey, keep: Sequence[ids.NodeName] = (), gpus_per_pod: int = 0,
) -> Inputs:
    """What planning gang ``exclude`` sees: every other gang's reservation and traffic (and
    ``gpus_per_pod`` GPUs on each node of ``keep``: its own ranks that keep their node)."""
    reserved = book.reserved_gpus(exclude=exclude)
    for node in keep:
        reserved[node] = reserved.get(node, 0) + gpus_per_pod
    others = [e for e in book.entries() if e.key != exclude and e.topology == snapshot.name]
    return Inputs(placing_session, snapshot, reserved, traffic(placing_session, snapshot.fabric, others))


def traffic(placing_session: session.Session, fab: fabric.Fabric,
            entries: Sequence[reservations.Entry]) -> capacity.Traffic:
    """The running traffic model: every placed gang's footprint, bound or reserved.

    Each gang's demand is kept by the session while its book entry and the fabric are the same
    objects (entries are frozen and replaced on every change), and so is the last sum: a
    planning call adds the demands of the gangs planned since the last one, instead of
    recounting every running gang's pods per domain and adding every gang's dict."""
    running = placing_session.running

    def demand(entry: reservations.Entry) -> Mapping[DomainKey, float]:
        nodes = lambda: [n for _, n in entry.placed() if n in fab.hosts]  # noqa: E731 - read on a miss
        return running.demand_of(entry.key, entry, fab, nodes, entry.gpus_per_pod, entry.pattern)

    total = running.summed(fab, entries, demand)
    running.prune_demands(len(entries), lambda: {entry.key for entry in entries})
    return total


def resolved(gang: gangs.GangIdentity, fab: fabric.Fabric) -> gangs.GangIdentity | request.NoFit:
    """The gang with its native topology key (a PodGroup's) as the required tier whose
    ``nodeLabel`` it is; a key that names no tier of the fabric is refused, naming the tiers."""
    if gang.topology_key is None or gang.tier is not None:
        return gang
    tier = next((t.name for t in fab.tiers if t.node_label == gang.topology_key), None)
    if tier is None:
        # Short: the scheduler shows a reason of at most 160 bytes (verdicts.MAX_REASON_BYTES).
        tiers = ", ".join(t.name for t in fab.tiers) or "none"
        return request.NoFit(f"topology key {gang.topology_key!r} is no tier's nodeLabel (tiers: {tiers})",
                             unresolvable=True)
    return dataclasses.replace(gang, tier=tier, required=True)


def gang_request(gang: gangs.GangIdentity, fab: fabric.Fabric) -> request.GangRequest | request.NoFit:
    """The engine's request for a whole gang."""
    found = resolved(gang, fab)
    if isinstance(found, request.NoFit):
        return found
    return request.gang_on(fab, found.key, found.size, found.gpus_per_pod, found.tier, found.required,
                           preferred=found.preferred_tier, slices=found.slices, pattern=found.traffic)


def plan(
    inputs: Inputs,
    gang: gangs.GangIdentity,
    candidates: Collection[ids.NodeName],
    options: request.PlacementOptions,
    before: request.Previous | None = None,
) -> request.Plan | request.NoFit:
    """A whole-gang plan among ``candidates``; ``before``: where the gang ran until its whole
    group was restarted (it goes back there when that is as good: ``placement.previous``)."""
    ask = gang_request(gang, inputs.fabric)
    if isinstance(ask, request.NoFit):
        return ask
    return inputs.place(ask, options, candidates, before=before)


def new_entry(
    gang: gangs.GangIdentity, topology: ids.TopologyName, fab: fabric.Fabric, made: request.Plan,
    gpu_resource: str,
) -> reservations.Entry:
    """The book entry of a fresh plan (its expiry is set by ``Book.reserve``)."""
    found = resolved(gang, fab)
    return dataclasses.replace(
        reservations.Entry.of_gang(gang if isinstance(found, request.NoFit) else found, topology,
                                   tuple(made.ranks), gpu_resource),
        domains=_named(fab, made.domains),
        slice_domains=made.slice_domains,
        traffic=gang.traffic or fab.traffic,
        comm_slowdown=made.comm_slowdown,
        degraded_path=made.degraded_path,
        reasons=tuple(made.reasons),
    )


def replan(
    inputs: Inputs,
    entry: reservations.Entry,
    moving: Sequence[int],
    candidates: Collection[ids.NodeName],
    options: request.PlacementOptions,
) -> reservations.Entry | request.NoFit:
    """New nodes for the ranks in ``moving``; the gang's other ranks stay where they are.

    ``inputs.reserved`` must already hold the staying ranks. The moving ranks belong to a gang
    that spans hosts, so they follow the gang rule, not the single-pod one: never a down
    element, the lowest comm_slowdown of the whole gang, and the gang's own domains first
    (``_areas``: the smallest domain holding the staying ranks, then each one above it,
    then, unless a required tier forbids it, every candidate). Within an area the engine is
    asked on healthy hosts, then on any host not down; the finite whole-gang slowdown wins.
    """
    fab = inputs.fabric
    staying = [node for rank, node in entry.placed() if rank not in moving and node in fab.hosts]
    # Slices are not planned again: the staying ranks hold their slices' domains already.
    part = request.gang_on(fab, entry.key, len(moving), entry.gpus_per_pod, entry.tier, entry.required,
                           preferred=entry.preferred_tier, pattern=entry.pattern)
    if isinstance(part, request.NoFit):
        return part
    free = inputs.free()
    usable = [n for n in candidates if n in fab.hosts and not fab.hosts[n].down]
    result: request.Plan | request.NoFit = request.NoFit("no candidate node for the gang's ranks")
    for area in _areas(fab, staying, part, set(usable)):
        result = _best_in(inputs, entry, moving, part, area, free, options)
        if isinstance(result, request.Plan):
            break
    if isinstance(result, request.NoFit):
        return result
    nodes = _moved(entry, moving, result.ranks)
    whole = _footprint(fab, entry, nodes)
    slowdown = capacity.comm_slowdown(fab, whole, entry.gpus_per_pod, inputs.traffic, pattern=entry.pattern)
    moved = ", ".join(str(r) for r in sorted(moving))
    return replace(
        entry,
        ranks=tuple(nodes),
        domains=_named(fab, ranks.domains_used(fab, whole)),
        comm_slowdown=slowdown,
        degraded_path=capacity.on_degraded_path(fab, whole),
        reasons=(*entry.reasons, f"ranks {moved} planned again: {'; '.join(result.reasons) or 'moved'}"),
    )


def around(
    inputs: Inputs,
    gang: gangs.GangIdentity,
    topology: ids.TopologyName,
    bound: Mapping[int, ids.NodeName],
    candidates: Collection[ids.NodeName],
    options: request.PlacementOptions,
) -> reservations.Entry | request.NoFit:
    """A plan for a gang some of whose pods are bound already (``bound``: rank -> node) while
    no plan holds them: the other ranks move by the ``replan`` rule, near the bound ones. The
    bound pods are usage in the snapshot already, so ``inputs`` reserve nothing for them."""
    placed = tuple(bound.get(r) for r in range(gang.size))
    start = replace(reservations.Entry.of_gang(gang, topology, placed, inputs.snapshot.spec.gpu_resource),
                    bound=dict(bound), traffic=gang.traffic or inputs.fabric.traffic)
    made = replan(inputs, start, [r for r in range(gang.size) if r not in bound], candidates, options)
    if isinstance(made, request.NoFit):
        return made
    ranks_bound = ", ".join(str(r) for r in sorted(bound))
    return replace(made, reasons=(f"planned around ranks {ranks_bound}, bound without a plan", *made.reasons))


def _areas(
    fab: fabric.Fabric, staying: Sequence[ids.NodeName], part: request.GangRequest, usable: set[ids.NodeName]
) -> list[set[ids.NodeName]]:
    """Where to look for the moving ranks, nearest the staying ones first."""
    if not staying:
        return [usable]
    home = fab.home_of(staying)
    lowest = home[0] if home is not None else len(fab.tiers)
    top = part.tier if part.required and part.tier is not None else len(fab.tiers) - 1
    areas = [set(fab.domain_of(staying[0], tier).hosts) & usable for tier in range(lowest, top + 1)]
    if not part.required:
        areas.append(usable)
    return [area for i, area in enumerate(areas) if area and area not in areas[:i]]


def _moved(entry: reservations.Entry, moving: Sequence[int],
           nodes: Sequence[ids.NodeName]) -> list[ids.NodeName | None]:
    """The gang's planned node per rank with ``moving`` (in rank order) given ``nodes``."""
    placed = list(entry.ranks)
    for rank, node in zip(sorted(moving), nodes, strict=True):
        placed[rank] = node
    return placed


def _footprint(fab: fabric.Fabric, entry: reservations.Entry,
               nodes: Sequence[ids.NodeName | None]) -> list[ids.NodeName]:
    """The node of every placed rank in rank order (a bound pod's own node): what a ring's
    demand follows."""
    placed = (entry.bound.get(r, n) for r, n in enumerate(nodes))
    return [n for n in placed if n is not None and n in fab.hosts]


def _best_in(
    inputs: Inputs, entry: reservations.Entry, moving: Sequence[int], part: request.GangRequest,
    area: set[ids.NodeName], free: Mapping[ids.NodeName, int], options: request.PlacementOptions,
) -> request.Plan | request.NoFit:
    """The engine's plan for the moving ranks in ``area`` with the lowest finite slowdown of the
    whole gang: healthy hosts first, then any host not down (a tie keeps the healthy one)."""
    fab = inputs.fabric
    healthy = {n for n in area if not fab.hosts[n].degraded}
    best: tuple[float, request.Plan] | None = None
    why = request.NoFit("the gang's path would cross a down element (its staying ranks' hosts or uplinks)")
    for hosts in (healthy, area):
        if not hosts or (hosts is area and area == healthy):
            continue
        made = inputs.place(part, options, hosts, free)
        if not isinstance(made, request.Plan):
            why = made
            continue
        whole = _footprint(fab, entry, _moved(entry, moving, made.ranks))
        slowdown = capacity.comm_slowdown(fab, whole, entry.gpus_per_pod, inputs.traffic,
                                          pattern=entry.pattern)
        if math.isfinite(slowdown) and (best is None or slowdown < best[0] - 1e-9):
            best = (slowdown, made)
    return best[1] if best is not None else why


def _named(
    fab: fabric.Fabric, domains: Mapping[int, Sequence[ids.DomainName]]
) -> dict[str, tuple[ids.DomainName, ...]]:
    return {fab.tiers[t].name: tuple(names) for t, names in sorted(domains.items()) if names}


def with_costs(
    entry: reservations.Entry,
    domains: Mapping[str, tuple[ids.DomainName, ...]],
    slowdown: float,
    degraded: bool,
) -> reservations.Entry:
    """``entry`` with the domains and costs of a new plan for it."""
    return dataclasses.replace(entry, domains=dict(domains), comm_slowdown=slowdown, degraded_path=degraded)


WARM_KEY = ids.GangKey("fabricsched/warm-up")
"""The key of the plans ``warm`` makes and drops (no pod has it: it holds a ``/``)."""


def warm(
    sess: session.Session,
    state: views.StateView,
    entries: Sequence[reservations.Entry],
    inputs_of: Callable[[views.SnapshotView], Inputs],
    options: request.PlacementOptions,
) -> None:
    """Build each fabric's snapshot, engine view and running traffic now (before ready), and
    plan a one-pod gang per GPU count in use, to be dropped: the engine keeps the free-GPU view
    each plan builds, so the first request after ready patches it as the hundredth does (at
    10,000 nodes the first built it whole: 105 ms against 28 ms)."""
    wanted = sorted({1, *(e.gpus_per_pod for e in entries)})
    for name in list(state.topologies):
        snap = state.snapshot(name)
        if snap is None:
            continue
        sess.snapshot(snap.fabric)
        # The inputs carry each restored gang's demand on the fabric (``traffic``): computed
        # once here, not by the first plan after ready.
        inputs = inputs_of(snap)
        hosts = list(snap.fabric.hosts)
        for gpus_per_pod in wanted:
            probe = gangs.GangIdentity(
                WARM_KEY, "fabricsched", "warm-up", None, "", 1, 0, None, False, gpus_per_pod
            )
            plan(inputs, probe, hosts, options)

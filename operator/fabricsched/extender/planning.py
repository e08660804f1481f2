"""Asking the one engine (``placement.placing.place``) for a gang's plan, or for new nodes for
some of its ranks, on a topology snapshot minus other gangs' reservations.

No rule is decided here: the engine applies rules 1-4; this module only builds its inputs
(free GPUs, candidates, traffic of the gangs already placed) and turns its answer into a
book entry. No I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from fabricsched import ids
from fabricsched.extender import gangs, ports, reservations
from fabricsched.placement import capacity, placing, ranks, request
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey


@dataclass(frozen=True)
class Inputs:
    """What one decision sees: a snapshot and the capacity other gangs hold on it."""

    snapshot: ports.SnapshotView
    reserved: Mapping[ids.NodeName, int]
    """GPUs held for other gangs' unbound ranks (and this gang's ranks that keep their node)."""
    traffic: capacity.Traffic
    """Off-domain load of every other gang placed in this topology."""

    @property
    def fabric(self) -> fabric.Fabric:
        return self.snapshot.fabric

    def free(self) -> dict[ids.NodeName, int]:
        """Free GPUs per host once reservations are taken out."""
        free = dict(self.snapshot.free_gpus)
        for node, held in self.reserved.items():
            if node in free:
                free[node] = max(0, free[node] - held)
        return free


def traffic_of(fab: fabric.Fabric, entries: Iterable[reservations.Entry]) -> capacity.Traffic:
    """The running traffic model: every placed gang's footprint, bound or reserved."""
    traffic = capacity.Traffic()
    for entry in entries:
        nodes = [node for _, node in entry.placed() if node in fab.hosts]
        if len(nodes) > 1:
            traffic.add(fab, nodes, entry.gpus_per_pod)
    return traffic


class Demands:
    """``traffic_of`` for repeated decisions: each placed gang's ``capacity.gang_demand`` is
    kept while its book entry and the fabric are the same objects (entries are frozen and
    replaced on every change), so a planning call adds dicts instead of recounting every
    running gang's pods per domain. Sums are made in the same order, so the loads are the
    very same floats ``traffic_of`` gives."""

    def __init__(self) -> None:
        self._kept: dict[ids.GangKey, tuple[reservations.Entry, fabric.Fabric, dict[DomainKey, float]]] = {}

    def traffic(self, fab: fabric.Fabric, entries: Sequence[reservations.Entry]) -> capacity.Traffic:
        traffic = capacity.Traffic()
        for entry in entries:
            kept = self._kept.get(entry.key)
            if kept is not None and kept[0] is entry and kept[1] is fab:
                demand = kept[2]
            else:
                nodes = [node for _, node in entry.placed() if node in fab.hosts]
                demand = capacity.gang_demand(fab, nodes, entry.gpus_per_pod) if len(nodes) > 1 else {}
                self._kept[entry.key] = (entry, fab, demand)
            traffic.add_demand(demand)
        if len(self._kept) > 2 * len(entries) + 16:
            # Released gangs linger until here: dropped now and then, in one pass.
            live = {entry.key for entry in entries}
            self._kept = {k: v for k, v in self._kept.items() if k in live}
        return traffic


def tier_index(fab: fabric.Fabric, gang: gangs.GangIdentity) -> int | request.NoFit | None:
    """The constraint tier's index; a name the fabric does not have can never be met."""
    if gang.tier is None:
        return None
    try:
        return fab.tier_index(gang.tier)
    except KeyError:
        tiers = ", ".join(t.name for t in fab.tiers)
        return request.NoFit(f"tier {gang.tier!r} is not a tier of this fabric ({tiers})", unresolvable=True)


def plan(
    inputs: Inputs,
    gang: gangs.GangIdentity,
    candidates: Collection[ids.NodeName],
    options: request.PlacementOptions,
) -> request.Plan | request.NoFit:
    """A whole-gang plan among ``candidates``."""
    tier = tier_index(inputs.fabric, gang)
    if isinstance(tier, request.NoFit):
        return tier
    gang_request = request.GangRequest(gang.key, gang.size, gang.gpus_per_pod, tier, gang.required)
    return placing.place(
        inputs.fabric, inputs.free(), gang_request, inputs.traffic, options, candidates=candidates
    )


def new_entry(
    gang: gangs.GangIdentity, topology: ids.TopologyName, fab: fabric.Fabric, made: request.Plan
) -> reservations.Entry:
    """The book entry of a fresh plan (its expiry is set by ``Book.reserve``)."""
    return reservations.Entry(
        key=gang.key,
        namespace=gang.namespace,
        name=gang.name,
        job_uid=gang.job_uid,
        job_name=gang.job_name,
        size=gang.size,
        gpus_per_pod=gang.gpus_per_pod,
        topology=topology,
        tier=gang.tier,
        required=gang.required,
        ranks=tuple(made.ranks),
        domains=_named(fab, made.domains),
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

    ``inputs.reserved`` must already hold the staying ranks. The engine is asked for a plan of
    just the moving ranks, first among the candidates inside the smallest domain that holds
    the staying ones (so the gang stays together), then, unless a required tier forbids it,
    among all candidates.
    """
    fab = inputs.fabric
    staying = [node for rank, node in entry.placed() if rank not in moving and node in fab.hosts]
    tier: int | None = None
    if entry.tier is not None:
        try:
            tier = fab.tier_index(entry.tier)
        except KeyError:
            return request.NoFit(f"tier {entry.tier!r} is not a tier of this fabric", unresolvable=True)
    part = request.GangRequest(entry.key, len(moving), entry.gpus_per_pod, tier, entry.required)
    free = inputs.free()
    attempts: list[Collection[ids.NodeName]] = []
    if staying:
        home = _home(fab, staying)
        if home is not None:
            attempts.append(set(fab.domains[home].hosts) & set(candidates))
        if entry.required and tier is not None:
            outer = fab.domain_of(staying[0], tier)
            attempts.append(set(outer.hosts) & set(candidates))
    if not (entry.required and staying):
        attempts.append(candidates)
    result: request.Plan | request.NoFit = request.NoFit("no candidate node for the gang's ranks")
    for allowed in attempts:
        result = placing.place(fab, free, part, inputs.traffic, options, candidates=allowed)
        if isinstance(result, request.Plan):
            break
    if isinstance(result, request.NoFit):
        return result
    nodes = list(entry.ranks)
    for rank, node in zip(sorted(moving), result.ranks, strict=True):
        nodes[rank] = node
    placed = [entry.bound.get(r, n) for r, n in enumerate(nodes)]
    whole = [n for n in placed if n is not None and n in fab.hosts]
    slowdown = capacity.comm_slowdown(fab, whole, entry.gpus_per_pod, inputs.traffic)
    moved = ", ".join(str(r) for r in sorted(moving))
    return replace(
        entry,
        ranks=tuple(nodes),
        domains=_named(fab, ranks.domains_used(fab, whole)),
        comm_slowdown=slowdown,
        degraded_path=capacity.on_degraded_path(fab, whole),
        reasons=(*entry.reasons, f"ranks {moved} planned again: {'; '.join(result.reasons) or 'moved'}"),
    )


def _home(fab: fabric.Fabric, hosts: Sequence[ids.NodeName]) -> fabric.DomainKey | None:
    """The lowest domain holding every host in ``hosts`` (None: they span the top tier)."""
    for tier in range(len(fab.tiers)):
        names = {fab.hosts[h].path[tier] for h in hosts}
        if len(names) == 1:
            return (tier, next(iter(names)))
    return None


def _named(
    fab: fabric.Fabric, domains: Mapping[int, Sequence[ids.DomainName]]
) -> dict[str, tuple[ids.DomainName, ...]]:
    return {fab.tiers[t].name: tuple(names) for t, names in sorted(domains.items()) if names}

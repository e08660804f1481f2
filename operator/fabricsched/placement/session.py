"""One placement session: what a caller of the engine keeps from one decision to the next.

The extender, the simulator and the benchmarks each hold one ``Session`` and ask it, not the
engine's modules, for every decision, so all three run the same code with the same state:

* the snapshot of each fabric they decide on (``snapshot.Cache``: rebuilt when the fabric
  object changes, its tree kept across health changes);
* the running traffic: the off-domain demand of every gang placed, by gang key; a gang is
  added when it starts (or is reserved) and removed when it ends;
* the locality floors (``patience.Floors``), the gangs' wait clocks (``patience.Clocks``),
  and the decision to hold a gang for locality.

Pure: no clock (waits are passed in), no I/O.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TypeVar

from fabricsched import ids
from fabricsched.placement import capacity, patience, placing, previous, request, snapshot
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey

_DEFAULT_OPTIONS = request.PlacementOptions()

Version = TypeVar("Version")


class Running:
    """The traffic of the gangs running now, kept by gang key.

    ``start`` and ``end`` update ``traffic`` in place, in the order they come (the simulator's
    incremental model); ``demand_of`` keeps each gang's demand and ``summed`` the last sum, so
    a caller that rebuilds the traffic from a list of gangs (the extender, from its book) does
    not recount their pods, nor add again the demands it added on its last call.
    """

    def __init__(self) -> None:
        self.traffic = capacity.Traffic()
        self._gangs: dict[ids.GangKey, tuple[Sequence[ids.NodeName], int, capacity.Pattern]] = {}
        self._demands: dict[ids.GangKey, tuple[object, fabric.Fabric, dict[DomainKey, float]]] = {}
        self._sum: tuple[fabric.Fabric, list[object], dict[DomainKey, float]] | None = None
        """The last ``summed``: its fabric, its gangs' records in order, and their sum."""

    def start(self, key: ids.GangKey, fab: fabric.Fabric, ranks: Sequence[ids.NodeName],
              gpus_per_pod: int, pattern: capacity.Pattern = capacity.ALL_TO_ALL) -> None:
        self._gangs[key] = (ranks, gpus_per_pod, pattern)
        self.traffic.add(fab, ranks, gpus_per_pod, pattern)

    def end(self, key: ids.GangKey, fab: fabric.Fabric) -> None:
        """Remove gang ``key``'s demand, priced on ``fab`` (the fabric of now)."""
        ranks, gpus_per_pod, pattern = self._gangs.pop(key)
        self.traffic.remove(fab, ranks, gpus_per_pod, pattern)

    def demand_of(self, key: ids.GangKey, version: object, fab: fabric.Fabric,
                  nodes: Callable[[], Sequence[ids.NodeName]], gpus_per_pod: int,
                  pattern: capacity.Pattern = capacity.ALL_TO_ALL) -> dict[DomainKey, float]:
        """``capacity.gang_demand`` of a placed gang on ``nodes()`` (read only when not kept),
        kept while ``version`` (an immutable record of its placement) and ``fab`` are the same
        objects."""
        kept = self._demands.get(key)
        if kept is not None and kept[0] is version and kept[1] is fab:
            return kept[2]
        placed = nodes()
        demand = capacity.gang_demand(fab, placed, gpus_per_pod, pattern) if len(placed) > 1 else {}
        self._demands[key] = (version, fab, demand)
        return demand

    def summed(self, fab: fabric.Fabric, versions: Sequence[Version],
               demand: Callable[[Version], Mapping[DomainKey, float]]) -> capacity.Traffic:
        """The traffic of the placed gangs whose records (immutable, one per gang) are
        ``versions``: ``demand`` of each added in this order.

        When the last call's records on the same ``fab`` are the first of these, its sum is
        carried on instead of added up again: the same additions in the same order, so the same
        floats, and a call that comes with one gang more adds one demand."""
        start, load = 0, {}
        kept = self._sum
        if kept is not None and kept[0] is fab and len(kept[1]) <= len(versions) and all(
            map(operator.is_, kept[1], versions)
        ):
            start, load = len(kept[1]), dict(kept[2])
        total = capacity.Traffic(load)
        for version in versions[start:]:
            total.add_demand(demand(version))
        self._sum = (fab, list(versions), dict(total.load))
        return total

    def prune_demands(self, count: int, live: Callable[[], Collection[ids.GangKey]]) -> None:
        """Forget the kept demands of gangs not in ``live()`` (released gangs), once more than
        twice the ``count`` of live gangs are kept."""
        if len(self._demands) > 2 * count + 16:
            alive = live()
            self._demands = {k: v for k, v in self._demands.items() if k in alive}


class Session:
    """Snapshots, running traffic and locality floors of one caller of the engine."""

    def __init__(self) -> None:
        self.snapshots = snapshot.Cache()
        self.running = Running()
        self.floors = patience.Floors()
        self.clocks = patience.Clocks()
        """How long each gang not yet started has waited (for the locality wait)."""

    def snapshot(self, fab: fabric.Fabric, owner: object = None) -> snapshot.Snapshot:
        return self.snapshots.of(fab, owner)

    def place(
        self,
        fab: fabric.Fabric,
        free: Mapping[ids.NodeName, int],
        gang: request.GangRequest,
        traffic: capacity.Traffic | None = None,
        options: request.PlacementOptions = _DEFAULT_OPTIONS,
        candidates: Collection[ids.NodeName] | None = None,
        owner: object = None,
        before: request.Previous | None = None,
    ) -> request.Plan | request.NoFit:
        """``placing.place`` on this session's snapshot of ``fab``; ``traffic`` defaults to the
        session's running traffic. ``before``: where the gang ran until its whole group was
        restarted; it goes back there when that is as good (``previous.back``: one more call)."""
        running = self.running.traffic if traffic is None else traffic
        snap = self.snapshot(fab, owner)
        fresh = placing.place(snap, free, gang, running, options, candidates)
        if before is None or not isinstance(fresh, request.Plan):
            return fresh
        return previous.back(snap, free, gang, running, options, candidates, before, fresh)

    def hold_for(
        self, fab: fabric.Fabric, gang: request.GangRequest, plan: request.Plan, held: patience.Held,
        wait: request.LocalityWait, free: Mapping[ids.NodeName, int] | None = None,
        eligible: frozenset[ids.NodeName] | None = None,
    ) -> patience.Decision:
        """Start ``plan`` now or hold the gang for locality (``patience.hold_for``)."""
        return patience.hold_for(self.floors, fab, gang, plan, held, wait, free, eligible)

    def floor(self, fab: fabric.Fabric, pods: int, gpus_per_pod: int,
              pattern: capacity.Pattern = capacity.ALL_TO_ALL) -> float:
        """The gang's slowdown alone in the empty healthy ``fab``."""
        return self.floors.slowdown(fab, pods, gpus_per_pod, pattern)

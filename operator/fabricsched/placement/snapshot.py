"""The engine's input snapshot: one fabric, its static tree, and what every decision on it reuses.

The snapshot pattern (Kueue's TAS flavor snapshot keeps its topology tree apart from the usage
of one scheduling cycle): the caller builds a ``Snapshot`` when the fabric changes and hands
it to ``placing.place`` for every decision until the next change. It holds

* the ``tree.Tree``, static per fabric structure: ``build`` reuses the previous snapshot's
  tree when only health changed (``fabric.Fabric.structure_id``);
* what depends on the fabric's health, derived once: uplink capacities, the elements every
  ``modes.Mode`` leaves out;
* ``carry``: per-decision state left for the next decision on the same snapshot (the slots of
  the last few gang shapes, ``state``), mutable, and gone with the snapshot.

Free GPUs, candidates and running traffic are per decision and never stored here.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fabricsched.placement import capacity, modes, slots, tree
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey


@dataclass(frozen=True)
class Kept:
    """The slots of the last decision for one gang shape, and the candidates they were for."""

    base: slots.Base
    mask: list[bool] | None
    """Candidate or not per host in tree order; None when every host is one."""
    seen: Any
    """A copy of the candidates the mask was made from (compared, never trusted by identity)."""


@dataclass
class Carry:
    """Mutable per-snapshot state decisions pass on (``state``); never changes a result."""

    bases: dict[int, Kept] = field(default_factory=dict)
    """GPUs per pod -> what the last decision for it kept, least recently used first."""


@dataclass(frozen=True, eq=False)
class Snapshot:
    fabric: fabric.Fabric
    tree: tree.Tree
    carry: Carry = field(default_factory=Carry, repr=False)

    @functools.cached_property
    def capacities(self) -> Mapping[DomainKey, float]:
        """Uplink capacity C_d of every domain, health included (asked thousands of times)."""
        fab = self.fabric
        return {key: fab.uplink_capacity_gbps(key) for key in fab.domains}

    @functools.cached_property
    def blind_capacities(self) -> Mapping[DomainKey, float]:
        """C_d as the health-blind policy sees it: degraded counts whole, down carries nothing."""
        fab = self.fabric
        return {key: capacity.uplink_capacity_gbps(fab, key, health_aware=False) for key in fab.domains}

    def capacities_for(self, health_aware: bool) -> capacity.Capacities:
        return self.capacities if health_aware else self.blind_capacities

    @functools.cached_property
    def _left_out(self) -> dict[modes.Mode, modes.LeftOut]:
        return {mode: modes.left_out(self.fabric, mode) for mode in modes.Mode}

    def left_out(self, mode: modes.Mode) -> modes.LeftOut:
        return self._left_out[mode]

    @functools.cached_property
    def free_reader(self) -> operator.itemgetter[Any] | None:
        """Reads free GPUs of every host in tree order in one C call (None below two hosts)."""
        order = self.tree.order
        return operator.itemgetter(*order) if len(order) > 1 else None


def build(fab: fabric.Fabric, previous: Snapshot | None = None) -> Snapshot:
    """The snapshot of ``fab``; ``previous`` lends its tree when ``fab`` has its structure."""
    if previous is not None and previous.fabric.structure_id is fab.structure_id:
        return Snapshot(fab, previous.tree)
    return Snapshot(fab, tree.build(fab))


class Cache:
    """The current snapshot of one caller's fabric: rebuilt when a new fabric object comes.

    Each caller (one per extender, per simulation, per benchmark) keeps its own; nothing is
    global. ``of`` costs an identity check while the fabric is the same.
    """

    def __init__(self) -> None:
        self._current: dict[object, Snapshot] = {}

    def of(self, fab: fabric.Fabric, owner: object = None) -> Snapshot:
        """The snapshot of ``fab``; ``owner`` tells apart fabrics kept side by side (topologies)."""
        current = self._current.get(owner)
        if current is None or current.fabric is not fab:
            current = build(fab, current)
            self._current[owner] = current
        return current

    def forget(self, owner: object) -> None:
        self._current.pop(owner, None)


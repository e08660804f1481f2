"""Live path health of running gangs: which gangs an element touches, and what it does to them.

Where it sits in the flow: the cluster state's ``HealthChanged`` (after hysteresis) ->
``PathHealth.on_health`` -> the gangs whose path crosses the element (``placement.path``'s
index, element -> gangs: only those are looked at) are put back in the book, whose ``annotate``
hook (``PathHealth.annotate``) recomputes their ``unhealthy`` list, ``degraded_path`` and
``comm_slowdown`` -> the changed entries go to the batched FabricPlacement writer, and one
``PathDegraded`` / ``PathRecovered`` Event per element change goes to the FabricPlacement and
to its Job. Nothing here runs on a filter call except ``annotate`` of a new plan (a count per
domain of its hosts).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from fabricsched import ids
from fabricsched.api import placement as api
from fabricsched.api import rfc3339
from fabricsched.api import topology as topology_api
from fabricsched.extender.book import objects, reservations, sink, workloads
from fabricsched.placement import capacity, path
from fabricsched.ports import notices, views
from fabricsched.topology import fabric, health

logger = logging.getLogger(__name__)

MAX_AFFECTED = 50
"""Gangs named per element in FabricTopology ``status.degraded[].affectedGangs``."""

_Record = tuple[path.ElementKey, int | None]


@dataclasses.dataclass(frozen=True)
class _Unhealthy:
    element: health.ElementId
    state: fabric.HealthState
    capacity: float
    sources: tuple[health.Observation, ...]
    reason: str
    since: float


class PathHealth:
    """The element -> gangs index and every topology's unhealthy elements, from health changes."""

    def __init__(
        self,
        state: views.StateView,
        events: sink.EventSink,
        clock: Callable[[], float],
        workload_of: Callable[[reservations.Entry], notices.ObjectRef | None] = workloads.of_entry,
    ) -> None:
        self.state = state
        self.events = events
        self.clock = clock
        self.workload_of = workload_of
        """The gang's workload object (JobSet, PyTorchJob, ...): its Events' second target."""
        self.index = path.PathIndex()
        self._unhealthy: dict[ids.TopologyName, dict[_Record, _Unhealthy]] = {}

    # --- the book's hook ----------------------------------------------------------------

    def annotate(self, entry: reservations.Entry) -> reservations.Entry:
        """``entry`` with its path indexed and its path health as of the known element states."""
        if not entry.active:
            self.index.drop(entry.key)
            return entry
        snapshot = self.state.snapshot(entry.topology)
        if snapshot is None:
            return entry
        fab = snapshot.fabric
        ranks = [node for _, node in entry.placed() if node in fab.hosts]
        on_path = path.elements(fab, ranks)
        self.index.put(entry.key, entry.topology, on_path)
        found = sorted(
            (u for (key, _), u in self._unhealthy.get(entry.topology, {}).items() if key in on_path),
            key=lambda u: (-fabric.severity(u.state), u.capacity, str(u.element)),
        )
        at_placement = entry.comm_slowdown_at_placement or entry.comm_slowdown
        degraded = bool(found) or capacity.on_degraded_path(fab, ranks)
        slowdown = at_placement
        if degraded and ranks:
            slowdown = max(at_placement, capacity.comm_slowdown(fab, ranks, entry.gpus_per_pod,
                                                                 pattern=entry.pattern))
        return dataclasses.replace(
            entry,
            comm_slowdown=slowdown,
            comm_slowdown_at_placement=at_placement,
            degraded_path=degraded,
            unhealthy=tuple(_wire(u) for u in found[: api.MAX_UNHEALTHY]),
            unhealthy_count=len(found),
        )

    # --- health changes -----------------------------------------------------------------

    def on_health(
        self, topology: ids.TopologyName, change: health.HealthChange, book: reservations.Book,
        writer: sink.PlanSink,
    ) -> None:
        """One element's effective health changed: re-evaluate the gangs whose path crosses it
        (put back in ``book``, whose ``annotate`` is this tracker's; written when it moved)."""
        self._remember(topology, change)
        gangs = self.index.gangs_on(topology, path.key_of(change.element))
        notice = _notice(change)
        for key in sorted(gangs):
            entry = book.get(key)
            if entry is None:
                continue
            updated = book.put(entry)
            if _path_moved(entry, updated):
                writer.submit(updated)
            if notice is not None:
                self._announce(updated, *notice, change)

    def seed(self) -> None:
        """Take every topology's unhealthy elements from the state as they are now. After a
        restart an element that went bad earlier changes no more (its record is restored from
        the topology's status): without this, the gangs on its path would show it only at its
        next change. Called before the book is restored, so ``annotate`` finds them."""
        now = self.clock()
        for topology in self.state.topologies:
            records: dict[_Record, _Unhealthy] = {}
            for element, now_health in self.state.element_health(topology).items():
                if now_health.state is fabric.HealthState.HEALTHY:
                    continue
                reason = "; ".join(o.reason for o in now_health.sources if o.reason)
                since = now_health.since if now_health.since is not None else now
                records[(path.key_of(element), element.rail)] = _Unhealthy(
                    element, now_health.state, now_health.capacity, now_health.sources, reason, since
                )
            self._unhealthy[topology] = records

    @property
    def version(self) -> int:
        return self.index.version

    def _remember(self, topology: ids.TopologyName, change: health.HealthChange) -> None:
        records = self._unhealthy.setdefault(topology, {})
        record: _Record = (path.key_of(change.element), change.element.rail)
        if change.new is fabric.HealthState.HEALTHY:
            records.pop(record, None)
            return
        old = records.get(record)
        since = old.since if old is not None and change.old is not fabric.HealthState.HEALTHY else change.at
        sources = change.sources
        reason = "; ".join(o.reason for o in change.sources if o.reason)
        if not sources and old is not None:
            sources, reason = old.sources, old.reason
        records[record] = _Unhealthy(change.element, change.new, change.new_capacity, sources, reason, since)

    def _announce(
        self, entry: reservations.Entry, reason: str, warning: bool, change: health.HealthChange
    ) -> None:
        verb = "is on" if warning else "recovered on"
        message = (
            f"{change.message[:300]}: {verb} the path of gang {entry.display} "
            f"(comm slowdown {entry.comm_slowdown:.2f}, at placement "
            f"{entry.comm_slowdown_at_placement or entry.comm_slowdown:.2f})"
        )
        placement = notices.ObjectRef(
            api.API_VERSION, api.KIND, objects.object_name(entry), "", entry.namespace
        )
        self.events.object_event(placement, reason, message, warning)
        workload = self.workload_of(entry)
        if workload is not None:
            self.events.object_event(workload, reason, message, warning)


class AffectedGangs:
    """``views.GangsOnPath`` over the tracker's path index and the book."""

    def __init__(self, tracker: PathHealth, book: reservations.Book) -> None:
        self._tracker = tracker
        self._book = book

    @property
    def version(self) -> int:
        return self._tracker.version

    def affected(self, topology: ids.TopologyName, element: health.ElementId) -> tuple[list[str], int]:
        """Up to 50 gangs (``namespace/name`` of their FabricPlacement) whose path crosses
        ``element``, and how many there are."""
        keys = self._tracker.index.gangs_on(topology, path.key_of(element))
        names = sorted(
            f"{e.namespace}/{objects.object_name(e)}" for k in keys if (e := self._book.get(k)) is not None
        )
        return names[:MAX_AFFECTED], len(names)


def _notice(change: health.HealthChange) -> tuple[str, bool] | None:
    """The Event a change gives: worse -> PathDegraded (Warning), healthy again -> PathRecovered."""
    if change.kind in ("recovering", "relapsed"):
        return None
    if change.new is fabric.HealthState.HEALTHY:
        return ("PathRecovered", False) if change.old is not fabric.HealthState.HEALTHY else None
    return ("PathDegraded", True) if change.worsened else None


def path_moved(old: reservations.Entry, new: reservations.Entry) -> bool:
    """Whether ``new`` says something else than ``old`` about the path's health."""
    return _path_moved(old, new)


def _path_moved(old: reservations.Entry, new: reservations.Entry) -> bool:
    return (old.degraded_path, old.comm_slowdown, old.unhealthy, old.unhealthy_count) != (
        new.degraded_path, new.comm_slowdown, new.unhealthy, new.unhealthy_count
    )


def _wire(u: _Unhealthy) -> api.PathElement:
    element = u.element
    return api.PathElement(
        kind=element.kind,
        node=element.name if element.kind == "node" else None,
        tier=element.tier,
        domain=element.name if element.kind == "domain" else None,
        rail=element.rail,
        state=u.state,
        capacity=min(1.0, max(0.0, u.capacity)),
        sources=[
            topology_api.HealthSource(source=o.source, reason=o.reason[:256], rule=o.rule, value=o.value)
            for o in u.sources[: api.MAX_SOURCES]
        ],
        reason=u.reason[:256],
        since=rfc3339.format_epoch(u.since),
    )


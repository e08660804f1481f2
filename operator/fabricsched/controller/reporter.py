"""Tells the cluster what the state knows: FabricTopology status and health Events.

One loop, not one write per event: every ``interval_s`` it advances the hysteresis clock
(``ClusterState.tick``), recomputes the status of each FabricTopology whose inputs moved, and
PATCHes the status subresource only when the result differs from what is stored. So a burst of
10,000 pod events costs one status write per topology per interval, and an unchanged status
costs none (a restarted operator that computes the same status writes nothing).

A change of capacity alone (pods bound or ended, plans reserved or released: the free GPU
counts) waits longer, one interval per ``CAPACITY_ROWS`` domain rows (``capacity_interval``):
the API server's work per status write grows with the status (a no-op patch of a 10,000-node
topology's 665 rows cost it 93 ms of CPU, a real one 150-190 ms), and while jobs are being
scheduled the counts move every second. Health, membership, spec and affected-gang changes
are written within one interval, with the counts as they are then.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.controller import events, metrics, state, status
from fabricsched.ports import changes, errors, notices, views

logger = logging.getLogger(__name__)

FIRST_PASS_WAIT_S = 30.0
"""Longest the first pass waits for the other parts (a restore retrying while the API server
is away): past it, status is written without them rather than not at all."""

CAPACITY_ROWS = 64
"""Domain rows per status interval a capacity-only change waits (1 interval up to 64 rows)."""
CAPACITY_MAX_INTERVALS = 10
"""The longest a capacity-only change waits, in status intervals (640 rows and more)."""

WriteStatus = Callable[[str, Mapping[str, Any]], None]
"""Replace the status of the named FabricTopology (sync). Raises ``errors.NotFound`` when it no
longer exists (deleted between computing and writing), another ``errors.ApiError`` otherwise."""


@dataclass(frozen=True)
class _Inputs:
    """What a status was computed from, split by how soon a change of it is written."""

    shape: int
    """State changes other than capacity: nodes, health, topologies (``generation`` less usage)."""
    gangs: int
    """Fingerprint of the gangs each unhealthy element touches (``status.degraded[].affectedGangs``):
    a new gang elsewhere in the fabric does not move it."""
    usage: int
    """``ClusterState.usage_generation``: pods taking or freeing GPUs."""
    reserved: int
    """Fingerprint of the GPUs plans hold for unbound ranks."""
    optin: int = 0
    """``optin.OptInWatch.fingerprint``: pods that missed the opt-in webhook."""

    def capacity_only(self, other: _Inputs) -> bool:
        return self.shape == other.shape and self.gangs == other.gangs and self.optin == other.optin


@dataclass
class _Written:
    uid: str
    status: Mapping[str, Any]
    inputs: _Inputs
    at: float
    """When the status was last computed (written, or found equal to the stored one)."""


class StatusReporter:
    """Owns the status loop. ``reserved`` (the extender's plans, when it runs) counts GPUs held
    for unbound ranks as taken."""

    def __init__(self, cluster: state.ClusterState, write: WriteStatus, clock: Callable[[], float],
                 registry: metrics.Metrics, interval_s: float = 1.0,
                 reserved: views.ReservedGpus | None = None,
                 gangs: views.GangsOnPath | None = None,
                 leading: Callable[[], bool] = lambda: True,
                 after: Sequence[views.Readiness] = ()) -> None:
        self._state = cluster
        self.leading = leading
        """Whether this replica writes status (the Lease holder)."""
        self._write = write
        self._clock = clock
        self._metrics = registry
        self.interval_s = interval_s
        self.reserved = reserved
        self.gangs = gangs
        self._written: dict[ids.TopologyName, _Written] = {}
        self._touched: dict[ids.TopologyName, tuple[tuple[int, int], int]] = {}
        """Per topology: (path index version, shape) -> the affected-gangs fingerprint."""
        self._after = after
        """Parts whose readiness the first pass waits for (the extender: its reservations count)."""
        self._first_done = False
        self._waiting_since: float | None = None

    def not_ready(self) -> str | None:
        """``views.Readiness``: the first pass (a whole status per FabricTopology, tens of ms
        at 10,000 nodes, holding the GIL in its thread) is done before ``/readyz`` says ready,
        so it does not slow the scheduler's first requests after a start."""
        return None if self._first_done else "the first FabricTopology status pass is not done"

    async def run(self) -> None:
        """Tick and report until cancelled; a pass that fails is logged and retried next interval."""
        while True:
            started = self._clock()
            if not self._first_done and not self._can_start():
                await asyncio.sleep(0.05)
                continue
            try:
                await self.report_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("status pass failed")
            self._first_done = True  # a failed write is retried next interval; it holds no one up
            # At most one pass per interval: that is what bounds writes to one per second per object.
            await asyncio.sleep(max(0.05, self.interval_s - (self._clock() - started)))

    def _can_start(self) -> bool:
        if not self._state.synced:
            return False
        now = self._clock()
        self._waiting_since = self._waiting_since if self._waiting_since is not None else now
        waited_out = now - self._waiting_since >= FIRST_PASS_WAIT_S
        return waited_out or all(part.not_ready() is None for part in self._after)

    async def report_once(self) -> int:
        """One pass: apply due recoveries, then write changed statuses. Returns writes made."""
        if not self._state.synced:
            return 0  # a partial view must not overwrite a good status
        self._state.tick()  # a standby's state applies recoveries too: its extender may decide next
        if not self.leading():
            # The Lease holder writes; a standby's writes would race the leader's. What this
            # replica wrote before is forgotten: the leader has written since.
            self._written.clear()
            return 0
        writes = 0
        for name in list(self._state.objects):
            if await self._report(name):
                writes += 1
        for gone in set(self._written) - set(self._state.objects):
            del self._written[gone]
        for gone in set(self._touched) - set(self._state.objects):
            del self._touched[gone]
        return writes

    def _gather(self, name: ids.TopologyName) -> status.StatusInputs | None:
        obj = self._state.objects.get(name)
        if obj is None:
            return None
        tf = self._state.topologies.get(name)
        snap = self._state.snapshot(name) if tf is not None else None
        held = self.reserved.reserved_in(name) if self.reserved is not None and tf is not None else None
        self._metrics.reconciles.labels(name).inc()
        return status.gather(obj, tf, snap, self._clock(), held, affected=self.gangs,
                             optin_missed=self._state.optin.summary())

    def capacity_interval(self, rows: int) -> float:
        """Least time between two writes of a status whose capacity alone moved, for a status
        of ``rows`` domain rows."""
        return self.interval_s * min(CAPACITY_MAX_INTERVALS, max(1, math.ceil(rows / CAPACITY_ROWS)))

    def _inputs(self, name: ids.TopologyName) -> _Inputs:
        held = self.reserved.reserved_in(name) if self.reserved is not None else None
        usage = self._state.usage_generation
        shape = self._state.generation - usage
        return _Inputs(
            shape=shape,
            gangs=self._affected(name, shape),
            usage=usage,
            reserved=hash(frozenset(held.items())) if held else 0,
            optin=self._state.optin.fingerprint(self._clock()),
        )

    def _affected(self, name: ids.TopologyName, shape: int) -> int:
        # Every new plan moves the path index, but the status shows gangs only on unhealthy
        # elements: O(unhealthy elements), and only when the index or the health (shape) moved.
        tf = self._state.topologies.get(name)
        if self.gangs is None or tf is None:
            return 0
        moved = (self.gangs.version, shape)
        known = self._touched.get(name)
        if known is not None and known[0] == moved:
            return known[1]
        rows = []
        for element in tf.health():
            names, count = self.gangs.affected(name, element)
            rows.append((element, tuple(names), count))
        fingerprint = hash(frozenset(rows))
        self._touched[name] = (moved, fingerprint)
        return fingerprint

    def _due(self, last: _Written | None, uid: str, inputs: _Inputs) -> bool:
        if last is None or last.uid != uid:
            return True
        if last.inputs == inputs:
            return False
        if not last.inputs.capacity_only(inputs):
            return True
        rows = len(last.status.get("domains") or ())
        return self._clock() - last.at >= self.capacity_interval(rows)

    async def _report(self, name: ids.TopologyName) -> bool:
        obj = self._state.objects[name]
        inputs = self._inputs(name)
        last = self._written.get(name)
        if not self._due(last, obj.uid, inputs):
            return False
        gathered = self._gather(name)
        if gathered is None:
            return False
        stored = last.status if last is not None and last.uid == obj.uid else obj.status
        # Building a 10,000-node status takes tens of milliseconds: in a worker thread, so the
        # loop keeps answering the scheduler meanwhile (the inputs are copies or immutable).
        wanted, same = await asyncio.to_thread(_build_and_compare, gathered, stored)
        if same:
            self._written[name] = _Written(obj.uid, stored, inputs, gathered.now)
            return False
        try:
            await asyncio.to_thread(self._write, name, wanted)
        except errors.NotFound:
            return False
        except errors.ApiError as e:
            self._metrics.status_writes.labels(name, "failed").inc()
            logger.warning("status write for FabricTopology %s failed: %s", name, e)
            return False
        self._metrics.status_writes.labels(name, "written").inc()
        self._written[name] = _Written(obj.uid, wanted, inputs, gathered.now)
        return True


def _build_and_compare(inputs: status.StatusInputs, stored: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    wanted = status.build(inputs)
    return wanted, _same(wanted, stored)


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    # Stored JSON may turn 1.0 into 1; dict equality already treats those as equal.
    return dict(a) == dict(b)


def forward_health(cluster: state.ClusterState, recorder: events.EventRecorder, registry: metrics.Metrics,
                   clock: Callable[[], float], gangs: views.GangsOnPath | None = None) -> Callable[[], None]:
    """Post an Event on the FabricTopology for every effective health change; returns unsubscribe."""

    def on_change(change: changes.Change) -> None:
        if not isinstance(change, changes.HealthChanged):
            return
        tf = cluster.topologies.get(change.topology)
        obj = cluster.objects.get(change.topology)
        hc = change.change
        registry.health_changes.labels(change.topology, hc.element.kind, hc.kind).inc()
        recover_after = tf.spec.health.recover_after_seconds if tf is not None else 0
        ref = notices.ObjectRef(api.API_VERSION, api.KIND, change.topology, obj.uid if obj else "")
        notice = events.health_notice(hc, recover_after)
        if gangs is not None:
            names, count = gangs.affected(change.topology, hc.element)
            shown = ", ".join(names[:3]) + (", ..." if count > 3 else "")
            touched = f"; touches {count} gang{'' if count == 1 else 's'}" + (f" ({shown})" if count else "")
            notice = dataclasses.replace(notice, message=notice.message + touched)
        logger.info("%s: %s", change.topology, notice.message,
                    extra={"topology": change.topology, "reason": notice.reason})
        recorder.record(ref, notice, clock())

    return cluster.subscribe(on_change)

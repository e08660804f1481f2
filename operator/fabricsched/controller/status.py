"""FabricTopology status of one object, from the state: what ``kubectl get fabrictopology -o yaml`` shows.

The rows, totals and conditions come from the pure core (``topology.status.build_status``); this
adds what only the operator knows: the object (its generation, the status stored on it), the
topology's membership conflicts, plan reservations, and the Ready=False status of a spec the
operator refused. Pure: the reporter compares the result with what is stored and writes only
differences.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fabricsched import ids
from fabricsched.api import conditions
from fabricsched.api import topology as api
from fabricsched.controller import fabrics, optin, snapshots, state, telemetry_feed
from fabricsched.ports import views
from fabricsched.telemetry import poller
from fabricsched.topology import conflicts, gpus, health, index
from fabricsched.topology import status as core_status


@dataclass(frozen=True)
class StatusInputs:
    """Everything one status needs, taken on the event loop (cheap: no pass over the hosts), so
    ``build`` can run in a worker thread while the loop answers the scheduler."""

    obj: state.TopologyObject
    built: index.BuildResult | None
    """None: no fabric (a refused spec)."""
    unhealthy: Mapping[health.ElementId, health.ElementHealth]
    """A copy of the tracker's view (the live one moves on the loop)."""
    free: Mapping[ids.NodeName, int]
    """The snapshot's free GPUs (copy-on-write: never changes once taken)."""
    reserved: Mapping[ids.NodeName, int]
    contested: tuple[conflicts.ConflictInfo, ...]
    telemetry: poller.Availability | None
    gangs: Mapping[health.ElementId, tuple[list[str], int]] | None
    """Per unhealthy element, the gangs it touches (None: no path index)."""
    now: float
    optin_missed: optin.Summary | None = None
    """GPU pods of opted-in namespaces that missed the webhook (condition ``OptInMissed``)."""


def gather(obj: state.TopologyObject, tf: fabrics.TopologyFabric | None,
           snap: snapshots.TopologySnapshot | None, now: float,
           reserved: Mapping[ids.NodeName, int] | None = None,
           affected: views.GangsOnPath | None = None,
           optin_missed: optin.Summary | None = None) -> StatusInputs:
    """Call on the loop thread; O(unhealthy elements + reserved nodes)."""
    if tf is None or snap is None:
        return StatusInputs(obj, None, {}, {}, {}, (), None, None, now)
    view = dict(tf.health())
    gangs = {e: affected.affected(obj.name, e) for e in view} if affected is not None else None
    contested = tuple(c for c in snap.conflicts if c.kind == "multipleTopologies")
    return StatusInputs(obj, tf.build(), view, snap.free_gpus, dict(reserved or {}), contested, tf.telemetry,
                        gangs, now, optin_missed)


def build(inputs: StatusInputs, options: core_status.StatusOptions | None = None) -> dict[str, Any]:
    """The full status to store (camelCase wire form). Pure: safe in a worker thread."""
    obj, now = inputs.obj, inputs.now
    previous = _previous_conditions(obj.status)
    if inputs.built is None:
        return _invalid(obj, previous, now).to_wire()
    free = gpus.free_after(inputs.free, inputs.reserved)
    result = core_status.build_status(
        inputs.built, inputs.unhealthy, free, now,
        extra_conflicts=inputs.contested, generation=obj.generation, previous_conditions=previous,
        options=options or core_status.StatusOptions(),
    )
    if inputs.gangs is not None and result.degraded:
        result = result.model_copy(update={"degraded": _with_gangs(result.degraded, inputs.gangs)})
    if inputs.telemetry is not None:
        telemetry = telemetry_feed.condition(inputs.telemetry, previous, now, obj.generation)
        result = result.model_copy(update={"conditions": [*result.conditions, telemetry]})
    missed = optin.condition(inputs.optin_missed, previous, now, obj.generation)
    if missed is not None:
        result = result.model_copy(update={"conditions": [*result.conditions, missed]})
    return result.to_wire()


AFFECTED_NAMES_BUDGET = 256 * 1024
"""Bytes of gang names over all of ``status.degraded`` (up to 50 per row): rows past the budget
carry the count alone, so the object stays far below the API server's size limit."""


def _with_gangs(rows: list[api.HealthRecord],
                affected: Mapping[health.ElementId, tuple[list[str], int]]) -> list[api.HealthRecord]:
    budget = AFFECTED_NAMES_BUDGET
    out = []
    for row in rows:
        names, count = affected.get(element_of(row), ([], 0))
        size = sum(len(n) + 3 for n in names)  # quotes and a comma each
        if size > budget:
            names = []
        budget -= size if names else 0
        out.append(row.model_copy(update={"affected_gangs": names, "affected_gang_count": count}))
    return out


def element_of(row: api.HealthRecord) -> health.ElementId:
    if row.kind == "node":
        return health.ElementId.node(row.node or "", row.rail)
    return health.ElementId.domain(row.tier or "", row.domain or "", row.rail)


def _invalid(obj: state.TopologyObject, previous: list[api.Condition],
             now: float) -> api.FabricTopologyStatus:
    reason = obj.invalid or "the spec could not be read"
    wanted: tuple[tuple[str, conditions.Status, str], ...] = (
        ("Ready", "False", reason), ("Degraded", "Unknown", "no fabric while the spec is invalid"))
    return api.FabricTopologyStatus(observed_generation=obj.generation, conditions=[
        conditions.transition(previous, ctype, status, "InvalidSpec", message, now, obj.generation)
        for ctype, status, message in wanted])


def _previous_conditions(stored: Mapping[str, Any]) -> list[api.Condition]:
    out = []
    for raw in stored.get("conditions") or ():
        try:
            out.append(api.Condition.model_validate(raw))
        except ValueError:
            continue  # a hand-edited condition: it will simply be replaced
    return out

"""FabricTopology status of one object, from the state: what ``kubectl get fabrictopology -o yaml`` shows.

The rows, totals and conditions come from the pure core (``topology.status.build_status``); this
adds what only the operator knows: the object (its generation, the status stored on it), the
topology's membership conflicts, plan reservations, and the Ready=False status of a spec the
operator refused. Pure: the reporter compares the result with what is stored and writes only
differences.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fabricsched import ids
from fabricsched.api import conditions
from fabricsched.api import topology as api
from fabricsched.controller import fabrics, snapshots, state, telemetry_feed
from fabricsched.ports import views
from fabricsched.topology import gpus, health
from fabricsched.topology import status as core_status


def compute(obj: state.TopologyObject, tf: fabrics.TopologyFabric | None,
            snap: snapshots.TopologySnapshot | None, now: float,
            reserved: Mapping[ids.NodeName, int] | None = None,
            options: core_status.StatusOptions | None = None,
            affected: views.GangsOnPath | None = None) -> dict[str, Any]:
    """The full status to store for ``obj`` (camelCase wire form)."""
    previous = _previous_conditions(obj.status)
    if tf is None or snap is None:
        return _invalid(obj, previous, now).to_wire()
    held = reserved or {}
    free = gpus.free_after(snap.free_gpus, held)
    built = tf.build()
    contested = tuple(c for c in snap.conflicts if c.kind == "multipleTopologies")
    result = core_status.build_status(
        built, tf.health(), free, now,
        extra_conflicts=contested, generation=obj.generation, previous_conditions=previous,
        options=options or core_status.StatusOptions(),
    )
    if affected is not None and result.degraded:
        result = result.model_copy(update={"degraded": _with_gangs(result.degraded, obj.name, affected)})
    if tf.telemetry is not None:
        telemetry = telemetry_feed.condition(tf.telemetry, previous, now, obj.generation)
        result = result.model_copy(update={"conditions": [*result.conditions, telemetry]})
    return result.to_wire()


AFFECTED_NAMES_BUDGET = 256 * 1024
"""Bytes of gang names over all of ``status.degraded`` (up to 50 per row): rows past the budget
carry the count alone, so the object stays far below the API server's size limit."""


def _with_gangs(rows: list[api.HealthRecord], topology: ids.TopologyName,
                affected: views.GangsOnPath) -> list[api.HealthRecord]:
    budget = AFFECTED_NAMES_BUDGET
    out = []
    for row in rows:
        names, count = affected.affected(topology, element_of(row))
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

"""Recent changes in the window, from the objects as the API server gave them (pure).

What changed on or around the job's path, with a time: FabricTopology edits (its managed
fields' times) and health changes (``status.degraded[].since``/``recoveringSince``), nodes
cordoned, relabelled or edited (their managed fields name which fields a manager last set, and
when), Node conditions that turned, pod restarts, and the Events of the gang's objects. Every
string through ``explain.bounds``; at most ``MAX_CHANGES``, newest last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fabricsched.diagnose import model, timefmt
from fabricsched.explain import bounds

MAX_CHANGES = 50
MAX_MANAGED = 32
NODE_FIELDS = (
    ("f:spec", "f:unschedulable", "cordoned or uncordoned"),
    ("f:metadata", "f:labels", "relabelled"),
    ("f:spec", "f:taints", "taints changed"),
)


def collect(
    window: model.Window,
    topologies: Mapping[str, Mapping[str, Any] | None],
    nodes: Mapping[str, Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    pods: Sequence[model.Pod],
) -> tuple[model.Change, ...]:
    found: list[model.Change] = []
    for name, topology in topologies.items():
        if topology is not None:
            found += _topology(bounds.clean(name, 253), topology)
    for name, node in nodes.items():
        found += _node(bounds.clean(name, 253), node)
    found += _events(events)
    found += [
        model.Change(p.last_restart, "restart", f"pod {p.name} restarted ({p.restarts} restarts)")
        for p in pods
        if p.last_restart is not None
    ]
    inside = {(c.time, c.kind, c.what): c for c in found if window.start <= c.time <= window.end}
    ordered = sorted(inside.values(), key=lambda c: c.time)
    return tuple(ordered[-MAX_CHANGES:])


def _topology(name: str, topology: Mapping[str, Any]) -> list[model.Change]:
    out = []
    for entry in bounds.items(bounds.mapping(topology, "metadata"), "managedFields", MAX_MANAGED):
        fields = bounds.mapping(entry, "fieldsV1")
        when = timefmt.parse(bounds.text(entry, "time", 64))
        if when is not None and "f:spec" in fields:
            out.append(
                model.Change(
                    when,
                    "topology",
                    f"FabricTopology {name} spec edited by {bounds.text(entry, 'manager', 64) or 'unknown'}",
                )
            )
    for record in bounds.items(bounds.mapping(topology, "status"), "degraded", 1000):
        what = _element(record)
        state = bounds.text(record, "state", 16)
        for key, verb in (("since", f"{state}"), ("recoveringSince", "recovering")):
            when = timefmt.parse(bounds.text(record, key, 64))
            if when is not None:
                reasons = "; ".join(bounds.text(s, "reason", 120) for s in bounds.items(record, "sources", 3))
                out.append(
                    model.Change(when, "health", f"{what} {verb}" + (f": {reasons}" if reasons else ""))
                )
    return out


def _element(record: object) -> str:
    if bounds.text(record, "kind", 16) == "node" or bounds.text(record, "node"):
        return f"host {bounds.text(record, 'node')} link"
    return f"{bounds.text(record, 'tier', 63)} {bounds.text(record, 'domain', 63)} uplinks"


def _node(name: str, node: Mapping[str, Any]) -> list[model.Change]:
    out = []
    for entry in bounds.items(bounds.mapping(node, "metadata"), "managedFields", MAX_MANAGED):
        fields = bounds.mapping(entry, "fieldsV1")
        when = timefmt.parse(bounds.text(entry, "time", 64))
        manager = bounds.text(entry, "manager", 64) or "unknown"
        if when is None or bounds.text(entry, "subresource", 32) == "status":
            continue
        for parent, child, verb in NODE_FIELDS:
            if child in bounds.mapping(fields, parent):
                out.append(model.Change(when, "node", f"node {name} {verb} by {manager}"))
    for condition in bounds.items(bounds.mapping(node, "status"), "conditions", 32):
        when = timefmt.parse(bounds.text(condition, "lastTransitionTime", 64))
        kind = bounds.text(condition, "type", 63)
        if when is not None:
            message = bounds.text(condition, "message", 160)
            out.append(
                model.Change(
                    when,
                    "node",
                    f"node {name} condition {kind}="
                    f"{bounds.text(condition, 'status', 16)}" + (f": {message}" if message else ""),
                )
            )
    return out


def _events(events: Sequence[Mapping[str, Any]]) -> list[model.Change]:
    out = []
    for item in events[:1000]:
        if not isinstance(item, Mapping):
            continue
        series = bounds.mapping(item, "series")
        stamp = next(
            (
                s
                for s in (
                    bounds.text(series, "lastObservedTime", 64),
                    bounds.text(item, "lastTimestamp", 64),
                    bounds.text(item, "eventTime", 64),
                    bounds.text(item, "firstTimestamp", 64),
                )
                if s
            ),
            None,
        )
        when = timefmt.parse(stamp)
        if when is None:
            continue
        involved = bounds.mapping(item, "involvedObject") or bounds.mapping(item, "regarding")
        what = (
            f"{bounds.text(item, 'type', 16)} {bounds.text(item, 'reason', 128)} on "
            f"{bounds.text(involved, 'kind', 63)}/{bounds.text(involved, 'name')}: "
            f"{bounds.text(item, 'message', 200) or bounds.text(item, 'note', 200)}"
        )
        out.append(model.Change(when, "event", what.strip(": ")))
    return out

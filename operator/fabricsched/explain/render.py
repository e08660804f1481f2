"""``Explanation`` -> text (one screen, for people), JSON or YAML (a stable schema, for scripts).

The wire schema (``to_wire``) is documented in docs/troubleshooting.md; new fields may be added,
existing ones keep their name and meaning. Strings are already bounded by ``report``; the text
form also cuts messages to one table cell and compresses consecutive ranks on one host.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml

from fabricsched.explain import bounds, events, paths, report

API_VERSION = "fabricsched.io/v1alpha1"
KIND = "Explanation"
MAX_RANK_ROWS = 24
"""Rows of the text rank table; -o json lists every rank."""
CELL = 100
"""Characters of a message in one text table cell."""
FORMATS = ("text", "json", "yaml")


def render(explanation: report.Explanation, output: str) -> str:
    if output == "json":
        return json.dumps(to_wire(explanation), indent=2) + "\n"
    if output == "yaml":
        return yaml.safe_dump(to_wire(explanation), sort_keys=False, allow_unicode=True)
    return text(explanation)


def to_wire(explanation: report.Explanation) -> dict[str, Any]:
    workload = explanation.workload
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "namespace": explanation.namespace,
        "name": explanation.name,
        "workload": None
        if workload is None
        else {
            "kind": workload.kind,
            "apiVersion": workload.api_version,
            "name": workload.name,
            "uid": workload.uid,
        },
        "gangs": [_gang_wire(g) for g in explanation.gangs],
        "events": [_event_wire(e) for e in explanation.events],
        "notes": list(explanation.notes),
    }


def _gang_wire(gang: report.Gang) -> dict[str, Any]:
    return {
        "placement": gang.placement,
        "gang": gang.gang,
        "namespace": gang.namespace,
        "topology": gang.topology,
        "size": gang.size,
        "gpusPerPod": gang.gpus_per_pod,
        "tier": {"name": gang.tier, "policy": gang.tier_policy},
        "constraints": list(gang.constraints),
        "traffic": gang.traffic,
        "phase": gang.phase,
        "why": gang.why,
        "reasons": list(gang.reasons),
        "preemptedBy": gang.preempted_by,
        "preempted": gang.preempted,
        "conditions": [
            {
                "type": c.type,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": c.last_transition_time,
            }
            for c in gang.conditions
        ],
        "expiresAt": gang.expires_at,
        "boundRanks": gang.bound_ranks,
        "degradedPath": gang.degraded_path,
        "commSlowdown": {"now": gang.slowdown_now, "atPlacement": gang.slowdown_at_placement},
        "tiers": list(gang.tiers),
        "domains": {tier: list(names) for tier, names in gang.domains.items()},
        "ranks": [
            {"rank": r.rank, "node": r.node, "domains": dict(r.domains), "bound": r.bound}
            for r in gang.ranks
        ],
        "unhealthyPath": {
            "source": gang.path_source,
            "count": gang.unhealthy_count,
            "elements": [_element_wire(e) for e in gang.unhealthy],
        },
    }


def _element_wire(element: paths.UnhealthyElement) -> dict[str, Any]:
    return {
        "kind": element.kind,
        "name": element.name,
        "rail": element.rail,
        "state": element.state,
        "capacity": element.capacity,
        "since": element.since,
        "recoveringSince": element.recovering_since,
        "sources": [{"source": s.source, "reason": s.reason} for s in element.sources],
        "why": element.why,
    }


def _event_wire(event: events.EventLine) -> dict[str, Any]:
    return {
        "time": event.time,
        "type": event.type,
        "reason": event.reason,
        "object": event.object,
        "message": event.message,
        "count": event.count,
    }


def text(explanation: report.Explanation) -> str:
    lines = [_headline(explanation)]
    for gang in explanation.gangs:
        lines += _gang_text(gang)
    if explanation.events:
        lines.append(f"events (last {len(explanation.events)}):")
        rows = [
            [
                _second(e.time),
                e.type,
                e.reason,
                e.object,
                _cell(e.message) + (f" (x{e.count})" if e.count > 1 else ""),
            ]
            for e in explanation.events
        ]
        lines += _table(["TIME", "TYPE", "REASON", "OBJECT", "MESSAGE"], rows)
    else:
        lines.append("events: none recent")
    lines += [f"note: {n}" for n in explanation.notes]
    return "\n".join(lines) + "\n"


def _headline(explanation: report.Explanation) -> str:
    query = f"{explanation.namespace}/{explanation.name}"
    parts = []
    if explanation.workload is not None:
        parts.append(f"{explanation.workload.kind} {explanation.workload.name}")
    if explanation.gangs:
        names = ", ".join(g.placement for g in explanation.gangs)
        parts.append(f"FabricPlacement {names}")
    return f"{query}: {' -> '.join(parts)}" if parts else query


def _gang_text(gang: report.Gang) -> list[str]:
    size = f"{gang.size} pods" if gang.size is not None else "? pods"
    gpus = f" x {gang.gpus_per_pod} GPUs" if gang.gpus_per_pod is not None else ""
    lines = [
        f"gang {gang.namespace}/{gang.gang}: {size}{gpus}, topology {gang.topology or '?'}, "
        f"tier {gang.tier or '?'} ({gang.tier_policy}), traffic {gang.traffic}",
        f"  phase {gang.phase}"
        + (f" ({gang.bound_ranks}/{gang.size} ranks bound)" if gang.size else "")
        + (f", expires {gang.expires_at}" if gang.expires_at and gang.phase == "Reserved" else "")
        + (f": {gang.why}" if gang.why else ""),
    ]
    lines += [f"  constraint: {c}" for c in gang.constraints]
    lines += [f"  - {r}" for r in gang.reasons]
    lines += [f"  {note}" for note in (gang.preempted_by, gang.preempted) if note]
    for c in gang.conditions:
        since = f" since {c.last_transition_time}" if c.last_transition_time else ""
        lines.append(
            f"  condition {c.type}={c.status} {c.reason}{since}: {_cell(c.message)}".rstrip(": ")
        )
    lines.append("  " + _slowdown_text(gang))
    lines += _ranks_text(gang)
    lines += _path_text(gang)
    return lines


def _slowdown_text(gang: report.Gang) -> str:
    def figure(value: float | None) -> str:
        return f"{value:.2f}" if value is not None else "not reported"

    degraded = {True: ", degraded path", False: "", None: ""}[gang.degraded_path]
    now = figure(gang.slowdown_now) if gang.slowdown_now is not None else "not reported by this operator"
    return f"comm slowdown: now {now}, at placement {figure(gang.slowdown_at_placement)}{degraded}"


def _ranks_text(gang: report.Gang) -> list[str]:
    if not gang.ranks:
        return ["  ranks: none planned"]
    rows: list[list[str]] = []
    groups: list[tuple[int, int, report.Rank]] = []
    for rank in gang.ranks:
        last = groups[-1] if groups else None
        if (
            last
            and last[2].node == rank.node
            and last[2].bound == rank.bound
            and last[1] + 1 == rank.rank
        ):
            groups[-1] = (last[0], rank.rank, last[2])
        else:
            groups.append((rank.rank, rank.rank, rank))
    for first, last_rank, rank in groups[:MAX_RANK_ROWS]:
        label = str(first) if first == last_rank else f"{first}-{last_rank}"
        rows.append(
            [
                label,
                rank.node,
                *[rank.domains.get(t) or "?" for t in gang.tiers],
                "yes" if rank.bound else "no",
            ]
        )
    lines = [
        "  " + line for line in _table(["RANK", "NODE", *[t.upper() for t in gang.tiers], "BOUND"], rows)
    ]
    if len(groups) > MAX_RANK_ROWS:
        lines.append(f"  ... {len(groups) - MAX_RANK_ROWS} more rows (-o json lists every rank)")
    return lines


def _path_text(gang: report.Gang) -> list[str]:
    where = {"status": "reported by the operator", "topology": "from the FabricTopology status"}
    if gang.path_source == "unknown":
        return ["  path health: unknown (the FabricTopology could not be read)"]
    if not gang.unhealthy_count:
        return [f"  path: healthy ({where[gang.path_source]})"]
    lines = [f"  unhealthy on path: {gang.unhealthy_count} ({where[gang.path_source]})"]
    rows = []
    for e in gang.unhealthy:
        name = (
            ("host " if e.kind == "node" else "")
            + e.name
            + (f" rail {e.rail}" if e.rail is not None else "")
        )
        capacity = f"{e.capacity:.2f}" if e.capacity is not None else "?"
        sources = "; ".join(f"{s.source}: {s.reason}" if s.reason else s.source for s in e.sources)
        rows.append([name, e.state, capacity, e.since or "-", _cell(sources or "-")])
    lines += ["  " + line for line in _table(["ELEMENT", "STATE", "CAPACITY", "SINCE", "SOURCE"], rows)]
    if gang.unhealthy_count > len(gang.unhealthy):
        lines.append(f"  ... {gang.unhealthy_count - len(gang.unhealthy)} more")
    return lines


def _second(stamp: str | None) -> str:
    # Events mix whole-second and microsecond stamps: one width in the table (JSON keeps them whole).
    if not stamp:
        return "-"
    return stamp[:19] + "Z" if len(stamp) > 20 and stamp[19] == "." else stamp


def _cell(value: str) -> str:
    return bounds.clean(value, CELL)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]

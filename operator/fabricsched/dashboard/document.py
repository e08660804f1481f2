"""The page's JSON document: one fabric drawn top tier down to hosts, the gangs on it and the
gangs waiting, built from a ``view.Snapshot``.

Elements are named for the page as ``node:NAME`` (a host's fabric access links) and
``domain:TIER/NAME`` (that switch group's uplinks), the units the path index and the health
records use. Every string that came from the cluster is bounded here; the page puts them in
the DOM as text only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricsched import ids
from fabricsched.dashboard import view
from fabricsched.placement import path
from fabricsched.topology import fabric, health, index

MAX_TEXT = 256
"""Longest reason or message copied into the document."""
MAX_NAME = 253


@dataclass(frozen=True)
class Selection:
    """What the data endpoint was asked for (``query``); empty fields select the default."""

    topology: str = ""
    namespace: str = ""
    gang: str = ""


def node_id(name: str) -> str:
    return f"node:{name}"


def domain_id(tier: str, name: str) -> str:
    return f"domain:{tier}/{name}"


def element_id(key: path.ElementKey) -> str:
    kind, tier, name = key
    return node_id(name) if kind == "node" else domain_id(tier or "", name)


EVERYTHING = Selection()


def build(snap: view.Snapshot, selection: Selection = EVERYTHING) -> dict[str, Any]:
    """The document for ``selection``; a selection naming nothing gives an empty view and a message."""
    names = sorted((str(f.name) for f in snap.fabrics), key=index.natural_key)
    messages: list[str] = []
    chosen = _choose(snap.fabrics, selection.topology, messages)
    gangs = [g for g in snap.gangs if chosen is not None and g.topology == chosen.name]
    pending = [p for p in snap.pending if chosen is None or p.topology in (None, chosen.name)]
    if selection.namespace:
        gangs = [g for g in gangs if g.namespace == selection.namespace]
        pending = [p for p in pending if p.namespace == selection.namespace]
        if not gangs and not pending:
            messages.append(f"no gang in namespace {_short(selection.namespace)!r}")
    if selection.gang:
        gangs = [g for g in gangs if selection.gang in (g.key, f"{g.namespace}/{g.name}")]
        pending = [p for p in pending if selection.gang in (p.key, f"{p.namespace}/{p.name}")]
        if not gangs and not pending:
            messages.append(f"no gang named {_short(selection.gang)!r}")
    doc: dict[str, Any] = {
        "topologies": names,
        "topology": str(chosen.name) if chosen is not None else None,
        "messages": messages,
        "fabric": _fabric(chosen) if chosen is not None else None,
        "gangs": [_gang(g, chosen.fabric) for g in gangs] if chosen is not None else [],
        "pending": [_pending(p) for p in pending],
    }
    if snap.report:
        doc["report"] = dict(snap.report)
    return doc


def _choose(
    fabrics: Sequence[view.FabricFacts], wanted: str, messages: list[str]
) -> view.FabricFacts | None:
    if not fabrics:
        messages.append("no FabricTopology is known to this process yet")
        return None
    if not wanted:
        return min(fabrics, key=lambda f: index.natural_key(f.name))
    for facts in fabrics:
        if facts.name == wanted:
            return facts
    messages.append(f"no FabricTopology named {_short(wanted)!r}")
    return None


def _short(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fabric(facts: view.FabricFacts) -> dict[str, Any]:
    fab = facts.fabric
    records = _records(facts.health)
    hosts = _hosts(facts, records)
    domains = _domains(fab, hosts, records)
    return {
        "name": str(facts.name),
        "tiers": [{"name": str(t.name), "oversubscription": t.oversubscription} for t in fab.tiers],
        "rails": fab.rails,
        "gpuBandwidthGbps": fab.gpu_bandwidth_gbps,
        "domains": domains,
        "hosts": hosts,
        "summary": {
            "hosts": len(hosts),
            **{k: sum(h[k] for h in hosts) for k in ("gpus", "used", "reserved", "free")},
            "degraded": sum(1 for e in (*hosts, *domains) if e["health"]["state"] == "degraded"),
            "down": sum(1 for e in (*hosts, *domains) if e["health"]["state"] == "down"),
        },
    }


_Records = Mapping[str, list[dict[str, Any]]]


def _records(effective: Mapping[health.ElementId, health.ElementHealth]) -> _Records:
    """Health records per page element id, one per rail (rail None = the whole element)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for element, record in effective.items():
        key = node_id(element.name) if element.kind == "node" else domain_id(element.tier or "", element.name)
        reason = "; ".join(f"{o.source}: {o.reason}" for o in record.sources if o.reason)
        found.setdefault(key, []).append({
            "rail": element.rail,
            "state": record.state.value,
            "capacity": round(record.capacity, 3),
            "reason": _short(reason),
            "since": record.since,
        })
    for rows in found.values():
        rows.sort(key=lambda r: -1 if r["rail"] is None else r["rail"])
    return found


def _health(state: fabric.HealthState, capacity: float, rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    listed = list(rows)
    worst = state
    for row in listed:
        if fabric.severity(fabric.HealthState(row["state"])) > fabric.severity(worst):
            worst = fabric.HealthState(row["state"])
    if capacity <= 0:
        worst = fabric.HealthState.DOWN
    return {"state": worst.value, "capacity": round(capacity, 3), "records": listed}


def _hosts(facts: view.FabricFacts, records: _Records) -> list[dict[str, Any]]:
    fab = facts.fabric
    leaf_tier = str(fab.tiers[0].name)
    rows: list[dict[str, Any]] = []
    for name in sorted(fab.hosts, key=lambda n: (_path_key(fab.hosts[n].path), index.natural_key(n))):
        host = fab.hosts[name]
        free = max(0, min(host.gpus, facts.free_gpus.get(name, host.gpus)))
        reserved = min(free, max(0, facts.reserved_gpus.get(name, 0)))
        rows.append({
            "id": node_id(name),
            "name": str(name),
            "path": [str(d) for d in host.path],
            "leaf": domain_id(leaf_tier, host.path[0]),
            "gpus": host.gpus,
            "used": host.gpus - free,
            "reserved": reserved,
            "free": free - reserved,
            "health": _health(host.state, host.health, records.get(node_id(name), ())),
        })
    return rows


def _path_key(domains: Sequence[ids.DomainName]) -> tuple[tuple[str | int, ...], ...]:
    return tuple(index.natural_key(d) for d in reversed(domains))


def _domains(fab: fabric.Fabric, hosts: list[dict[str, Any]], records: _Records) -> list[dict[str, Any]]:
    totals: dict[tuple[int, str], list[int]] = {}
    for host in hosts:
        for tier, name in enumerate(host["path"]):
            counts = totals.setdefault((tier, name), [0, 0, 0, 0, 0])
            counts[0] += 1
            for i, k in enumerate(("gpus", "used", "reserved", "free"), start=1):
                counts[i] += host[k]
    rows: list[dict[str, Any]] = []
    for (tier, name), domain in fab.domains.items():
        tier_name = str(fab.tiers[tier].name)
        key = domain_id(tier_name, name)
        parent = None if domain.parent is None else domain_id(str(fab.tiers[tier + 1].name), domain.parent)
        counts = totals.get((tier, str(name)), [0, 0, 0, 0, 0])
        rows.append({
            "id": key,
            "tier": tier_name,
            "level": tier,
            "name": str(name),
            "parent": parent,
            "hosts": counts[0],
            "gpus": counts[1],
            "used": counts[2],
            "reserved": counts[3],
            "free": counts[4],
            "health": _health(domain.state, domain.uplink_health, records.get(key, ())),
        })
    rows.sort(key=lambda r: (-r["level"], index.natural_key(r["name"])))
    return rows


def _gang(g: view.GangFacts, fab: fabric.Fabric) -> dict[str, Any]:
    crossed = sorted(element_id(k) for k in path.elements(fab, list(g.hosts)))
    return {
        "key": str(g.key),
        "namespace": g.namespace,
        "name": g.name,
        "phase": g.phase,
        "size": g.size,
        "gpusPerPod": g.gpus_per_pod,
        "tier": g.tier,
        "required": g.required,
        "hosts": sorted({str(h) for h in g.hosts}, key=index.natural_key),
        "path": crossed,
        "uplinks": [e for e in crossed if e.startswith("domain:")],
        "slowdown": round(g.slowdown, 4),
        "slowdownAtPlacement": round(g.slowdown_at_placement, 4),
        "degradedPath": g.degraded_path,
    }


def _pending(p: view.PendingFacts) -> dict[str, Any]:
    return {
        "key": _short(str(p.key), MAX_NAME * 2),
        "namespace": p.namespace,
        "name": p.name,
        "topology": p.topology,
        "reason": _short(p.reason),
        "message": _short(p.message, 1024),
        "since": p.since,
    }

"""The page's JSON document: one fabric drawn top tier down to hosts, the gangs on it and the
gangs waiting, built from a ``view.PageSnapshot``.

Elements are named for the page as ``node:NAME`` (a host's fabric access links) and
``domain:TIER/NAME`` (that switch group's uplinks), the units the path index and the health
records use. Every string that came from the cluster is bounded here; the page puts them in
the DOM as text only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricsched.dashboard import fragments, view
from fabricsched.placement import path
from fabricsched.topology import fabric, health, index

Rows = fragments.Rows
"""The rows kept between builds (``build``, ``dumps``)."""

MAX_TEXT = 256
"""Longest reason or message copied into the document."""
MAX_NAME = 253
MAX_LISTED = 64
"""Most victims, and most slice domains, listed per gang; the rest are counted."""


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


def build(snap: view.PageSnapshot, selection: Selection = EVERYTHING, rows: Rows | None = None,
          fabrics: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The document for ``selection``; a selection naming nothing gives an empty view and a
    message. ``rows`` keeps host and gang rows between builds (``fragments``, ``dumps``);
    ``fabrics`` keeps each topology's fabric part for other selections of the same snapshot
    (the caller empties it when the snapshot changes)."""
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
    kept = (rows or Rows()).of(chosen.name if chosen is not None else "")
    fab = chosen.fabric if chosen is not None else None
    part = None
    if chosen is not None:
        part = fabrics.get(str(chosen.name)) if fabrics is not None else None
        if part is None:
            part = _fabric(chosen, kept)
            if fabrics is not None:
                fabrics[str(chosen.name)] = part
    doc: dict[str, Any] = {
        "topologies": names,
        "topology": str(chosen.name) if chosen is not None else None,
        "messages": messages,
        "fabric": part,
        "gangs": [kept.gang(g, lambda g: _gang(g, fab)) for g in gangs] if fab is not None else [],
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


def _fabric(facts: view.FabricFacts, kept: fragments.FabricRows) -> dict[str, Any]:
    fab = facts.fabric
    records = _records(facts.health)
    hosts = kept.update(facts, {k[5:]: v for k, v in records.items() if k.startswith("node:")})
    domains = _domains(kept, fab, records)
    return {
        "name": str(facts.name),
        "tiers": [{"name": str(t.name), "oversubscription": t.oversubscription} for t in fab.tiers],
        "rails": fab.rails,
        "gpuBandwidthGbps": fab.gpu_bandwidth_gbps,
        "domains": domains,
        "hosts": hosts,
        "summary": _summary(len(fab.tiers) - 1, hosts, domains),
    }


def _summary(top: int, hosts: list[dict[str, Any]], domains: list[dict[str, Any]]) -> dict[str, int]:
    """GPU totals from the top tier's domains (every host is below one), health counts from the
    few rows that carry health."""
    tops = [d for d in domains if d["level"] == top]
    states = [e["health"]["state"] for e in (*hosts, *domains) if e["health"] is not None]
    return {
        "hosts": len(hosts),
        **{k: sum(d[k] for d in tops) for k in ("gpus", "used", "reserved", "free")},
        "degraded": states.count("degraded"),
        "down": states.count("down"),
    }


_Records = Mapping[str, list[dict[str, Any]]]
_HEALTHY = fabric.HealthState.HEALTHY


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


_HOSTS_MARK = "\x00hosts\x00"
_GANGS_MARK = "\x00gangs\x00"
_FABRIC_MARK = "\x00fabric\x00"


def dumps(doc: Mapping[str, Any], rows: Rows | None = None,
          fabric_texts: dict[str, str] | None = None) -> bytes:
    """``doc`` as compact JSON; its host and gang rows from the fragments ``rows`` keeps when
    ``doc`` was built with them (each row serialised once, when it was made). ``fabric_texts``
    keeps each topology's fabric part as JSON for other selections of the same build."""
    fab = doc.get("fabric")
    if rows is None or not fab:
        return fragments.compact(doc).encode()
    kept = rows.of(fab["name"])
    gangs = kept.gangs_text(doc["gangs"])
    if fab["hosts"] is not kept.hosts or gangs is None:
        return fragments.compact(doc).encode()
    fabric_text = fabric_texts.get(fab["name"]) if fabric_texts is not None else None
    if fabric_text is None:
        fabric_text = _splice(fragments.compact({**fab, "hosts": _HOSTS_MARK}),
                              {_HOSTS_MARK: kept.hosts_text})
        if fabric_text is None:  # a mark in some reason text: the plain way
            return fragments.compact(doc).encode()
        if fabric_texts is not None:
            fabric_texts[fab["name"]] = fabric_text
    text = _splice(fragments.compact({**doc, "fabric": _FABRIC_MARK, "gangs": _GANGS_MARK}),
                   {_FABRIC_MARK: fabric_text, _GANGS_MARK: gangs})
    return fragments.compact(doc).encode() if text is None else text.encode()


def _splice(text: str, parts: Mapping[str, str]) -> str | None:
    """``text`` with each (JSON-quoted) mark replaced by its part; None when a mark is not there
    exactly once. Spliced at the marks' places, so nothing spliced in is searched again."""
    marks = {fragments.compact(mark): part for mark, part in parts.items()}
    if any(text.count(mark) != 1 for mark in marks):
        return None
    spots = sorted((text.index(mark), mark) for mark in marks)
    out, at = [], 0
    for spot, mark in spots:
        out += [text[at:spot], marks[mark]]
        at = spot + len(mark)
    out.append(text[at:])
    return "".join(out)


@dataclass(frozen=True)
class _Place:
    """What a domain's row takes from the fabric's structure (kept while the fabric is)."""

    domain: fabric.Domain
    level: int
    name: str
    key: str
    tier: str
    parent: str | None
    above: tuple[int, str] | None


def _places(fab: fabric.Fabric) -> list[_Place]:
    """Every domain in document order: top tier first, each tier in natural order."""
    places = []
    for (tier, name), domain in fab.domains.items():
        tier_name = str(fab.tiers[tier].name)
        up = None if domain.parent is None else str(fab.tiers[tier + 1].name)
        places.append(_Place(
            domain, tier, str(name), domain_id(tier_name, name), tier_name,
            None if up is None else domain_id(up, domain.parent or ""),
            None if domain.parent is None else (tier + 1, str(domain.parent)),
        ))
    places.sort(key=lambda p: (-p.level, index.natural_key(p.name)))
    return places


def _domains(kept: fragments.FabricRows, fab: fabric.Fabric, records: _Records) -> list[dict[str, Any]]:
    if kept.places is None:
        kept.places = _places(fab)
    places: list[_Place] = kept.places
    # Leaves come summed (``fragments.Leaf.totals``); every higher domain sums its children,
    # lowest tier first (the reverse of document order).
    totals = {(0, leaf): list(counts) for leaf, counts in kept.totals().items()}
    for place in reversed(places):
        if place.above is not None:
            mine = totals.get((place.level, place.name), [0, 0, 0, 0, 0])
            above = totals.setdefault(place.above, [0, 0, 0, 0, 0])
            for i in range(5):
                above[i] += mine[i]
    rows: list[dict[str, Any]] = []
    made = kept.domain_rows
    for place in places:
        counts = tuple(totals.get((place.level, place.name), (0, 0, 0, 0, 0)))
        found = records.get(place.key)
        old = made.get(place.key)
        if old is not None and old[0] == counts and old[1] == found:
            rows.append(old[2])  # same fabric, totals and records: the row as it was
            continue
        domain = place.domain
        row = {
            "id": place.key,
            "tier": place.tier,
            "level": place.level,
            "name": place.name,
            "parent": place.parent,
            "hosts": counts[0],
            "gpus": counts[1],
            "used": counts[2],
            "reserved": counts[3],
            "free": counts[4],
            "health": fragments.health_of(domain.state, domain.uplink_health, found or ()),
        }
        made[place.key] = (counts, found, row)
        rows.append(row)
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
        "slowdown": _finite(g.slowdown),
        "slowdownAtPlacement": _finite(g.slowdown_at_placement),
        "degradedPath": g.degraded_path,
        "priority": g.priority,
        "traffic": _short(g.traffic, 16),
        "constraints": _constraints(g, fab),
        "preemption": _preemption(g.preemption),
        "preemptedBy": None if g.preempted_by is None else {
            "gang": _short(g.preempted_by.preemptor, MAX_NAME * 2 + 1),
            "priority": g.preempted_by.priority,
            "domain": _short(g.preempted_by.domain, MAX_NAME * 2 + 1),
            "at": g.preempted_by.at,
        },
    }


def _constraints(g: view.GangFacts, fab: fabric.Fabric) -> dict[str, Any]:
    """The tiers the gang asked for, whether its preferred one held, and its slices' domains."""
    required = g.tier if g.required else None
    preferred = g.preferred_tier if g.required else g.tier
    held = None
    if preferred is not None and g.hosts and any(t.name == preferred for t in fab.tiers):
        tier = fab.tier_index(preferred)
        held = len({fab.hosts[h].path[tier] for h in g.hosts if h in fab.hosts}) <= 1
    s = g.slices
    return {
        "required": _maybe(required),
        "preferred": _maybe(preferred),
        "preferredHeld": held,
        "slices": None if s is None else {
            "size": s.pods,
            "tier": _short(s.tier, MAX_NAME),
            "required": s.required,
            "domains": [_short(d, MAX_NAME) for d in s.domains[:MAX_LISTED]],
            "domainsMore": max(0, len(s.domains) - MAX_LISTED),
        },
    }


def _preemption(p: view.PreemptionFacts | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {
        "domain": _short(p.domain, MAX_NAME * 2 + 1),
        "at": p.at,
        "clearedAt": p.cleared_at,
        "victims": [{"namespace": _short(v.namespace, MAX_NAME), "name": _short(v.name, MAX_NAME),
                     "priority": v.priority, "gpus": v.gpus} for v in p.victims[:MAX_LISTED]],
        "victimsMore": max(0, len(p.victims) - MAX_LISTED),
    }


def _maybe(text: str | None) -> str | None:
    return None if text is None else _short(text, MAX_NAME)


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


def _finite(slowdown: float) -> float | None:
    """A gang over a down element has an infinite slowdown: JSON has no infinity, the page shows "-"."""
    return round(slowdown, 4) if math.isfinite(slowdown) else None

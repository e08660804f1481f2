"""The page's JSON document: one fabric drawn top tier down to hosts, the gangs on it and the
gangs waiting, built from a ``view.Snapshot``.

Elements are named for the page as ``node:NAME`` (a host's fabric access links) and
``domain:TIER/NAME`` (that switch group's uplinks), the units the path index and the health
records use. Every string that came from the cluster is bounded here; the page puts them in
the DOM as text only.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
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


def build(snap: view.Snapshot, selection: Selection = EVERYTHING, rows: Rows | None = None) -> dict[str, Any]:
    """The document for ``selection``; a selection naming nothing gives an empty view and a
    message. ``rows`` keeps host rows between builds of the same fabric (``dumps``)."""
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
        "fabric": _fabric(chosen, rows.of(chosen.name) if rows else None) if chosen is not None else None,
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


def _fabric(facts: view.FabricFacts, cache: HostRows | None) -> dict[str, Any]:
    fab = facts.fabric
    records = _records(facts.health)
    hosts = _hosts(facts, records, cache)
    domains = _domains(fab, hosts, records)
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


def _health(
    state: fabric.HealthState, capacity: float, rows: Iterable[dict[str, Any]]
) -> dict[str, Any] | None:
    """The element's health; None when healthy (most of a large fabric: the page reads None so)."""
    listed = list(rows)
    if state is fabric.HealthState.HEALTHY and capacity >= 1 and not listed:
        return None
    worst = state
    for row in listed:
        if fabric.severity(fabric.HealthState(row["state"])) > fabric.severity(worst):
            worst = fabric.HealthState(row["state"])
    if capacity <= 0:
        worst = fabric.HealthState.DOWN
    return {"state": worst.value, "capacity": round(capacity, 3), "records": listed}


class Rows:
    """Host rows of every topology kept between builds (``HostRows`` per topology)."""

    def __init__(self) -> None:
        self._topologies: dict[str, HostRows] = {}

    def of(self, topology: str) -> HostRows:
        found = self._topologies.get(topology)
        if found is None:
            found = self._topologies[topology] = HostRows()
        return found

    def text(self, topology: str, row: dict[str, Any]) -> str:
        return self.of(topology).text(row)

    def forget_other(self, topologies: Collection[str]) -> None:
        for gone in [t for t in self._topologies if t not in topologies]:
            del self._topologies[gone]


class HostRows:
    """Host rows and their JSON kept between builds: a row is made and serialised again only
    when its host object (a new one after a health or structure change), free or reserved
    GPUs, or health records moved. At 10,000 hosts a state change rebuilds a handful."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[fabric.Host, int, int, object, dict[str, Any], str]] = {}
        """Host name -> (host object, free, reserved, health records, row, its JSON)."""
        self._text: dict[int, str] = {}

    def put(self, host: fabric.Host, free: int, reserved: int, records: object,
            made: dict[str, Any]) -> dict[str, Any]:
        kept = self.rows.get(host.name)
        text = json.dumps(made, separators=(",", ":"), allow_nan=False)
        if kept is not None:
            self._text.pop(id(kept[4]), None)
        self.rows[host.name] = (host, free, reserved, records, made, text)
        self._text[id(made)] = text
        return made

    def text(self, row: dict[str, Any]) -> str:
        found = self._text.get(id(row))
        return found if found is not None else json.dumps(row, separators=(",", ":"), allow_nan=False)

    def forget_missing(self, names: Collection[str]) -> None:
        for gone in [n for n in self.rows if n not in names]:
            self._text.pop(id(self.rows.pop(gone)[4]), None)


_HOSTS_MARK = "\x00hosts\x00"


def dumps(doc: Mapping[str, Any], rows: Rows | None = None) -> bytes:
    """``doc`` as compact JSON; the hosts' rows from ``rows`` when given (serialised once each)."""
    fab = doc.get("fabric")
    if rows is None or not fab:
        return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
    marked = {**doc, "fabric": {**fab, "hosts": _HOSTS_MARK}}
    text = json.dumps(marked, separators=(",", ":"), allow_nan=False)
    mark = json.dumps(_HOSTS_MARK)
    if text.count(mark) != 1:  # the mark in some reason text: serialise the plain way
        return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
    hosts = "[" + ",".join(rows.text(fab["name"], h) for h in fab["hosts"]) + "]"
    return text.replace(mark, hosts, 1).encode()


def _hosts(facts: view.FabricFacts, records: _Records, cache: HostRows | None) -> list[dict[str, Any]]:
    # The one loop over every host: kept lean (locals, the cache's dict read in place), since a
    # rebuild at 10,000 hosts is mostly this loop.
    fab = facts.fabric
    rows: list[dict[str, Any]] = []
    free_gpus, reserved_gpus = facts.free_gpus, facts.reserved_gpus
    by_node = {k[5:]: v for k, v in records.items() if k.startswith("node:")}
    kept_rows = cache.rows if cache is not None else {}
    hosts = fab.hosts
    for name in _fabric_order(fab):
        host = hosts[name]
        gpus = host.gpus
        free = free_gpus.get(name, gpus)
        free = 0 if free < 0 else gpus if free > gpus else free
        reserved = reserved_gpus.get(name, 0)
        reserved = free if reserved > free else 0 if reserved < 0 else reserved
        found = by_node.get(name) if by_node else None
        kept = kept_rows.get(name)
        if kept is not None and kept[0] is host and kept[1] == free and kept[2] == reserved \
                and kept[3] == found:
            rows.append(kept[4])
            continue
        healthy = not found and host.health >= 1 and host.state is _HEALTHY
        row = {  # the page adds "id" (node:NAME) and the leaf's id: 10,000 rows, each byte counts
            "name": str(name),
            "leaf": str(host.path[0]),
            "gpus": gpus,
            "used": gpus - free,
            "reserved": reserved,
            "free": free - reserved,
            "health": None if healthy else _health(host.state, host.health, found or ()),
        }
        rows.append(cache.put(host, free, reserved, found, row) if cache is not None else row)
    if cache is not None and len(kept_rows) > len(hosts):
        cache.forget_missing(hosts)
    return rows


def _fabric_order(fab: fabric.Fabric) -> list[ids.NodeName]:
    """Hosts top domain by top domain (natural order), each domain's hosts in fabric order
    (``Domain.hosts`` is sorted by path already): no sort over every host."""
    top = len(fab.tiers) - 1
    order: list[ids.NodeName] = []
    for domain in sorted(fab.tier_domains(top), key=lambda d: index.natural_key(d.name)):
        order.extend(domain.hosts)
    return order


def _domains(fab: fabric.Fabric, hosts: list[dict[str, Any]], records: _Records) -> list[dict[str, Any]]:
    # Hosts add to their leaf only; every higher domain sums its children (tier by tier, upward).
    totals: dict[tuple[int, str], list[int]] = {}
    for host in hosts:
        counts = totals.setdefault((0, host["leaf"]), [0, 0, 0, 0, 0])
        counts[0] += 1
        counts[1] += host["gpus"]
        counts[2] += host["used"]
        counts[3] += host["reserved"]
        counts[4] += host["free"]
    for (tier, name), domain in sorted(fab.domains.items(), key=lambda kv: kv[0][0]):
        if domain.parent is not None:
            mine = totals.get((tier, str(name)), [0, 0, 0, 0, 0])
            above = totals.setdefault((tier + 1, str(domain.parent)), [0, 0, 0, 0, 0])
            for i in range(5):
                above[i] += mine[i]
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

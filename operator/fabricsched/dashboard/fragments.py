"""The page document's host rows and gang rows kept between builds, with their JSON.

At 10,000 hosts a full build walks every host and serialises 1.1 MB; a pod bound changes one
host. So the rows are kept leaf by leaf: a build finds the hosts that moved (a new host object
after a health or structure change, free or reserved GPUs, health records) by comparing the
facts with the copy kept from the last build, and makes again only those hosts' leaves: their
rows, their JSON fragment and their GPU totals. Everything else is reused as it was. A leaf
whose list of hosts changed (a host added, gone or moved) is made again too, so no fragment
outlives the facts it was made from.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fabricsched import ids
from fabricsched.dashboard import view
from fabricsched.topology import fabric, gpus, index

Row = dict[str, Any]
_HEALTHY = fabric.HealthState.HEALTHY


def compact(value: object) -> str:
    """``value`` as JSON; a non-finite number anywhere (JSON has none: an infinite slowdown, a
    NaN measurement) is written ``null``, which the page shows as "-". The walk that replaces
    them runs only when one is there."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), separators=(",", ":"), allow_nan=False)


def _finite(value: object) -> object:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def health_of(state: fabric.HealthState, capacity: float, rows: Iterable[Row]) -> Row | None:
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


def fabric_order(fab: fabric.Fabric) -> list[ids.NodeName]:
    """Hosts top domain by top domain (natural order), each domain's hosts in fabric order
    (``Domain.hosts`` is sorted by path already): no sort over every host."""
    top = len(fab.tiers) - 1
    order: list[ids.NodeName] = []
    for domain in sorted(fab.tier_domains(top), key=lambda d: index.natural_key(d.name)):
        order.extend(domain.hosts)
    return order


def leaf_order(fab: fabric.Fabric) -> list[tuple[str, tuple[ids.NodeName, ...]]]:
    """Every leaf with its hosts, in fabric order (a leaf's hosts are together in it)."""
    leaves: dict[str, list[ids.NodeName]] = {}
    for name in fabric_order(fab):
        leaves.setdefault(str(fab.hosts[name].path[0]), []).append(name)
    return [(leaf, tuple(names)) for leaf, names in leaves.items()]


def host_row(facts: view.FabricFacts, host: fabric.Host, records: list[Row] | None) -> Row:
    total = host.gpus
    free = facts.free_gpus.get(host.name, total)
    free = 0 if free < 0 else total if free > total else free
    reserved = facts.reserved_gpus.get(host.name, 0)
    reserved = free if reserved > free else 0 if reserved < 0 else reserved  # what the row can show
    healthy = not records and host.health >= 1 and host.state is _HEALTHY
    return {  # the page adds "id" (node:NAME) and the leaf's id: 10,000 rows, each byte counts
        "name": str(host.name),
        "leaf": str(host.path[0]),
        "gpus": total,
        "used": total - free,
        "reserved": reserved,
        "free": gpus.unreserved(free, reserved),
        "health": None if healthy else health_of(host.state, host.health, records or ()),
    }


@dataclass(frozen=True)
class Leaf:
    """One leaf's host rows as of the build that made them."""

    names: tuple[ids.NodeName, ...]
    rows: list[Row]
    text: str
    """The rows' JSON joined by commas (no brackets)."""
    totals: tuple[int, int, int, int, int]
    """Hosts, GPUs, used, reserved, free."""


def make_leaf(
    facts: view.FabricFacts, names: tuple[ids.NodeName, ...], by_node: Mapping[str, list[Row]]
) -> Leaf:
    hosts = facts.fabric.hosts
    rows = [host_row(facts, hosts[n], by_node.get(n)) for n in names]
    total, used, reserved, free = (sum(r[k] for r in rows) for k in ("gpus", "used", "reserved", "free"))
    return Leaf(names, rows, ",".join(compact(r) for r in rows), (len(rows), total, used, reserved, free))


def _moved(kept: Mapping[Any, Any], now: Mapping[Any, Any], into: set[Any]) -> dict[Any, Any]:
    """Adds to ``into`` the keys whose value differs between ``kept`` and ``now``; returns a
    copy of ``now`` to compare the next build with (the facts' maps may be changed in place)."""
    copied = dict(now)
    if copied != kept:
        try:  # GPU counts: the set difference of the items runs in C
            into.update(k for k, _ in copied.items() ^ kept.items())
        except TypeError:  # values that do not hash (health records): key by key
            into.update(k for k in copied.keys() | kept.keys() if copied.get(k) != kept.get(k))
    return copied


class FabricRows:
    """One topology's host rows per leaf, and its gang rows, as of the last build."""

    def __init__(self) -> None:
        self._fabric: fabric.Fabric | None = None
        self._order: list[tuple[str, tuple[ids.NodeName, ...]]] = []
        self._free: dict[Any, Any] = {}
        self._reserved: dict[Any, Any] = {}
        self._records: dict[Any, Any] = {}
        self.leaves: dict[str, Leaf] = {}
        self.hosts: list[Row] = []
        """Every host row in fabric order: the list the last build put in the document."""
        self.hosts_text = "[]"
        self._gangs: dict[view.GangFacts, Row] = {}
        self._gang_text: dict[int, str] = {}
        self.places: list[Any] | None = None
        """The document's reading of the fabric's domains (``document``): kept while the fabric is."""
        self.domain_rows: dict[str, tuple[tuple[int, ...], object, Row]] = {}
        """Domain id -> (its GPU totals, its health records, its row), kept while the fabric is."""

    def update(self, facts: view.FabricFacts, by_node: Mapping[str, list[Row]]) -> list[Row]:
        """The host rows for ``facts``: the leaves of hosts that moved are made again."""
        fab = facts.fabric
        moved: set[ids.NodeName] = set()
        new_fabric = fab is not self._fabric
        if new_fabric:
            before = self._fabric.hosts if self._fabric is not None else {}
            moved.update(n for n, h in fab.hosts.items() if before.get(n) != h)
            moved.update(n for n in before if n not in fab.hosts)
            self._order = leaf_order(fab)
            self._fabric = fab
            self.places = None
            self.domain_rows.clear()
            self._gangs.clear()  # a gang's path is read from the fabric's structure
            self._gang_text.clear()
        self._free = _moved(self._free, facts.free_gpus, moved)
        self._reserved = _moved(self._reserved, facts.reserved_gpus, moved)
        self._records = _moved(self._records, by_node, moved)
        if not moved and not new_fabric and self.leaves:
            return self.hosts
        hosts = fab.hosts
        dirty = {str(hosts[n].path[0]) for n in moved if n in hosts}
        leaves: dict[str, Leaf] = {}
        for leaf, names in self._order:
            kept = self.leaves.get(leaf)
            if kept is None or leaf in dirty or kept.names != names:
                kept = make_leaf(facts, names, by_node)
            leaves[leaf] = kept
        self.leaves = leaves
        self.hosts = [row for leaf in leaves.values() for row in leaf.rows]
        self.hosts_text = "[" + ",".join(leaf.text for leaf in leaves.values() if leaf.text) + "]"
        return self.hosts

    def totals(self) -> dict[str, tuple[int, int, int, int, int]]:
        return {name: leaf.totals for name, leaf in self.leaves.items()}

    def gang(self, facts: view.GangFacts, make: Any) -> Row:
        """The gang's row, made by ``make(facts)`` unless these exact facts were seen on this fabric."""
        found = self._gangs.get(facts)
        if found is None:
            if len(self._gangs) >= MAX_GANGS:
                self._gangs.clear()
                self._gang_text.clear()
            found = self._gangs[facts] = make(facts)
            self._gang_text[id(found)] = compact(found)
        return found

    def gangs_text(self, rows: list[Row]) -> str | None:
        """The JSON of ``rows`` from the kept fragments; None when one of them is not kept."""
        texts = [self._gang_text.get(id(r)) for r in rows]
        return None if None in texts else "[" + ",".join(texts) + "]"  # type: ignore[arg-type]


MAX_GANGS = 20_000
"""Gang rows kept per topology; beyond, the cache starts again (made again on the next build)."""


class Rows:
    """``FabricRows`` of every topology kept between builds."""

    def __init__(self) -> None:
        self._topologies: dict[str, FabricRows] = {}

    def of(self, topology: str) -> FabricRows:
        found = self._topologies.get(topology)
        if found is None:
            found = self._topologies[topology] = FabricRows()
        return found

    def forget_other(self, topologies: Collection[str]) -> None:
        for gone in [t for t in self._topologies if t not in topologies]:
            del self._topologies[gone]

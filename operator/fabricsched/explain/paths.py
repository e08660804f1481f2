"""The unhealthy elements on a gang's path, from the FabricTopology's ``status.degraded``.

A gang's path is the links its traffic crosses: the access links of its hosts when it spans
more than one host, and the uplinks of every domain it spans partially (some of its hosts
inside, some outside). A leaf with degraded uplinks is therefore not on the path of a gang
that fits inside it, and a host's link is not on the path of a gang on that host alone.
Operators that report the path themselves (status ``unhealthyPath``) are read by
``report`` instead; this derivation is for those that do not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricsched.explain import bounds

MAX_ELEMENTS = 50
"""Unhealthy path elements listed (the count says how many there were)."""
MAX_SOURCES = 8


@dataclass(frozen=True)
class Evidence:
    source: str
    """spec.links, condition, label, prometheus, dra, ..."""
    reason: str


@dataclass(frozen=True)
class UnhealthyElement:
    """One element on the gang's path that is not healthy."""

    kind: str
    """node (a host's access links) or domain (a switch group's uplinks)."""
    name: str
    """The node, or ``tier/domain``."""
    rail: int | None
    state: str
    capacity: float | None
    since: str | None
    recovering_since: str | None
    sources: tuple[Evidence, ...]
    why: str
    """Why the element is on this gang's path, e.g. 'uplinks of leaf l03: 4 of 6 hosts inside'."""


def element_of(record: Mapping[str, Any], why: str) -> UnhealthyElement:
    """A health record (``status.degraded[]`` or a status path entry) as a path element."""
    kind = bounds.text(record, "kind", 16) or ("node" if bounds.text(record, "node") else "domain")
    if kind == "node":
        name = bounds.text(record, "node")
    else:
        name = f"{bounds.text(record, 'tier', 63)}/{bounds.text(record, 'domain', 63)}"
    sources = [
        Evidence(bounds.text(s, "source", 32), bounds.text(s, "reason"))
        for s in bounds.items(record, "sources", MAX_SOURCES)
        if isinstance(s, Mapping)
    ]
    if not sources and bounds.text(record, "source", 32):
        sources = [Evidence(bounds.text(record, "source", 32), bounds.text(record, "reason"))]
    return UnhealthyElement(
        kind=kind,
        name=name,
        rail=bounds.integer(record, "rail"),
        state=bounds.text(record, "state", 16) or "unknown",
        capacity=bounds.number(record, "capacity"),
        since=bounds.optional_text(record, "since", 64),
        recovering_since=bounds.optional_text(record, "recoveringSince", 64),
        sources=tuple(sources),
        why=why or bounds.text(record, "why"),
    )


def on_path(
    records: Sequence[object],
    hosts: Sequence[str],
    domain_of: Mapping[str, Mapping[str, str]],
) -> tuple[list[UnhealthyElement], int]:
    """The degraded records that lie on the path of a gang on ``hosts`` (first ``MAX_ELEMENTS``,
    and how many there are). ``domain_of[host][tier]`` is the host's domain at each tier, from
    its node labels; hosts whose domain at a tier is unknown are left out of that tier's count."""
    unique_hosts = list(dict.fromkeys(hosts))
    found: list[UnhealthyElement] = []
    total = 0
    for record in records:
        if not isinstance(record, Mapping):
            continue
        why = _why_on_path(record, unique_hosts, domain_of)
        if why is None:
            continue
        total += 1
        if len(found) < MAX_ELEMENTS:
            found.append(element_of(record, why))
    return found, total


def _why_on_path(
    record: Mapping[str, Any], hosts: Sequence[str], domain_of: Mapping[str, Mapping[str, str]]
) -> str | None:
    if record.get("kind") == "node":
        node = record.get("node")
        if len(hosts) > 1 and isinstance(node, str) and node in hosts:
            return f"access link of host {bounds.clean(node)}, one of the gang's {len(hosts)} hosts"
        return None
    tier, domain = record.get("tier"), record.get("domain")
    if not isinstance(tier, str) or not isinstance(domain, str):
        return None
    known = [h for h in hosts if tier in domain_of.get(h, {})]
    inside = sum(1 for h in known if domain_of[h][tier] == domain)
    if 0 < inside < len(known):
        return (
            f"uplinks of {bounds.clean(tier, 63)} {bounds.clean(domain, 63)}: "
            f"{inside} of the gang's {len(known)} hosts inside"
        )
    return None

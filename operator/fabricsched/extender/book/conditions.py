"""The conditions of a FabricPlacement: Reserved, Bound, PathDegraded, from a book entry.

Each is dated by ``api.conditions.transition``: a condition whose status did not change keeps
its ``lastTransitionTime`` across writes (the writer keeps the last conditions of every gang).
"""

from __future__ import annotations

from collections.abc import Sequence

from fabricsched.api import conditions
from fabricsched.api.placement import PathElement, PlacementPhase
from fabricsched.extender.book import reservations

RESERVED = "Reserved"
BOUND = "Bound"
PATH_DEGRADED = "PathDegraded"

MAX_LISTED = 5
"""Elements named in the PathDegraded message (the status lists up to 32)."""


def of(
    entry: reservations.Entry, previous: Sequence[conditions.Condition], now: float
) -> list[conditions.Condition]:
    """The three conditions of ``entry`` as of ``now``."""
    return [
        conditions.transition(previous, RESERVED, *_reserved(entry), now, None),
        conditions.transition(previous, BOUND, *_bound(entry), now, None),
        conditions.transition(previous, PATH_DEGRADED, *_path(entry), now, None),
    ]


def _reserved(entry: reservations.Entry) -> tuple[conditions.Status, str, str]:
    if entry.phase == PlacementPhase.PENDING:
        reason, message = entry.waiting or ("NoFit", "waiting for a plan")
        return "False", reason, message
    if entry.phase == PlacementPhase.EXPIRED:
        return "False", "Expired", "the unbound ranks' reservation expired; they are planned again on demand"
    if entry.phase == PlacementPhase.RELEASED:
        return "False", "Released", entry.reasons[-1] if entry.reasons else "released"
    held = sum(1 for _ in entry.placed())
    return "True", "Planned", f"{held} of {entry.size} ranks have a node; " + "; ".join(entry.reasons[:3])


def _bound(entry: reservations.Entry) -> tuple[conditions.Status, str, str]:
    bound = len(entry.bound)
    if entry.phase == PlacementPhase.BOUND:
        return "True", "AllRanksBound", f"{bound} of {entry.size} ranks bound"
    if entry.phase == PlacementPhase.PENDING:
        return "False", "NotPlanned", "no plan yet"
    return "False", "RanksBinding", f"{bound} of {entry.size} ranks bound"


def _path(entry: reservations.Entry) -> tuple[conditions.Status, str, str]:
    if not entry.degraded_path:
        return "False", "PathHealthy", "every element on the gang's path is healthy"
    named = ", ".join(describe(e) for e in entry.unhealthy[:MAX_LISTED])
    more = entry.unhealthy_count - min(len(entry.unhealthy), MAX_LISTED)
    tail = f" and {more} more" if more > 0 else ""
    slowdown = f"comm slowdown {entry.comm_slowdown:.2f}"
    at = entry.comm_slowdown_at_placement
    if at is not None:
        slowdown += f" (at placement {at:.2f})"
    return "True", "ElementUnhealthy", f"{named or 'an element'}{tail} on the path; {slowdown}"


def describe(element: PathElement) -> str:
    where = f"node {element.node}" if element.kind == "node" else f"{element.tier} {element.domain} uplinks"
    rail = f" rail {element.rail}" if element.rail is not None else ""
    return f"{where}{rail} {element.state.value} (capacity {element.capacity:.2f})"

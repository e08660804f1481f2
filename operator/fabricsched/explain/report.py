"""The explanation of one workload or gang, built from plain object dicts (pure, no I/O).

``build`` takes what ``reader`` fetched (the workload, its FabricPlacements, their
FabricTopologies, the ranks' Nodes, Events) and returns an ``Explanation``: typed, bounded
(every echoed string through ``bounds``; lists cut, with counts), ready for ``render``.
Fields newer operators add to the status are read by name when present and are None or empty
otherwise, so the same report works against every version of the operator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricsched.explain import bounds, events, paths

MAX_RANKS = 16384
MAX_REASONS = 20
MAX_CONDITIONS = 16
MAX_NOTES = 20
PATH_STATUS_FIELDS = ("unhealthyPath", "unhealthyElements", "pathElements", "degradedElements")
"""Names a FabricPlacement status may carry its path's unhealthy elements under."""
WAITING_CONDITIONS = ("Reserved", "Scheduled", "Placed", "Bound")
"""Conditions whose False status says why a Pending gang waits, in order of preference."""


@dataclass(frozen=True)
class Workload:
    kind: str
    api_version: str
    name: str
    uid: str


@dataclass(frozen=True)
class ObservedCondition:
    type: str
    status: str
    reason: str
    message: str
    last_transition_time: str | None


@dataclass(frozen=True)
class Rank:
    rank: int
    node: str
    domains: Mapping[str, str | None]
    """The node's domain at each tier (None when its label is missing or the Node unreadable)."""
    bound: bool


@dataclass(frozen=True)
class Gang:
    placement: str
    """The FabricPlacement's name."""
    gang: str
    namespace: str
    topology: str
    size: int | None
    gpus_per_pod: int | None
    tier: str
    tier_policy: str
    constraints: tuple[str, ...]
    """Every constraint the gang asked for and whether the plan kept it, one line each."""
    phase: str
    why: str
    """One line: why the gang is where it is, or why it waits."""
    reasons: tuple[str, ...]
    conditions: tuple[ObservedCondition, ...]
    expires_at: str | None
    bound_ranks: int
    degraded_path: bool | None
    slowdown_now: float | None
    """The predicted comm slowdown on today's fabric; None when the operator does not report it."""
    slowdown_at_placement: float | None
    tiers: tuple[str, ...]
    """Tier names, lowest first (from the FabricTopology; else the plan's domains)."""
    domains: Mapping[str, tuple[str, ...]]
    ranks: tuple[Rank, ...]
    unhealthy: tuple[paths.UnhealthyElement, ...]
    unhealthy_count: int
    path_source: str
    """status (the operator reports the path), topology (derived here), or unknown."""
    preempted_by: str | None = None
    """When and by whom the gang was last preempted (``status.preemptedBy``)."""
    preempted: str | None = None
    """What the gang preempted to get its domain (``status.preemption``)."""
    traffic: str = "all-to-all"
    """The traffic pattern its commSlowdown assumes (``spec.traffic``; absent: all-to-all)."""


@dataclass(frozen=True)
class Explanation:
    namespace: str
    name: str
    workload: Workload | None
    gangs: tuple[Gang, ...]
    events: tuple[events.EventLine, ...]
    notes: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Objects:
    """What ``reader`` fetched: plain dicts as the API server returned them."""

    namespace: str
    name: str
    workload: Mapping[str, Any] | None
    placements: Sequence[Mapping[str, Any]]
    topologies: Mapping[str, Mapping[str, Any] | None]
    """By name; None when it could not be read (missing, forbidden)."""
    nodes: Mapping[str, Mapping[str, Any]]
    events: Sequence[Mapping[str, Any]]
    notes: Sequence[str] = ()


def build(objects: Objects) -> Explanation:
    gangs = tuple(_gang(p, objects) for p in objects.placements)
    notes = [bounds.clean(n) for n in objects.notes[:MAX_NOTES]]
    if objects.workload is not None and not gangs:
        notes.append(
            "no FabricPlacement for this workload yet: fabricsched has not planned its gang "
            "(its pods are not created, request no GPU, or do not set schedulerName: fabricsched); "
            "the pods' Events below say what the scheduler saw"
        )
    return Explanation(
        namespace=bounds.clean(objects.namespace),
        name=bounds.clean(objects.name),
        workload=_workload(objects.workload),
        gangs=gangs,
        events=events.recent(objects.events),
        notes=tuple(notes),
    )


def _workload(obj: Mapping[str, Any] | None) -> Workload | None:
    if obj is None:
        return None
    metadata = bounds.mapping(obj, "metadata")
    return Workload(
        kind=bounds.text(obj, "kind", 63),
        api_version=bounds.text(obj, "apiVersion", 127),
        name=bounds.text(metadata, "name"),
        uid=bounds.text(metadata, "uid", 64),
    )


def _gang(placement: Mapping[str, Any], objects: Objects) -> Gang:
    metadata = bounds.mapping(placement, "metadata")
    spec = bounds.mapping(placement, "spec")
    status = bounds.mapping(placement, "status")
    topology_name = bounds.text(spec, "topology")
    topology = objects.topologies.get(topology_name)
    plan_domains = {
        bounds.clean(tier, 63): tuple(
            bounds.clean(d, 63) for d in names[:MAX_RANKS] if isinstance(d, str)
        )
        for tier, names in list(bounds.mapping(spec, "domains").items())[:8]
        if isinstance(names, list)
    }
    tier_labels = _tier_labels(topology)
    tiers = tuple(tier_labels) or tuple(plan_domains)
    bound = {r for r in bounds.items(status, "boundRanks", MAX_RANKS) if isinstance(r, int)}
    ranks = _ranks(spec, tier_labels, objects.nodes, bound)
    unhealthy, count, source = _unhealthy(status, topology, ranks)
    conditions = tuple(_condition(c) for c in bounds.items(status, "conditions", MAX_CONDITIONS))
    reasons = tuple(bounds.clean(r) for r in bounds.items(status, "reasons", MAX_REASONS))
    phase = bounds.text(status, "phase", 32) or ("Pending" if not ranks else "Unknown")
    tier = bounds.mapping(spec, "tier")
    at_placement = bounds.number(status, "commSlowdownAtPlacement")
    now = bounds.number(status, "commSlowdown")
    if at_placement is None:
        # Older operators write the slowdown once, at placement, and never update it.
        at_placement, now = now, None
    return Gang(
        placement=bounds.text(metadata, "name"),
        gang=bounds.text(spec, "gang") or bounds.text(metadata, "name"),
        namespace=bounds.text(metadata, "namespace") or bounds.clean(objects.namespace),
        topology=topology_name,
        size=bounds.integer(spec, "size"),
        gpus_per_pod=bounds.integer(spec, "gpusPerPod"),
        # spec.tier: required/preferred, or (objects written before) name + policy.
        tier=(bounds.text(tier, "required", 63) or bounds.text(tier, "name", 63)
              or bounds.text(tier, "preferred", 63)),
        tier_policy="required" if bounds.text(tier, "required", 63) else (
            bounds.text(tier, "policy", 16) or "preferred"),
        constraints=_constraints(spec, status),
        phase=phase,
        why=_why(phase, conditions, reasons),
        reasons=reasons,
        conditions=conditions,
        expires_at=bounds.optional_text(status, "expiresAt", 64),
        bound_ranks=len(bound),
        degraded_path=bounds.flag(status, "degradedPath"),
        slowdown_now=now,
        slowdown_at_placement=at_placement,
        tiers=tiers,
        domains=plan_domains,
        ranks=ranks,
        unhealthy=tuple(unhealthy),
        unhealthy_count=count,
        path_source=source,
        preempted_by=_preempted_by(bounds.mapping(status, "preemptedBy")),
        preempted=_preempted(bounds.mapping(status, "preemption")),
        traffic=bounds.text(spec, "traffic", 16) or "all-to-all",
    )


def _constraints(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[str, ...]:
    """"required tier spine", "preferred tier leaf: not held", "slices of 4 pods in one leaf
    (required): held in l1, l2": what the gang asked for and what its plan kept."""
    tier, slices = bounds.mapping(spec, "tier"), bounds.mapping(spec, "slices")
    lines = []
    required = bounds.text(tier, "required", 63) or (
        bounds.text(tier, "name", 63) if bounds.text(tier, "policy", 16) == "required" else "")
    if required:
        lines.append(f"required tier {required}")
    preferred = bounds.text(tier, "preferred", 63)
    if preferred:
        held = bounds.flag(status, "preferredTierHeld")
        lines.append(f"preferred tier {preferred}"
                     + ("" if held is None else ": held" if held else ": not held"))
    size = bounds.integer(slices, "size")
    if size is not None:
        what = (f"slices of {size} pods in one {bounds.text(slices, 'tier', 63) or '?'} "
                f"({bounds.text(slices, 'policy', 16) or 'required'})")
        held = bounds.flag(status, "slicesHeld")
        domains = [bounds.clean(d, 63) for d in bounds.items(slices, "domains", 64)]
        if held:
            what += ": held in " + ", ".join(domains)
        elif held is not None:
            what += ": not held"
        lines.append(what)
    return tuple(lines)


def _tier_labels(topology: Mapping[str, Any] | None) -> dict[str, str]:
    """Tier name -> node label, lowest tier first."""
    found: dict[str, str] = {}
    for tier in bounds.items(bounds.mapping(topology, "spec"), "tiers", 8):
        name, label = (
            bounds.text(tier, "name", 63),
            tier.get("nodeLabel") if isinstance(tier, Mapping) else None,
        )
        if name and isinstance(label, str):
            found[name] = label
    return found


def _ranks(
    spec: Mapping[str, Any],
    tier_labels: Mapping[str, str],
    nodes: Mapping[str, Mapping[str, Any]],
    bound: set[int],
) -> tuple[Rank, ...]:
    ranks = []
    for entry in bounds.items(spec, "ranks", MAX_RANKS):
        rank, node = bounds.integer(entry, "rank"), bounds.text(entry, "node")
        if rank is None or not node:
            continue
        labels = bounds.mapping(bounds.mapping(nodes.get(node), "metadata"), "labels")
        domains = {tier: bounds.text(labels, label, 63) or None for tier, label in tier_labels.items()}
        ranks.append(Rank(rank=rank, node=node, domains=domains, bound=rank in bound))
    return tuple(sorted(ranks, key=lambda r: r.rank))


def _unhealthy(
    status: Mapping[str, Any], topology: Mapping[str, Any] | None, ranks: Sequence[Rank]
) -> tuple[list[paths.UnhealthyElement], int, str]:
    for key in PATH_STATUS_FIELDS:
        if isinstance(status.get(key), list):
            records = status[key]
            listed = [
                paths.element_of(r, "") for r in records[: paths.MAX_ELEMENTS] if isinstance(r, Mapping)
            ]
            total = bounds.integer(status, f"{key}Count") or len(records)
            return listed, max(total, len(listed)), "status"
    if topology is None:
        return [], 0, "unknown"
    hosts = [r.node for r in ranks]
    domain_of = {r.node: {t: d for t, d in r.domains.items() if d is not None} for r in ranks}
    records = bounds.items(bounds.mapping(topology, "status"), "degraded", 100_000)
    found, total = paths.on_path(records, hosts, domain_of)
    return found, total, "topology"


def _condition(obj: object) -> ObservedCondition:
    return ObservedCondition(
        type=bounds.text(obj, "type", 63),
        status=bounds.text(obj, "status", 16),
        reason=bounds.text(obj, "reason", 128),
        message=bounds.text(obj, "message"),
        last_transition_time=bounds.optional_text(obj, "lastTransitionTime", 64),
    )


def _why(phase: str, conditions: Sequence[ObservedCondition], reasons: Sequence[str]) -> str:
    if phase == "Pending":
        waiting = [c for c in conditions if c.status == "False" and c.type in WAITING_CONDITIONS]
        waiting.sort(key=lambda c: WAITING_CONDITIONS.index(c.type))
        if waiting:
            return bounds.clean(f"{waiting[0].reason}: {waiting[0].message}".strip(": "))
    degraded = next((c for c in conditions if c.type == "PathDegraded" and c.status == "True"), None)
    if degraded is not None:
        return bounds.clean(f"{degraded.reason}: {degraded.message}".strip(": "))
    return reasons[0] if reasons else ""


def _preempted_by(record: Mapping[str, Any]) -> str | None:
    if not record:
        return None
    return (f"preempted at {bounds.text(record, 'time', 64)} by gang {bounds.text(record, 'preemptor', 320)} "
            f"(priority {bounds.integer(record, 'priority')}) to clear {bounds.text(record, 'domain', 200)}")


def _preempted(record: Mapping[str, Any]) -> str | None:
    if not record:
        return None
    victims = [v for v in bounds.items(record, "victims", 64) if isinstance(v, Mapping)]
    names = ", ".join(f"{bounds.text(v, 'namespace', 63)}/{bounds.text(v, 'name', 253)} (priority "
                      f"{bounds.integer(v, 'priority')})" for v in victims[:8])
    more = f" and {len(victims) - 8} more" if len(victims) > 8 else ""
    return (f"preempted {len(victims)} workload{'s' if len(victims) != 1 else ''} at "
            f"{bounds.text(record, 'time', 64)} to clear {bounds.text(record, 'domain', 200)}: {names}{more}")

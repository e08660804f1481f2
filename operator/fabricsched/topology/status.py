"""FabricTopology status from a snapshot, the health view and free GPUs: a pure function of ``now``.

The operator only writes what this returns. Times are RFC 3339 UTC strings, as Kubernetes
prints them, and ``records_from_status`` reads them back for ``HealthTracker.restore``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from fabricsched import ids
from fabricsched.api import conditions as conditions_api
from fabricsched.api import rfc3339
from fabricsched.api import topology as api
from fabricsched.topology import conflicts, fabric, health, index


@dataclass(frozen=True)
class StatusOptions:
    max_records: int = 500
    """Cap on ``degraded`` and ``conflicts`` rows: a status must stay well under the API server's
    object size limit; ``degradedCount`` always counts every element."""


iso = rfc3339.format_epoch
parse_iso = rfc3339.parse


def health_record(record: health.ElementHealth) -> api.HealthRecord:
    element = record.element
    return api.HealthRecord(
        kind=element.kind,
        node=element.name if element.kind == "node" else None,
        tier=element.tier,
        domain=element.name if element.kind == "domain" else None,
        rail=element.rail,
        state=api.LinkState(record.state.value),
        capacity=round(record.capacity, 4),
        since=iso(record.since) if record.since is not None else None,
        recovering_since=iso(record.recovering_since) if record.recovering_since is not None else None,
        sources=[api.HealthSource(source=o.source, reason=o.reason, rule=o.rule, value=o.value)
                 for o in record.sources],
    )


def records_from_status(records: Iterable[api.HealthRecord]) -> list[health.ElementHealth]:
    """Status rows back into tracker records (per-source state is not kept: the row's is used)."""
    out = []
    for row in records:
        if row.kind == "node":
            element = health.ElementId.node(row.node or "", row.rail)
        else:
            element = health.ElementId.domain(row.tier or "", row.domain or "", row.rail)
        state = fabric.HealthState(row.state.value)
        sources = tuple(
            health.Observation(element, state, row.capacity, s.source, s.reason, s.rule, s.value)
            for s in row.sources
        )
        out.append(health.ElementHealth(
            element, state, row.capacity,
            parse_iso(row.since) if row.since else None,
            parse_iso(row.recovering_since) if row.recovering_since else None,
            sources,
        ))
    return out


def _element_order(element: health.ElementId) -> tuple[object, ...]:
    return (element.kind, element.tier or "", index.natural_key(element.name), element.rail or -1)


def build_status(
    result: index.BuildResult,
    health_view: Mapping[health.ElementId, health.ElementHealth],
    free: Mapping[ids.NodeName, int],
    now: float,
    *,
    extra_conflicts: Sequence[conflicts.ConflictInfo] = (),
    generation: int | None = None,
    previous_conditions: Sequence[api.Condition] = (),
    options: StatusOptions = StatusOptions(),
) -> api.FabricTopologyStatus:
    """Everything in ``status``: totals, one row per domain, unhealthy elements, conflicts, conditions.

    ``extra_conflicts`` carries the multipleTopologies conflicts the operator's membership finds;
    ``previous_conditions`` keeps ``lastTransitionTime`` of conditions whose status did not change.
    """
    fab = result.fabric
    host_free = {name: min(host.gpus, free.get(name, host.gpus)) for name, host in fab.hosts.items()}
    rows = []
    for domain in sorted(fab.domains.values(), key=lambda d: (d.tier, index.natural_key(d.name))):
        rows.append(api.DomainStatus(
            tier=fab.tiers[domain.tier].name,
            name=domain.name,
            parent=domain.parent,
            nodes=len(domain.hosts),
            gpus=api.GpuCount(total=domain.gpus, free=sum(host_free[h] for h in domain.hosts)),
            health=api.LinkState(domain.state.value),
            uplink_capacity=round(domain.uplink_health, 4),
        ))
    records = sorted(health_view.values(), key=lambda r: _element_order(r.element))
    found = sorted(result.conflicts + tuple(extra_conflicts), key=lambda c: (c.kind, c.tier or "",
                   index.natural_key(c.node or c.domain or "")))
    conds = conditions(len(fab.hosts), len(records), len(found), now, generation, previous_conditions)
    return api.FabricTopologyStatus(
        observed_generation=generation,
        nodes=len(fab.hosts),
        gpus=api.GpuCount(total=sum(h.gpus for h in fab.hosts.values()), free=sum(host_free.values())),
        domains=rows,
        degraded=[health_record(r) for r in records[: options.max_records]],
        degraded_count=len(records),
        conflicts=[c.to_api() for c in found[: options.max_records]],
        conditions=conds,
    )


def conditions(
    hosts: int, degraded: int, conflict_count: int, now: float, generation: int | None,
    previous: Sequence[api.Condition] = (),
) -> list[api.Condition]:
    """Ready (the fabric has hosts) and Degraded (some element is not healthy)."""
    ready: tuple[conditions_api.Status, str, str]
    bad: tuple[conditions_api.Status, str, str]
    if hosts:
        ready = ("True", "FabricBuilt", f"{hosts} nodes in the fabric"
                 + (f"; {conflict_count} conflicts left nodes out" if conflict_count else ""))
    else:
        ready = ("False", "NoNodes", "no selected node with GPUs and every tier label")
    if degraded:
        bad = ("True", "ElementsDegraded", f"{degraded} fabric elements are not healthy")
    else:
        bad = ("False", "AllHealthy", "every fabric element is healthy")
    return [conditions_api.transition(previous, ctype, status, reason, message, now, generation)
            for ctype, (status, reason, message) in (("Ready", ready), ("Degraded", bad))]

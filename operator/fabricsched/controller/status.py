"""FabricTopology status, computed from the state: what ``kubectl get fabrictopology -o yaml`` shows.

Pure function of (topology object, its fabric, its snapshot, now): no I/O, so it is unit-tested
without a cluster and the reporter can compare the result with what is stored and write only
differences. Times are whole seconds (RFC 3339): ``since`` rounds down and ``recoveringSince``
up, so a restarted operator that reads them back never ends a recovery wait early.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.controller import fabrics, state
from fabricsched.topology import fabric, health, index

ConditionStatus = Literal["True", "False", "Unknown"]

Reserved = Callable[[ids.TopologyName], Mapping[ids.NodeName, int]]
"""GPUs per node held by plans not yet bound (the extender's reservations); optional."""


def rfc3339(seconds: float, up: bool = False) -> str:
    whole = math.ceil(seconds) if up else math.floor(seconds)
    return datetime.datetime.fromtimestamp(whole, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def compute(obj: state.TopologyObject, tf: fabrics.TopologyFabric | None,
            snap: state.TopologySnapshot | None, now: float,
            reserved: Mapping[ids.NodeName, int] | None = None) -> dict[str, Any]:
    """The full status to store for ``obj`` (camelCase wire form)."""
    previous = _conditions_by_type(obj.status)
    if tf is None or snap is None:
        reason = obj.invalid or "the spec could not be read"
        status = api.FabricTopologyStatus(
            observed_generation=obj.generation,
            conditions=[
                _condition(previous, "Ready", "False", "InvalidSpec", reason, obj.generation, now),
                _condition(previous, "Degraded", "Unknown", "InvalidSpec",
                           "no fabric while the spec is invalid", obj.generation, now),
            ],
        )
        return status.to_wire()
    held = reserved or {}
    free = {h: max(0, n - held.get(h, 0)) for h, n in snap.free_gpus.items()}
    fab = snap.fabric
    domains = [_domain_row(fab, d, free) for d in _ordered_domains(fab)]
    records = [_record(r) for _, r in sorted(tf.health().items())]
    conflicts = [c.to_api() for c in snap.conflicts]
    total = sum(h.gpus for h in fab.hosts.values())
    conditions = [
        _ready(previous, fab, conflicts, obj.generation, now),
        _degraded(previous, tf.health(), obj.generation, now),
    ]
    status = api.FabricTopologyStatus(
        observed_generation=obj.generation,
        nodes=len(fab.hosts),
        gpus=api.GpuCount(total=total, free=sum(free.values())),
        domains=domains,
        degraded=records,
        degraded_count=len(records),
        conflicts=conflicts,
        conditions=conditions,
    )
    return status.to_wire()


def _ordered_domains(fab: fabric.Fabric) -> list[fabric.Domain]:
    return sorted(fab.domains.values(), key=lambda d: (d.tier, index.natural_key(d.name)))


def _domain_row(fab: fabric.Fabric, domain: fabric.Domain,
                free: Mapping[ids.NodeName, int]) -> api.DomainStatus:
    return api.DomainStatus(
        tier=fab.tiers[domain.tier].name,
        name=domain.name,
        parent=domain.parent,
        nodes=len(domain.hosts),
        gpus=api.GpuCount(total=domain.gpus, free=sum(free.get(h, 0) for h in domain.hosts)),
        health=api.LinkState(domain.state.value),
        uplink_capacity=round(domain.uplink_health, 4),
    )


def _record(rec: health.ElementHealth) -> api.HealthRecord:
    element = rec.element
    return api.HealthRecord(
        kind=element.kind,
        node=element.name if element.kind == "node" else None,
        tier=element.tier if element.kind == "domain" else None,
        domain=element.name if element.kind == "domain" else None,
        rail=element.rail,
        state=api.LinkState(rec.state.value),
        capacity=round(rec.capacity, 4),
        since=rfc3339(rec.since) if rec.since is not None else None,
        recovering_since=rfc3339(rec.recovering_since, up=True) if rec.recovering_since is not None else None,
        sources=[api.HealthSource(source=o.source, reason=o.reason, rule=o.rule, value=o.value)
                 for o in rec.sources],
    )


def _ready(previous: Mapping[str, Mapping[str, Any]], fab: fabric.Fabric, conflicts: list[api.Conflict],
           generation: int, now: float) -> api.Condition:
    if not fab.hosts:
        message = "no node is selected that holds the GPU resource and has every tier label"
        if conflicts:
            message += f" ({len(conflicts)} conflicts)"
        return _condition(previous, "Ready", "False", "NoNodes", message, generation, now)
    leaves = sum(1 for d in fab.domains.values() if d.tier == 0)
    tier0 = fab.tiers[0].name if fab.tiers else "leaf"
    message = f"{len(fab.hosts)} nodes in {leaves} {tier0} domains"
    if conflicts:
        message += f"; {len(conflicts)} conflicts leave nodes out (see status.conflicts)"
    return _condition(previous, "Ready", "True", "FabricBuilt", message, generation, now)


def _degraded(previous: Mapping[str, Mapping[str, Any]],
              records: Mapping[health.ElementId, health.ElementHealth], generation: int,
              now: float) -> api.Condition:
    if not records:
        return _condition(previous, "Degraded", "False", "AllHealthy", "every element is healthy",
                          generation, now)
    down = sum(1 for r in records.values() if r.state is fabric.HealthState.DOWN)
    waiting = sum(1 for r in records.values() if r.recovering_since is not None)
    nodes = sum(1 for e in records if e.kind == "node")
    parts = [f"{nodes} nodes", f"{len(records) - nodes} domains"]
    message = f"{', '.join(parts)} not healthy ({down} down, {waiting} recovering)"
    return _condition(previous, "Degraded", "True", "ElementsDegraded", message, generation, now)


def _condition(previous: Mapping[str, Mapping[str, Any]], type_: str, status: ConditionStatus, reason: str,
               message: str, generation: int, now: float) -> api.Condition:
    """A condition whose lastTransitionTime is kept while its status stays the same."""
    before = previous.get(type_)
    if before is not None and before.get("status") == status and before.get("lastTransitionTime"):
        since = str(before["lastTransitionTime"])
    else:
        since = rfc3339(now)
    return api.Condition(type=type_, status=status, reason=reason, message=message,
                         last_transition_time=since, observed_generation=generation)


def _conditions_by_type(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in status.get("conditions") or () if isinstance(c, Mapping)}

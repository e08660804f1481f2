"""A book entry as its FabricPlacement object, and back: what a user reads and what a restart
restores from.

Pure: ``manifest_of`` and ``entry_of`` convert between a book entry and the object (the pydantic
models of ``api.placement`` check both ways); ``object_name`` names the object. Writing it is the
writer's (``extender.kube.writer``).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

from fabricsched import ids
from fabricsched.api import conditions as api_conditions
from fabricsched.api import placement as api
from fabricsched.api import rfc3339
from fabricsched.extender.book import preempted, reservations
from fabricsched.placement import request

MAX_NAME = 253
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NOT_NAME = re.compile(r"[^a-z0-9]+")
HASH_DIGITS = 8


class Unreadable(ValueError):
    """A FabricPlacement object that does not describe a plan (hand-edited, or another version)."""


def object_name(entry: reservations.Entry) -> str:
    """The object's name, one per gang: the gang's name when it is a valid object name (a Job's
    name always is); any other (a label value such as ``llama_70b`` or ``Dup``) becomes its
    sanitised form plus 8 hex digits of a hash of the gang key, so ``Dup`` and ``dup`` get two
    objects. ``spec.gang`` keeps the name as given."""
    if len(entry.name) <= MAX_NAME and _DNS_SUBDOMAIN.fullmatch(entry.name):
        return entry.name
    digest = hashlib.sha256(entry.key.encode()).hexdigest()[:HASH_DIGITS]
    stem = _NOT_NAME.sub("-", entry.name.lower()).strip("-")[: MAX_NAME - HASH_DIGITS - 1].rstrip("-")
    return f"{stem or 'gang'}-{digest}"


def manifest_of(
    entry: reservations.Entry, conditions: Sequence[api_conditions.Condition] | None = None
) -> dict[str, Any]:
    """The whole object: metadata (owner Job), spec (the plan) and status (its progress);
    ``conditions`` default to the entry's own (``placement_conditions`` makes new ones)."""
    spec = api.FabricPlacementSpec(
        gang=entry.name,
        job_uid=entry.job_uid,  # the UID part of the gang key: restore derives the same key
        size=entry.size,
        gpus_per_pod=entry.gpus_per_pod,
        tier=api.PlacementTier(
            required=entry.tier if entry.required else None,
            preferred=entry.preferred_tier if entry.required else entry.tier or _lowest(entry),
        ),
        slices=None if entry.slices is None else api.PlacementSlices(
            size=entry.slices.pods, tier=entry.slices.tier, domains=list(entry.slice_domains),
            policy=api.TierPolicy.REQUIRED if entry.slices.required else api.TierPolicy.PREFERRED,
        ),
        traffic=entry.traffic,
        topology=entry.topology,
        domains={tier: list(names) for tier, names in entry.domains.items()},
        ranks=[api.RankAssignment(rank=r, node=n) for r, n in enumerate(entry.ranks) if n is not None],
        priority=entry.priority or None,
    )
    status = api.FabricPlacementStatus(
        phase=entry.phase,
        expires_at=(
            rfc3339.format_epoch(entry.expires_at) if entry.phase == api.PlacementPhase.RESERVED else None
        ),
        bound_ranks=sorted(entry.bound),
        comm_slowdown=_finite(entry.comm_slowdown),
        comm_slowdown_at_placement=(
            _finite(entry.comm_slowdown_at_placement) if entry.comm_slowdown_at_placement else None
        ),
        degraded_path=entry.degraded_path,
        preferred_tier_held=_preferred_held(entry),
        slices_held=bool(entry.slice_domains) if entry.slices is not None and entry.domains else None,
        unhealthy_path=list(entry.unhealthy[: api.MAX_UNHEALTHY]),
        unhealthy_path_count=entry.unhealthy_count,
        conditions=list(entry.conditions if conditions is None else conditions),
        reasons=list(entry.reasons),
        preemption=_hold_wire(entry.preemption),
        preempted_by=_by_wire(entry.preempted_by),
    )
    metadata: dict[str, Any] = {"name": object_name(entry), "namespace": entry.namespace}
    if entry.job_name and entry.job_uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": entry.job_name,
                "uid": entry.job_uid,
                "controller": False,
                "blockOwnerDeletion": False,
            }
        ]
    obj = api.FabricPlacement(metadata=metadata, spec=spec, status=status)
    return obj.to_wire()


def entry_of(manifest: Mapping[str, Any]) -> reservations.Entry:
    """The book entry an object describes; raises ``Unreadable`` for one that describes none."""
    try:
        obj = api.FabricPlacement.model_validate(
            {k: v for k, v in manifest.items() if k in ("apiVersion", "kind", "metadata", "spec", "status")}
        )
        expires_at = rfc3339.parse(obj.status.expires_at) if obj.status and obj.status.expires_at else 0.0
        hold = _hold_of(obj.status.preemption if obj.status else None)
        by = _by_of(obj.status.preempted_by if obj.status else None)
    except (pydantic.ValidationError, ValueError) as e:
        name = str((manifest.get("metadata") or {}).get("name"))[:MAX_NAME]
        raise Unreadable(f"FabricPlacement {name}: {_first_line(e)}") from e
    spec, status = obj.spec, obj.status or api.FabricPlacementStatus()
    namespace = str(obj.metadata.get("namespace") or "default")
    owner = next((r for r in obj.metadata.get("ownerReferences") or () if r.get("kind") == "Job"), None)
    job_name = str(owner["name"]) if owner else None
    tier, required, preferred = spec.tier.constraint()  # either shape: required/preferred, or name/policy
    ranks: list[ids.NodeName | None] = [None] * spec.size
    for assignment in spec.ranks:
        ranks[assignment.rank] = ids.NodeName(assignment.node)
    return reservations.Entry(
        key=ids.gang_key(namespace, spec.gang, spec.job_uid),
        namespace=namespace,
        name=spec.gang,
        job_uid=spec.job_uid,
        job_name=job_name,
        size=spec.size,
        gpus_per_pod=spec.gpus_per_pod,
        topology=ids.TopologyName(spec.topology),
        # A default (lowest) preferred tier is written out by name; it reads back the same.
        tier=tier,
        required=required,
        preferred_tier=preferred,
        slices=None if spec.slices is None else request.Slices(
            spec.slices.size, spec.slices.tier, spec.slices.policy == api.TierPolicy.REQUIRED),
        slice_domains=tuple(ids.DomainName(n) for n in spec.slices.domains) if spec.slices else (),
        ranks=tuple(ranks),
        # Bound ranks are re-derived from the pods; the status only tells which were bound.
        bound={},
        expires_at=expires_at,
        phase=status.phase,
        domains={tier: tuple(ids.DomainName(n) for n in names) for tier, names in spec.domains.items()},
        comm_slowdown=status.comm_slowdown or 1.0,
        comm_slowdown_at_placement=status.comm_slowdown_at_placement,
        degraded_path=status.degraded_path,
        unhealthy=tuple(status.unhealthy_path or ()),
        unhealthy_count=status.unhealthy_path_count or 0,
        conditions=tuple(status.conditions or ()),
        reasons=tuple(status.reasons),
        priority=spec.priority or 0,
        preemption=hold,
        preempted_by=by,
        traffic=spec.traffic,
    )


def _preferred_held(entry: reservations.Entry) -> bool | None:
    """Whether the plan is inside one domain of the lower preferred tier (None: none, or no plan)."""
    if not entry.domains or not entry.required or entry.preferred_tier is None:
        return None
    return len(entry.domains.get(entry.preferred_tier, ())) <= 1
def _hold_wire(hold: preempted.PreemptionHold | None) -> api.PlacementPreemption | None:
    if hold is None:
        return None
    return api.PlacementPreemption(
        victims=[api.PreemptionVictim(namespace=v.namespace, name=v.name, priority=v.priority, gpus=v.gpus,
                                      pods=list(v.pod_uids[: api.MAX_VICTIM_PODS]))
                 for v in hold.victims[: api.MAX_VICTIMS]],
        domain=hold.domain,
        time=rfc3339.format_epoch(hold.at),
        cleared_at=rfc3339.format_epoch(hold.cleared_at) if hold.cleared_at is not None else None,
    )


def _hold_of(wire: api.PlacementPreemption | None) -> preempted.PreemptionHold | None:
    """Raises ValueError for a time that does not parse (the caller makes it ``Unreadable``)."""
    if wire is None:
        return None
    victims = tuple(
        # A victim's key needs its UID part, which the object does not keep: only its pods
        # (by UID) matter after a restart, and its name for the evidence.
        preempted.EvictedWorkload(ids.gang_key(v.namespace, v.name, ""), v.namespace, v.name, v.priority,
                                  v.gpus, tuple(v.pods))
        for v in wire.victims
    )
    cleared = rfc3339.parse(wire.cleared_at) if wire.cleared_at else None
    return preempted.PreemptionHold(victims, wire.domain, rfc3339.parse(wire.time), cleared)


def _by_wire(record: preempted.PreemptedRecord | None) -> api.PreemptedBy | None:
    if record is None:
        return None
    return api.PreemptedBy(preemptor=record.preemptor, priority=record.priority, domain=record.domain,
                           time=rfc3339.format_epoch(record.at))


def _by_of(wire: api.PreemptedBy | None) -> preempted.PreemptedRecord | None:
    if wire is None:
        return None
    return preempted.PreemptedRecord(wire.preemptor, wire.priority, wire.domain, rfc3339.parse(wire.time))


def _finite(slowdown: float) -> float:
    # A path over a down element has an infinite slowdown; JSON has no infinity.
    return slowdown if 1 <= slowdown < math.inf else (1.0 if slowdown < 1 else 1e9)


def _lowest(entry: reservations.Entry) -> str:
    # The preferred default is the lowest tier; the first domains key is the lowest tier used.
    return next(iter(entry.domains), "leaf")


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0][:200] if str(e) else type(e).__name__

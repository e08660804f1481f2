"""The workload kinds ``explain`` knows: where to read them and how to find their pods.

Pure data and matching, no I/O: ``reader`` fetches, ``report`` matches FabricPlacements to the
workload. A gang's FabricPlacement names its workload by an owner reference (Jobs), by
``spec.jobUID`` (the owner's UID in the gang key), or by ``spec.gang`` (the workload's name,
plus the group index for a LeaderWorkerSet).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fabricsched.explain import bounds
from fabricsched.gangs import kinds

WorkloadKind = kinds.WorkloadKind
KINDS: tuple[WorkloadKind, ...] = tuple(k for k in kinds.KINDS if k.pod_label)
"""Tried in this order for a NAME that is no FabricPlacement; the first that exists wins."""


def kind_named(kind: str) -> WorkloadKind | None:
    return next((k for k in KINDS if k.kind == kind), None)


def belongs_to(placement: Mapping[str, Any], kind: str, name: str, uid: str) -> bool:
    """True when the FabricPlacement is (one of) the workload's gang(s)."""
    metadata = bounds.mapping(placement, "metadata")
    for owner in bounds.items(metadata, "ownerReferences", 16):
        if isinstance(owner, Mapping) and uid and owner.get("uid") == uid:
            return True
    spec = bounds.mapping(placement, "spec")
    if uid and spec.get("jobUID") == uid:
        return True
    gang = spec.get("gang")
    if not isinstance(gang, str):
        return False
    if gang == name:
        return True
    # One gang per LeaderWorkerSet group: NAME-<group index>.
    suffix = gang.removeprefix(f"{name}-")
    return kind == "LeaderWorkerSet" and suffix != gang and suffix.isascii() and suffix.isdigit()


def owner_of(placement: Mapping[str, Any]) -> tuple[WorkloadKind, str] | None:
    """The known workload kind and name a FabricPlacement's owner reference names."""
    metadata = bounds.mapping(placement, "metadata")
    for owner in bounds.items(metadata, "ownerReferences", 16):
        if not isinstance(owner, Mapping):
            continue
        kind = kind_named(str(owner.get("kind")))
        name = owner.get("name")
        if kind is not None and isinstance(name, str) and name:
            return kind, name
    return None

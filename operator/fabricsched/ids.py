"""Names that must not mix: a node is not a domain, a domain is not a gang."""

from __future__ import annotations

from typing import NewType

NodeName = NewType("NodeName", str)
"""A Kubernetes Node name (one host)."""

DomainName = NewType("DomainName", str)
"""A switch group at one tier, named by the value of that tier's node label (e.g. leaf ``l07``)."""

TierName = NewType("TierName", str)
"""A fabric level, as named in ``spec.tiers[].name`` (e.g. ``leaf``, ``spine``)."""

GangKey = NewType("GangKey", str)
"""``namespace/name@jobUID``: one training job's pods, placed all-or-nothing."""

TopologyName = NewType("TopologyName", str)
"""A FabricTopology object's name (the objects are cluster-scoped)."""


def gang_key(namespace: str, name: str, uid: str = "") -> GangKey:
    """The key of a gang; a recreated Job with the same name has a new UID, hence a new key."""
    return GangKey(f"{namespace}/{name}@{uid}" if uid else f"{namespace}/{name}")

"""Labelling conflicts: what the fabric builder refuses to guess, reported instead.

A node without a tier label, a domain wired under two parents, a node two FabricTopologies
both claim: each becomes a ``ConflictInfo`` (shown in status) and the nodes concerned are left
out of the fabric, so no gang is placed on a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fabricsched.api import topology as api

ConflictKind = Literal["missingTierLabel", "multipleParents", "multipleTopologies"]


@dataclass(frozen=True, order=True)
class ConflictInfo:
    kind: ConflictKind
    message: str
    node: str | None = None
    tier: str | None = None
    domain: str | None = None

    def to_api(self) -> api.TopologyConflict:
        return api.TopologyConflict(kind=self.kind, message=self.message, node=self.node, tier=self.tier,
                            domain=self.domain)


def missing_tier_label(node: str, tiers: list[tuple[str, str]]) -> ConflictInfo:
    """``tiers``: (tier name, node label) pairs the node lacks, lowest first."""
    labels = ", ".join(f"{label} ({name})" for name, label in tiers)
    return ConflictInfo("missingTierLabel", f"node {node} lacks tier label {labels}; left out of the fabric",
                        node=node, tier=tiers[0][0])


def multiple_parents(tier: str, domain: str, parent_tier: str, parents: dict[str, int]) -> ConflictInfo:
    """``parents``: parent domain -> how many of the domain's nodes name it."""
    listed = ", ".join(f"{p} ({n} nodes)" for p, n in sorted(parents.items()))
    total = sum(parents.values())
    return ConflictInfo(
        "multipleParents",
        f"{tier} {domain} is under {len(parents)} {parent_tier} domains: {listed}; "
        f"its {total} nodes are left out of the fabric",
        tier=tier, domain=domain,
    )


def multiple_topologies(node: str, topologies: list[str]) -> ConflictInfo:
    return ConflictInfo(
        "multipleTopologies",
        f"node {node} is selected by FabricTopologies {', '.join(sorted(topologies))}; it belongs to none",
        node=node,
    )

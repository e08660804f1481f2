"""FabricTopology (fabricsched.io/v1alpha1, cluster-scoped): spec and status models.

The CRD in ``crds/`` is generated from these models (``fabricsched.api.crd``), so the
two cannot drift. Field docstrings become the CRD's descriptions (``kubectl explain``).
"""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import Field

from fabricsched.api.base import WireModel

GROUP = "fabricsched.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "FabricTopology"
PLURAL = "fabrictopologies"

HEALTH_LABEL = "fabricsched.io/fabric-health"
"""Node label an admin or a node agent sets to ``degraded`` or ``down``."""


class LinkState(str, enum.Enum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DOWN = "down"


class LabelSelectorRequirement(WireModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class LabelSelector(WireModel):
    """A standard Kubernetes label selector; empty selects every node."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)


class TierSpec(WireModel):
    """One fabric level, lowest (closest to the hosts) first."""

    name: str = Field(min_length=1, max_length=63, description="Tier name, e.g. leaf, spine, core.")
    node_label: str = Field(
        min_length=1,
        max_length=317,
        description="Node label whose value names the host's switch domain at this tier.",
    )
    oversubscription: float = Field(
        default=1.0,
        gt=0,
        description="Downlink over uplink bandwidth of a domain of this tier (2.0 means 2:1).",
    )


class HealthSpec(WireModel):
    """Where host and link health comes from, and how fast it recovers."""

    node_conditions: list[str] = Field(
        default_factory=lambda: ["FabricLinkDegraded"],
        description="Node condition types that mark the host's fabric link degraded when True.",
    )
    degraded_capacity: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Capacity fraction of a degraded element that has no measured value.",
    )
    recover_after_seconds: int = Field(
        default=300,
        ge=0,
        description="Seconds without a new worsening before an observed element counts as healthy again.",
    )


class LinkOverride(WireModel):
    """An admin's statement about a switch group's uplinks ("cordon a switch/uplink")."""

    tier: str = Field(min_length=1, description="Tier name of the domain.")
    domain: str = Field(min_length=1, description="Domain name (the tier label's value).")
    state: LinkState = Field(description="healthy, degraded or down.")
    capacity: float | None = Field(
        default=None, ge=0, le=1, description="Remaining capacity fraction; default from spec.health."
    )
    reason: str = Field(default="", max_length=1024, description="Free text shown in status and Events.")
    rail: int | None = Field(default=None, ge=0, description="Rail index on a rail-optimized fabric.")


class FabricTopologySpec(WireModel):
    """What the admin declares: which nodes form the fabric, its tiers and health sources."""

    node_selector: LabelSelector = Field(
        default_factory=LabelSelector, description="Nodes of this fabric; empty selects all nodes."
    )
    gpu_resource: str = Field(
        default="nvidia.com/gpu", min_length=1, description="Extended resource that counts GPUs."
    )
    tiers: list[TierSpec] = Field(
        min_length=1, max_length=8, description="Fabric levels, lowest (closest to the hosts) first."
    )
    rails: int = Field(
        default=1, ge=1, le=64, description="NICs per host on separate rails; >1 = rail-optimized."
    )
    rail_devices: list[str] = Field(
        default_factory=list, description="With rails > 1: NIC device names in rail order."
    )
    gpu_bandwidth_gbps: float = Field(
        default=400.0, gt=0, description="Per-GPU NIC bandwidth in Gbit/s, used by the capacity model."
    )
    health: HealthSpec = Field(default_factory=HealthSpec, description="Health sources and hysteresis.")
    links: list[LinkOverride] = Field(
        default_factory=list, description="Admin overrides of switch-domain uplink health."
    )


class GpuCount(WireModel):
    total: int = 0
    free: int = 0


class DomainStatus(WireModel):
    tier: str
    name: str
    parent: str | None = None
    nodes: int
    gpus: GpuCount
    health: LinkState = LinkState.HEALTHY
    uplink_capacity: float = 1.0


class HealthSource(WireModel):
    source: Literal["spec.links", "condition", "label", "prometheus", "event"]
    reason: str = ""
    rule: str | None = None
    value: float | None = None


class HealthRecord(WireModel):
    """One element that is not healthy (or is waiting out its recovery)."""

    kind: Literal["node", "domain"]
    node: str | None = None
    tier: str | None = None
    domain: str | None = None
    rail: int | None = None
    state: LinkState
    capacity: float
    since: str | None = None
    recovering_since: str | None = None
    sources: list[HealthSource] = Field(default_factory=list)


class Conflict(WireModel):
    kind: Literal["missingTierLabel", "multipleParents", "multipleTopologies"]
    message: str
    node: str | None = None
    tier: str | None = None
    domain: str | None = None


class Condition(WireModel):
    """A standard metav1.Condition."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str
    observed_generation: int | None = None


class FabricTopologyStatus(WireModel):
    observed_generation: int | None = None
    nodes: int = 0
    gpus: GpuCount = Field(default_factory=GpuCount)
    domains: list[DomainStatus] = Field(default_factory=list)
    degraded: list[HealthRecord] = Field(default_factory=list)
    degraded_count: int = 0
    conflicts: list[Conflict] = Field(default_factory=list)
    conditions: list[Condition] = Field(default_factory=list)

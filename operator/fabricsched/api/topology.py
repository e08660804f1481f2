"""FabricTopology (fabricsched.io/v1alpha1, cluster-scoped): spec and status models.

The CRD in ``crds/`` is generated from these models (``fabricsched.api.crd``), so the
two cannot drift. Field descriptions become the CRD's descriptions (``kubectl explain``);
cross-field rules are enforced twice, by the pydantic validators below (the simulator and
the operator read manifests through them) and by the same rules in CEL in the CRD.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from fabricsched.api import openapi
from fabricsched.api.base import WireModel
from fabricsched.api.conditions import Condition as Condition  # re-exported: part of the status
from fabricsched.api.dra import DraGpuSpec as DraGpuSpec  # re-exported: part of the spec
from fabricsched.api.health import (
    MAX_TELEMETRY_RULES as MAX_TELEMETRY_RULES,
)
from fabricsched.api.health import (  # re-exported: callers read spec.health through this module
    Comparison as Comparison,
)
from fabricsched.api.health import (
    DefaultRulesSpec as DefaultRulesSpec,
)
from fabricsched.api.health import (
    DraHealthSpec as DraHealthSpec,
)
from fabricsched.api.health import (
    HealthSpec as HealthSpec,
)
from fabricsched.api.health import (
    PrometheusHealthSpec as PrometheusHealthSpec,
)
from fabricsched.api.health import (
    TelemetryRule as TelemetryRule,
)

GROUP = "fabricsched.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "FabricTopology"
PLURAL = "fabrictopologies"

HEALTH_LABEL = "fabricsched.io/fabric-health"
"""Node label an admin or a node agent sets to ``degraded`` or ``down``."""

NVLINK_CLIQUE_LABEL = "nvidia.com/gpu.clique"
"""GPU feature discovery's NVLink domain of a host (``<cluster UUID>.<clique id>``): hosts with the
same value share one NVLink fabric (an NVL72 rack). Usable as the lowest tier's nodeLabel."""

MAX_LINKS = 1024
"""Bound on spec.links: keeps the CEL cost estimate of the link rules within the API server's budget."""

_Name = Annotated[str, Field(min_length=1, max_length=63)]
"""A tier or domain name: a label value (at most 63 characters)."""


class LinkState(enum.StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DOWN = "down"


class TrafficPattern(enum.StrEnum):
    """How a gang's pods talk, for the capacity model (docs/model.md)."""

    ALL_TO_ALL = "all-to-all"
    """Every pod sends to every other (expert-parallel MoE): the worst case for a fabric."""
    RING = "ring"
    """Rank i sends to rank i + 1, the last to the first (ring all-reduce, reduce-scatter and
    all-gather of data-parallel, FSDP and ZeRO training)."""


class LabelSelectorRequirement(WireModel):
    """A selector requirement: a label key, an operator and values."""

    key: str = Field(min_length=1, max_length=317, description="The label key the selector applies to.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="In, NotIn, Exists or DoesNotExist."
    )
    values: list[str] = Field(
        default_factory=list,
        description="Label values; non-empty for In and NotIn, empty for Exists and DoesNotExist.",
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )


class LabelSelector(WireModel):
    """A standard Kubernetes label selector; empty selects every node."""

    match_labels: dict[str, str] = Field(
        default_factory=dict, description="Labels a node must carry, with these exact values."
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list,
        description="Requirements a node must meet, all of them (ANDed with matchLabels).",
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )


class TierSpec(WireModel):
    """One fabric level, lowest (closest to the hosts) first."""

    name: str = Field(
        min_length=1,
        max_length=63,
        description="Tier name, e.g. leaf, spine, core; unique in the topology. Used in status, "
        "spec.links, the fabricsched.io/required-tier and preferred-tier pod annotations.",
    )
    node_label: str = Field(
        min_length=1,
        max_length=317,
        description="Node label whose value names the host's switch domain at this tier "
        "(e.g. fabric.topograph.run/tier-0 = l07); unique in the topology. On a rail-optimized "
        "fabric the lowest tier's label names the scalable unit.",
    )
    oversubscription: float = Field(
        default=1.0,
        gt=0,
        description="Downlink over uplink bandwidth of a domain of this tier (2.0 means 2:1); "
        "traffic that leaves the domain shares the smaller uplink bandwidth. Greater than 0.",
    )


class LinkOverride(WireModel):
    """An admin's statement about a switch group's uplinks ("cordon a switch/uplink")."""

    tier: str = Field(
        min_length=1, max_length=63, description="Tier name of the domain; one of spec.tiers[].name."
    )
    domain: str = Field(
        min_length=1, max_length=63, description="Domain name (the tier label's value), e.g. l07."
    )
    state: LinkState = Field(description="healthy, degraded or down. Down uplinks are never used.")
    capacity: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Remaining capacity fraction of the uplinks; default from spec.health.degradedCapacity "
        "(degraded), 0 (down) or 1 (healthy).",
    )
    reason: str = Field(default="", max_length=1024, description="Free text shown in status and Events.")
    rail: int | None = Field(
        default=None, ge=0, description="Rail index on a rail-optimized fabric; unset means every rail."
    )


class FabricTopologySpec(WireModel):
    """What the admin declares: which nodes form the fabric, its tiers and health sources."""

    model_config = ConfigDict(
        json_schema_extra=openapi.extensions(
            validations=[
                openapi.cel(
                    "!has(self.railDevices) || size(self.railDevices) == 0"
                    " || size(self.railDevices) == self.rails",
                    "railDevices must name one device per rail (size == rails) when set",
                    field_path=".railDevices",
                    reason="FieldValueInvalid",
                ),
                openapi.cel(
                    "!has(self.links) || self.links.all(l, self.tiers.exists(t, t.name == l.tier))",
                    "every links[].tier must name a tier declared in spec.tiers",
                    field_path=".links",
                    reason="FieldValueInvalid",
                ),
            ]
        )
    )

    node_selector: LabelSelector = Field(
        default_factory=LabelSelector,
        description="Nodes of this fabric (a label selector); empty selects all nodes. Nodes without "
        "the GPU resource are never part of a fabric.",
    )
    gpu_resource: str = Field(
        default="nvidia.com/gpu",
        min_length=1,
        max_length=317,
        description="Extended resource that counts GPUs.",
    )
    tiers: list[TierSpec] = Field(
        min_length=1,
        max_length=8,
        description="Fabric levels, lowest (closest to the hosts) first: e.g. leaf (or scalable unit), "
        "spine, core. Each names the node label whose value is the host's switch domain at that tier. "
        "1 to 8 entries; names and node labels unique.",
        json_schema_extra=openapi.extensions(
            list_type="atomic",
            validations=[
                openapi.cel(
                    "self.all(t, self.exists_one(u, u.name == t.name))", "tier names must be unique"
                ),
                openapi.cel(
                    "self.all(t, self.exists_one(u, u.nodeLabel == t.nodeLabel))",
                    "tier nodeLabels must be unique",
                ),
            ],
        ),
    )
    rails: int = Field(
        default=1, ge=1, le=64, description="NICs per host on separate rails; >1 = rail-optimized."
    )
    rail_devices: list[_Name] = Field(
        default_factory=list,
        max_length=64,
        description="With rails > 1: NIC device names in rail order, e.g. [mlx5_0, ..., mlx5_7]; "
        "empty, or exactly one per rail.",
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )
    gpu_bandwidth_gbps: float = Field(
        default=400.0, gt=0, description="Per-GPU NIC bandwidth in Gbit/s, used by the capacity model."
    )
    traffic: TrafficPattern | None = Field(
        default=None,
        description="The traffic pattern the capacity model assumes for a gang whose pods do not name one "
        "(annotation fabricsched.io/traffic): all-to-all or ring. Unset: all-to-all.",
    )
    health: HealthSpec = Field(default_factory=HealthSpec, description="Health sources and hysteresis.")
    links: list[LinkOverride] = Field(
        default_factory=list,
        max_length=MAX_LINKS,
        description="Admin overrides of switch-domain uplink health; applied at once, both ways.",
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )
    dra_gpus: DraGpuSpec | None = Field(
        default=None,
        description="GPUs published as DRA devices (ResourceSlices): a node without the gpuResource "
        "allocatable counts its GPU devices instead; pods count the GPUs their ResourceClaims ask "
        "for. Absent: GPUs come from the allocatable extended resource only (docs/dra.md).",
    )

    @field_validator("tiers")
    @classmethod
    def _unique_tiers(cls, tiers: list[TierSpec]) -> list[TierSpec]:
        # Same rules as the CEL on spec.tiers, for manifests that never meet an API server.
        columns = (("names", [t.name for t in tiers]), ("nodeLabels", [t.node_label for t in tiers]))
        for what, values in columns:
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"tier {what} must be unique; repeated: {', '.join(repeated)}")
        return tiers

    @model_validator(mode="after")
    def _consistent(self) -> FabricTopologySpec:
        if self.rail_devices and len(self.rail_devices) != self.rails:
            raise ValueError(
                f"railDevices must name one device per rail (size == rails) when set: "
                f"{len(self.rail_devices)} devices, {self.rails} rails"
            )
        declared = {t.name for t in self.tiers}
        unknown = sorted({link.tier for link in self.links} - declared)
        if unknown:
            raise ValueError(
                f"every links[].tier must name a tier declared in spec.tiers; unknown: {', '.join(unknown)}"
            )
        return self


class GpuCount(WireModel):
    """GPUs (the spec.gpuResource allocatable) of a set of hosts."""

    total: int = Field(default=0, ge=0, description="Allocatable GPUs.")
    free: int = Field(
        default=0, ge=0, description="Allocatable GPUs neither used by pods nor reserved by plans."
    )


class DomainStatus(WireModel):
    """One switch domain of one tier."""

    tier: str = Field(description="Tier name.")
    name: str = Field(description="Domain name (the tier label's value).")
    parent: str | None = Field(default=None, description="The domain one tier up; unset at the top tier.")
    nodes: int = Field(ge=0, description="Hosts below the domain.")
    gpus: GpuCount = Field(description="GPUs below the domain.")
    health: LinkState = Field(default=LinkState.HEALTHY, description="State of the domain's uplinks.")
    uplink_capacity: float = Field(
        default=1.0, ge=0, le=1, description="Capacity fraction of the domain's uplinks (1 healthy, 0 down)."
    )


class HealthSource(WireModel):
    """One piece of evidence about an element's health."""

    source: Literal["spec.links", "condition", "label", "prometheus", "dra", "event"] = Field(
        description="Where it came from: spec.links, condition, label, prometheus, dra (device "
        "taints) or event (simulator)."
    )
    reason: str = Field(default="", description="Human-readable evidence.")
    rule: str | None = Field(default=None, description="The telemetry rule (source prometheus).")
    value: float | None = Field(default=None, description="The measured value (source prometheus).")


MAX_AFFECTED_GANGS = 50


class HealthRecord(WireModel):
    """One element that is not healthy (or is waiting out its recovery)."""

    kind: Literal["node", "domain"] = Field(
        description="node: a host's fabric access links; domain: a switch group's uplinks."
    )
    node: str | None = Field(default=None, description="Node name (kind node).")
    tier: str | None = Field(default=None, description="Tier name (kind domain).")
    domain: str | None = Field(default=None, description="Domain name (kind domain).")
    rail: int | None = Field(default=None, ge=0, description="Rail index on a rail-optimized fabric.")
    state: LinkState = Field(description="Merged state: the worst of all sources.")
    capacity: float = Field(ge=0, le=1, description="Merged capacity fraction: the lowest of all sources.")
    since: str | None = Field(default=None, description="When the element left healthy (RFC 3339).")
    recovering_since: str | None = Field(
        default=None,
        description="Start of the recovery wait (RFC 3339): healthy again after spec.health."
        "recoverAfterSeconds without a new worsening.",
    )
    sources: list[HealthSource] = Field(
        default_factory=list,
        description="Every source that reports the element, merged into state and capacity.",
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )
    affected_gangs: list[Annotated[str, Field(max_length=507)]] | None = Field(
        default=None,
        max_length=MAX_AFFECTED_GANGS,
        description="Gangs whose path crosses the element, as namespace/name of their FabricPlacement; "
        "at most 50 (affectedGangCount counts them all).",
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )
    affected_gang_count: int | None = Field(
        default=None, ge=0, description="How many gangs' paths cross the element."
    )


class TopologyConflict(WireModel):
    """A node or domain the operator could not fit into the declared fabric."""

    kind: Literal["missingTierLabel", "multipleParents", "multipleTopologies"] = Field(
        description="missingTierLabel, multipleParents or multipleTopologies."
    )
    message: str = Field(description="What is wrong and how to fix it.")
    node: str | None = Field(default=None, description="The node concerned, if any.")
    tier: str | None = Field(default=None, description="The tier concerned, if any.")
    domain: str | None = Field(default=None, description="The domain concerned, if any.")


class FabricTopologyStatus(WireModel):
    """What the operator observes: capacity, domains, degraded elements, conflicts."""

    observed_generation: int | None = Field(
        default=None, description="metadata.generation the status reflects."
    )
    nodes: int = Field(default=0, ge=0, description="Hosts in the fabric (selected, with GPUs).")
    gpus: GpuCount = Field(default_factory=GpuCount, description="GPUs in the fabric.")
    domains: list[DomainStatus] = Field(
        default_factory=list,
        description="One row per domain of every tier.",
        # Atomic: the operator writes the whole status at once. As a map keyed by tier and name,
        # the API server tracked every row's fields in managedFields (135 KB at 10,000 nodes)
        # and spent about 360 ms of CPU on each status write.
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )
    degraded: list[HealthRecord] = Field(
        default_factory=list,
        description="Every element that is not healthy, or waiting out its recovery.",
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )
    degraded_count: int = Field(default=0, ge=0, description="Number of entries in degraded.")
    conflicts: list[TopologyConflict] = Field(
        default_factory=list,
        description="Nodes lacking a tier label, domains under two parents, "
        "nodes selected by two topologies.",
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready and Degraded.",
        json_schema_extra=openapi.extensions(list_type="map", list_map_keys=["type"]),
    )


class FabricTopology(WireModel):
    """A whole FabricTopology object, as a manifest or a watch event carries it."""

    api_version: Literal["fabricsched.io/v1alpha1"] = "fabricsched.io/v1alpha1"
    kind: Literal["FabricTopology"] = "FabricTopology"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: FabricTopologySpec
    status: FabricTopologyStatus | None = None

"""FabricPlacement (fabricsched.io/v1alpha1, namespaced): one gang's plan and its progress.

One object per gang, named after the gang, owned by the Job when there is one (so it is
garbage-collected with it). It is the plan made inspectable with kubectl, and what the
reservations are rebuilt from after a restart. The CRD is generated from these models
(``fabricsched.api.crd``).
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from fabricsched.api import openapi, topology
from fabricsched.api.base import WireModel
from fabricsched.api.conditions import Condition

GROUP = topology.GROUP
VERSION = topology.VERSION
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "FabricPlacement"
TrafficPattern = topology.TrafficPattern
PLURAL = "fabricplacements"

MAX_UNHEALTHY = 32
"""Bound on ``status.unhealthyPath``: the worst elements first; ``unhealthyPathCount`` says how
many there are in all."""
MAX_SOURCES = 4

MAX_RANKS = 16384
"""Bound on a gang's pods: keeps the object well inside the API server's size limit and the
CEL cost estimate of the rank rules within budget."""

_Name = Annotated[str, Field(min_length=1, max_length=253)]
"""A node or domain name."""


class TierPolicy(enum.StrEnum):
    REQUIRED = "required"
    """The whole gang inside one domain of the tier, or wait (``fabricsched.io/required-tier``)."""
    PREFERRED = "preferred"
    """As low as possible, fewest domains (``fabricsched.io/preferred-tier``, the default)."""


class PlacementPhase(enum.StrEnum):
    PENDING = "Pending"
    """The gang waits for a plan; the Reserved condition says why (no capacity is held)."""
    RESERVED = "Reserved"
    """Capacity held for every rank; pods are binding one at a time."""
    BOUND = "Bound"
    """Every rank's pod is bound to its node."""
    RELEASED = "Released"
    """The Job finished or was deleted, or all its pods ended: the capacity is free again."""
    EXPIRED = "Expired"
    """The gang did not bind in time; the unbound ranks' capacity was released."""


class PlacementTier(WireModel):
    """The gang's tier constraints, from its pods' annotations (or its PodGroup's topology key).

    Written as ``required`` and/or ``preferred`` (a required tier and a lower preferred one may
    be set together; neither: as low as possible). Objects written before held one tier as
    ``name`` + ``policy``; they are still read (``policy`` says which of the two it was).
    """

    required: str | None = Field(
        default=None, min_length=1, max_length=63,
        description="The whole gang inside one domain of this tier (spec.tiers[].name), or wait.",
    )
    preferred: str | None = Field(
        default=None, min_length=1, max_length=63,
        description="As low as possible, inside one domain of this tier if it can; below required when "
        "both are set. status.preferredTierHeld says whether the plan kept it.",
    )
    name: str | None = Field(
        default=None, min_length=1, max_length=63,
        description="Deprecated (the shape before required/preferred; read, not written): the tier.",
    )
    policy: TierPolicy | None = Field(
        default=None, description="Deprecated, with name: whether name is required or preferred.",
    )

    def constraint(self) -> tuple[str | None, bool, str | None]:
        """(tier, required, lower preferred tier) from either shape."""
        if self.name is not None and self.required is None and self.preferred is None:
            return self.name, self.policy == TierPolicy.REQUIRED, None
        if self.required is not None:
            return self.required, True, self.preferred
        return self.preferred, False, None


class PlacementSlices(WireModel):
    """Consecutive ranks in groups of ``size``, each inside one domain of ``tier``."""

    size: int = Field(ge=1, le=MAX_RANKS, description="Pods per slice (fabricsched.io/slice-size).")
    tier: str = Field(min_length=1, max_length=63, description="The tier each slice stays inside.")
    policy: TierPolicy = Field(
        default=TierPolicy.REQUIRED,
        description="required: whole slices or wait; preferred: given up (and noted) when no plan "
        "keeps them.",
    )
    domains: list[_Name] = Field(
        default_factory=list, max_length=MAX_RANKS,
        description="The domain of the slice tier holding each slice, slice 0 (ranks 0..size-1) first; "
        "empty while Pending or when preferred slices did not hold.",
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )


class RankAssignment(WireModel):
    """Where one rank of the gang runs."""

    rank: int = Field(ge=0, lt=MAX_RANKS, description="The pod's rank (Indexed Job completion index).")
    node: str = Field(min_length=1, max_length=253, description="The node planned for the rank.")


class FabricPlacementSpec(WireModel):
    """The plan: which fabric, which domains, which node for every rank."""

    model_config = ConfigDict(
        json_schema_extra=openapi.extensions(
            validations=[
                openapi.cel(
                    "!has(self.ranks) || self.ranks.all(r, r.rank < self.size)",
                    "every ranks[].rank must be below size",
                    field_path=".ranks",
                    reason="FieldValueInvalid",
                ),
            ]
        )
    )

    gang: str = Field(
        min_length=1,
        max_length=253,
        description="The gang: its fabricsched.io/gang label, else its Job's name. The object is named "
        "after it, in the gang's namespace, when it is a valid lowercase object name; otherwise after "
        "its lowercased form with every other character a dash, plus - and 8 hex digits of a hash.",
    )
    job_uid: str = Field(
        default="",
        max_length=128,
        alias="jobUID",
        description="The UID part of the gang's key: its Job's or workload's UID (JobSet, PyTorchJob, "
        "MPIJob), a LeaderWorkerSet group's key, `podgroup` for a native PodGroup, the pod's UID for a "
        "lone pod; empty for a labelled gang without a Job. A recreated workload with the same name "
        "gets a new plan.",
    )
    size: int = Field(ge=1, le=MAX_RANKS, description="Pods in the gang, placed all-or-nothing.")
    gpus_per_pod: int = Field(ge=1, description="GPUs each pod requests.")
    tier: PlacementTier = Field(description="The tier constraints the plan honours.")
    slices: PlacementSlices | None = Field(
        default=None, description="The gang's slices and the domain of each (fabricsched.io/slice-*)."
    )
    traffic: TrafficPattern | None = Field(
        default=None,
        description="The traffic pattern the plan's commSlowdown assumes: the gang's fabricsched.io/traffic, "
        "else its FabricTopology's spec.traffic, else all-to-all (unset: all-to-all).",
    )
    topology: str = Field(
        min_length=1, max_length=253, description="Name of the FabricTopology the plan is made in."
    )
    domains: dict[str, list[_Name]] = Field(
        default_factory=dict,
        description="Domains the gang uses, by tier name, e.g. {leaf: [l03, l04], spine: [s1]}.",
    )
    ranks: list[RankAssignment] = Field(
        default_factory=list,
        max_length=MAX_RANKS,
        description="Node of every rank, in fabric order: consecutive ranks share a host, then a leaf.",
        json_schema_extra=openapi.extensions(list_type="map", list_map_keys=["rank"]),
    )
    priority: int | None = Field(
        default=None,
        ge=-2_000_000_000,
        le=2_000_000_000,
        description="The gang's priority (its pods' spec.priority, or its PodGroup's): what preemption "
        "ranks it by.",
    )

    @model_validator(mode="after")
    def _ranks_fit(self) -> FabricPlacementSpec:
        # Same rule as the CEL on spec (plus uniqueness, which the list-map keys give the API server).
        numbers = [r.rank for r in self.ranks]
        if len(set(numbers)) != len(numbers):
            raise ValueError("ranks[].rank must be unique")
        too_high = [n for n in numbers if n >= self.size]
        if too_high:
            raise ValueError(f"every ranks[].rank must be below size ({self.size}); got {too_high}")
        return self


class PathElement(WireModel):
    """One unhealthy element on the gang's path, as the FabricTopology's status.degraded has it."""

    kind: Literal["node", "domain"] = Field(
        description="node: a host's fabric access links; domain: a switch group's uplinks."
    )
    node: str | None = Field(default=None, max_length=253, description="Node name (kind node).")
    tier: str | None = Field(default=None, max_length=63, description="Tier name (kind domain).")
    domain: str | None = Field(default=None, max_length=63, description="Domain name (kind domain).")
    rail: int | None = Field(default=None, ge=0, description="Rail index on a rail-optimized fabric.")
    state: topology.LinkState = Field(description="degraded or down.")
    capacity: float = Field(ge=0, le=1, description="Remaining capacity fraction.")
    sources: list[topology.HealthSource] = Field(
        default_factory=list,
        max_length=MAX_SOURCES,
        description="Sources reporting it (as in the FabricTopology's status.degraded): spec.links, "
        "condition, label, prometheus, event, each with its reason.",
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )
    reason: str = Field(default="", max_length=256, description="The sources' reasons, shortened.")
    since: str | None = Field(default=None, max_length=64, description="When it left healthy (RFC 3339).")


MAX_VICTIMS = 64
"""Bound on ``status.preemption.victims`` (the engine evicts the fewest workloads it can)."""
MAX_VICTIM_PODS = 1024
"""Bound on one victim's pod UIDs (what the preemptor's hold waits to see gone)."""


class PreemptionVictim(WireModel):
    """A workload evicted to make room for the gang: a whole gang or a single pod."""

    namespace: str = Field(min_length=1, max_length=63, description="The victim's namespace.")
    name: str = Field(min_length=1, max_length=253, description="The victim gang's name.")
    priority: int = Field(ge=-2_000_000_000, le=2_000_000_000, description="Its priority.")
    gpus: int = Field(ge=0, description="GPUs it held on the fabric's hosts.")
    pods: list[Annotated[str, Field(max_length=128)]] = Field(
        default_factory=list,
        max_length=MAX_VICTIM_PODS,
        description="UIDs of its evicted pods: the hold's expiry clock starts once none is left.",
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )


class PlacementPreemption(WireModel):
    """What the gang preempted to get its domain; kept for the life of the placement."""

    victims: list[PreemptionVictim] = Field(
        default_factory=list,
        max_length=MAX_VICTIMS,
        description="The workloads evicted, lowest priority first.",
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )
    domain: str = Field(max_length=200, description="The domain cleared, as tier/name.")
    time: str = Field(max_length=64, description="When the victims were chosen (RFC 3339).")
    cleared_at: str | None = Field(
        default=None,
        max_length=64,
        description="When the last victim pod was gone (RFC 3339); until then the hold expires only past "
        "the victims' grace period and a margin (status.expiresAt).",
    )


class PreemptedBy(WireModel):
    """Who preempted this gang, and when (kept also after a new plan replaced the old)."""

    preemptor: str = Field(max_length=320, description="The preempting gang, as namespace/name.")
    priority: int = Field(ge=-2_000_000_000, le=2_000_000_000, description="The preemptor's priority.")
    domain: str = Field(max_length=200, description="The domain it cleared, as tier/name.")
    time: str = Field(max_length=64, description="When (RFC 3339).")


class FabricPlacementStatus(WireModel):
    """How far the plan got: its phase, which ranks are bound, and what it costs the job."""

    phase: PlacementPhase = Field(
        default=PlacementPhase.RESERVED,
        description="Pending (waiting for a plan) -> Reserved -> Bound (all ranks bound) -> Released; "
        "Reserved -> Expired.",
    )
    expires_at: str | None = Field(
        default=None,
        max_length=64,
        description="When an unbound reservation expires (RFC 3339); only the unbound ranks are released.",
    )
    bound_ranks: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=list,
        max_length=MAX_RANKS,
        description="Ranks whose pod is bound to its planned node.",
        json_schema_extra=openapi.extensions(list_type="set"),
    )
    comm_slowdown: float | None = Field(
        default=None,
        ge=1,
        description="Expected communication slowdown of the gang now (capacity model, with the fabric's "
        "current health); 1.0 is ideal.",
    )
    comm_slowdown_at_placement: float | None = Field(
        default=None, ge=1, description="The slowdown the engine predicted when it made the plan."
    )
    degraded_path: bool = Field(
        default=False,
        description="True while the gang's traffic crosses a degraded or down element (unhealthyPath).",
    )
    preferred_tier_held: bool | None = Field(
        default=None, description="Whether the plan is inside one domain of spec.tier.preferred (unset: "
        "no preferred tier, or no plan yet).",
    )
    slices_held: bool | None = Field(
        default=None, description="Whether every slice is inside one domain of spec.slices.tier (unset: no "
        "slices, or no plan yet).",
    )
    unhealthy_path: list[PathElement] | None = Field(
        default=None,
        max_length=MAX_UNHEALTHY,
        description="Unhealthy elements on the gang's path (its hosts' access links when it spans more "
        "than one host, the uplinks of every domain it spans partly), worst first; at most 32.",
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )
    unhealthy_path_count: int | None = Field(
        default=None, ge=0, description="How many unhealthy elements the path has (unhealthyPath is capped)."
    )
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=8,
        description="Reserved (a plan holds capacity; when False, why the gang waits), Bound (every rank "
        "bound) and PathDegraded.",
        json_schema_extra=openapi.extensions(list_type="map", list_map_keys=["type"]),
    )
    reasons: list[str] = Field(
        default_factory=list,
        description="Why the plan is what it is, e.g. 'fits 2 leaves under spine s1'.",
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )
    preemption: PlacementPreemption | None = Field(
        default=None, description="The workloads this gang evicted to get its domain (docs/preemption.md)."
    )
    preempted_by: PreemptedBy | None = Field(
        default=None, description="The gang that last preempted this one."
    )


class FabricPlacement(WireModel):
    """A whole FabricPlacement object, as a manifest or a watch event carries it."""

    api_version: Literal["fabricsched.io/v1alpha1"] = "fabricsched.io/v1alpha1"
    kind: Literal["FabricPlacement"] = "FabricPlacement"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: FabricPlacementSpec
    status: FabricPlacementStatus | None = None

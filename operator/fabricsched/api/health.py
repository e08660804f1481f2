"""FabricTopology spec.health: where host and link health comes from (node conditions, labels,
Prometheus rules) and how fast it recovers.

Part of the FabricTopology CRD (``fabricsched.api.topology`` re-exports these names); the
CRD's schema is generated from these models (``fabricsched.api.crd``).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from fabricsched.api import openapi, prometheus_access
from fabricsched.api.base import WireModel

Comparison = Literal[">", ">=", "<", "<=", "==", "!="]
"""How a telemetry rule compares a query's value with its threshold (true = the rule fires)."""

MAX_TELEMETRY_RULES = 64
"""Bound on spec.health.prometheus.rules: each rule is one query per interval."""


class TelemetryRule(WireModel):
    """One PromQL query whose result samples name fabric elements that are unhealthy when the
    comparison holds (docs/telemetry.md)."""

    model_config = ConfigDict(
        json_schema_extra=openapi.extensions(
            validations=[
                openapi.cel(
                    "self.target != 'domain' || has(self.tier)",
                    "a rule with target domain must name the tier of its domains",
                    field_path=".tier",
                    reason="FieldValueRequired",
                ),
                openapi.cel(
                    "!(has(self.capacity) && has(self.capacityFromValue) && self.capacityFromValue)",
                    "capacity and capacityFromValue exclude each other",
                    field_path=".capacityFromValue",
                    reason="FieldValueInvalid",
                ),
            ]
        )
    )

    name: str = Field(
        min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Rule name (lowercase, digits, dashes); shown in status, Events and metrics.",
    )
    query: str = Field(
        min_length=1, max_length=4096,
        description="PromQL instant query; every result sample is one reading of one element.",
    )
    target: Literal["node", "domain"] = Field(
        default="node",
        description="node: the samples name hosts (their access links); domain: switch domains "
        "(their uplinks).",
    )
    target_label: str = Field(
        default="instance", min_length=1, max_length=128,
        description="Result label whose value names the node, or the domain (the tier label's value).",
    )
    target_regex: str | None = Field(
        default=None, min_length=1, max_length=256,
        description="Regular expression matched against the whole targetLabel value; its first capture "
        "group (or the whole match) is the name, e.g. ([^:]+)(:[0-9]+)? for host:9100. "
        "Samples that do not match are ignored.",
    )
    tier: str | None = Field(
        default=None, min_length=1, max_length=63,
        description="Tier name of the domains (target domain); one of spec.tiers[].name.",
    )
    comparison: Comparison = Field(
        default=">", description="How the value is compared with threshold: >, >=, <, <=, == or !=."
    )
    threshold: float = Field(default=0.0, description="The rule fires when `value comparison threshold`.")
    state: Literal["degraded", "down"] = Field(
        default="degraded", description="State of an element the rule fires on: degraded or down."
    )
    capacity: float | None = Field(
        default=None, ge=0, le=1,
        description="Capacity fraction of a degraded element; default spec.health.degradedCapacity.",
    )
    capacity_from_value: bool = Field(
        default=False,
        description="Take the capacity from the query's value, clamped to 0..1 (e.g. measured / "
        "expected link rate).",
    )
    rail_label: str | None = Field(
        default=None, min_length=1, max_length=128,
        description="Result label naming the NIC (e.g. device) or rail: mapped to a rail index through "
        "spec.railDevices (or read as the index). On a rail-optimized fabric a reading then "
        "concerns one rail; a device outside spec.railDevices is ignored.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> TelemetryRule:
        # Same rules as the CEL above, plus what CEL cannot check: the regex compiles.
        if self.target == "domain" and self.tier is None:
            raise ValueError(f"rule {self.name}: a rule with target domain must name the tier of its domains")
        if self.capacity is not None and self.capacity_from_value:
            raise ValueError(f"rule {self.name}: capacity and capacityFromValue exclude each other")
        if self.target_regex is not None:
            try:
                re.compile(self.target_regex)
            except re.error as e:
                raise ValueError(f"rule {self.name}: targetRegex does not compile: {e}") from e
        return self


OptInRule = Literal["roce-slow-restart", "roce-out-of-sequence", "roce-cnp-storm", "roce-pfc-pause"]
"""Default rules evaluated only when ``defaultRules.include`` names them."""


class DefaultRulesSpec(WireModel):
    """The documented node_exporter port-counter rules (docs/telemetry.md), and how they name hosts."""

    enabled: bool = Field(default=True, description="Evaluate the default rules besides spec rules.")
    target_label: str = Field(
        default="instance", min_length=1, max_length=128,
        description="Label naming the host in node_exporter's series.",
    )
    target_regex: str = Field(
        default="([^:]+)(:[0-9]+)?", min_length=1, max_length=256,
        description="Extracts the node name from targetLabel (default: host:9100 -> host).",
    )
    selector: str = Field(
        default="", max_length=1024,
        description="Extra PromQL label matchers for every default query, e.g. "
        "job=\"node-exporter\",device=~\"mlx5_[0-7]\"; empty: none.",
    )
    window: str = Field(
        default="5m", pattern=r"^[0-9]+(ms|s|m|h)$",
        description="Range of the rate() and increase() default queries (a PromQL duration).",
    )
    include: list[OptInRule] = Field(
        default_factory=list, max_length=4,
        description="Opt-in default rules to evaluate too (RoCE fabrics, docs/telemetry.md): "
        "roce-slow-restart, roce-out-of-sequence, roce-cnp-storm, roce-pfc-pause.",
        json_schema_extra=openapi.extensions(list_type="set"),
    )


class PrometheusHealthSpec(WireModel):
    """Port counters in an existing Prometheus as a health source (source prometheus)."""

    url: str = Field(
        min_length=1, max_length=2048, pattern=r"^https?://",
        description="Base URL of the Prometheus HTTP API, e.g. http://prometheus.monitoring:9090.",
    )
    interval_seconds: int = Field(
        default=30, ge=1, le=3600, description="Seconds between two evaluations of every rule."
    )
    timeout_seconds: int = Field(default=10, ge=1, le=300, description="Timeout of one query.")
    access: prometheus_access.PrometheusAccessSpec | None = Field(
        default=None, description="Credentials (as files of a mounted Secret), TLS and headers; unset: "
        "plain requests.")
    default_rules: DefaultRulesSpec = Field(
        default_factory=DefaultRulesSpec, description="The documented node_exporter InfiniBand rules."
    )
    rules: list[TelemetryRule] = Field(
        default_factory=list,
        max_length=MAX_TELEMETRY_RULES,
        description="Rules of this fabric (besides the default ones); names unique.",
        json_schema_extra=openapi.extensions(list_type="map", list_map_keys=["name"]),
    )
    degrade_after: int = Field(
        default=2, ge=1, le=100,
        description="Consecutive evaluations a rule must fire before the element counts as unhealthy.",
    )
    flap_changes: int = Field(
        default=3, ge=2, le=100,
        description="Changes of a rule's verdict within flapWindowSeconds that mark the element "
        "flapping: it stays unhealthy while it flaps.",
    )
    flap_window_seconds: int = Field(
        default=600, ge=1, le=86400, description="Window over which verdict changes are counted."
    )

    @field_validator("rules")
    @classmethod
    def _unique_rules(cls, rules: list[TelemetryRule]) -> list[TelemetryRule]:
        names = [r.name for r in rules]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"rule names must be unique; repeated: {', '.join(repeated)}")
        return rules


ConditionPreset = Literal["nvsentinel"]
"""Known node-condition families read per NIC (docs/telemetry.md)."""

DEFAULT_RDMA_ATTRIBUTE = "dra.net/rdmaDevice"
"""DRANET's ResourceSlice attribute holding a device's RDMA link name (e.g. mlx5_3)."""


def _default_presets() -> list[ConditionPreset]:
    return ["nvsentinel"]


class DraHealthSpec(WireModel):
    """DRA device taints on RDMA NICs as a health source (source dra)."""

    enabled: bool = Field(
        default=True,
        description="Read DeviceTaintRules and ResourceSlice device taints: NoSchedule degrades the "
        "NIC's rail of its host, NoExecute downs it.",
    )
    rdma_device_attribute: str = Field(
        default=DEFAULT_RDMA_ATTRIBUTE, min_length=1, max_length=317,
        pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
        description="Device attribute (string) naming the device's RDMA NIC, matched against "
        "spec.railDevices; a device without it is not a NIC and is ignored. An unqualified "
        "attribute of a driver named like this attribute's domain matches too.",
    )


class HealthSpec(WireModel):
    """Where host and link health comes from, and how fast it recovers."""

    node_conditions: list[Annotated[str, Field(min_length=1, max_length=316)]] = Field(
        default_factory=lambda: ["FabricLinkDegraded"],
        max_length=32,
        description="Node condition types that mark the whole host's fabric link degraded when True "
        "(besides the types of conditionPresets, which are read per NIC).",
        json_schema_extra=openapi.extensions(list_type="set"),
    )
    condition_presets: list[ConditionPreset] = Field(
        default_factory=_default_presets,
        max_length=4,
        description="Node-condition families read per NIC: nvsentinel (InfiniBandStateCheck, "
        "EthernetStateCheck: the named NIC's rail down; InfiniBandDegradationCheck, "
        "EthernetDegradationCheck: degraded, down for fatal counters). [] turns them off.",
        json_schema_extra=openapi.extensions(list_type="set"),
    )
    dra: DraHealthSpec = Field(
        default_factory=DraHealthSpec, description="DRA device taints on RDMA NICs (source dra)."
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
    prometheus: PrometheusHealthSpec | None = Field(
        default=None,
        description="Port-counter rules evaluated against an existing Prometheus; unset: no telemetry.",
    )

"""Builders for the telemetry tests: rules, specs and samples in one line each.

A module of its own (not conftest) so test modules can import it by name."""

from __future__ import annotations

from typing import Any

import builders
from fabricsched.api import topology as api
from fabricsched.telemetry import rules


def make_rule(name: str = "r", query: str = "q", **fields: Any) -> rules.Rule:
    """A compiled rule; ``fields`` are ``api.TelemetryRule`` fields (snake_case)."""
    return rules.Rule.from_api(api.TelemetryRule(name=name, query=query, **fields))


def make_spec(rules_: list[dict[str, Any]] | None = None, *, rails: int = 1,
              rail_devices: list[str] | None = None, **prometheus: Any) -> api.FabricTopologySpec:
    """A leaf/spine spec (topograph labels, as ``builders`` sets them) with
    ``spec.health.prometheus`` set; ``prometheus`` holds its camelCase fields."""
    return api.FabricTopologySpec.model_validate({
        "tiers": [{"name": "leaf", "nodeLabel": builders.TOPOGRAPH.format(0)},
                  {"name": "spine", "nodeLabel": builders.TOPOGRAPH.format(1)}],
        "rails": rails,
        "railDevices": rail_devices or [],
        "gpuBandwidthGbps": 400,
        "health": {"recoverAfterSeconds": 60,
                   "prometheus": {"url": "http://prom:9090", "rules": rules_ or [], **prometheus}},
    })


def sample(value: float, **labels: str) -> rules.Sample:
    return rules.Sample(labels, value)

"""The chart's values.schema.json: its topology.health part is what HealthSpec generates."""

from __future__ import annotations

import json
from pathlib import Path

from fabricsched.api import values_schema

SCHEMA = Path(__file__).resolve().parents[3] / "charts" / "fabricsched" / "values.schema.json"


def test_the_committed_values_schema_is_current() -> None:
    text = SCHEMA.read_text(encoding="utf-8")
    assert values_schema.render(json.loads(text)) == text, "run make crds"


def test_exclusive_bounds_take_their_draft_07_form_and_kubernetes_extensions_go() -> None:
    node = {"type": "object", "properties": {
        "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
        "names": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
    }, "x-kubernetes-validations": [{"rule": "true", "message": "m"}]}
    assert values_schema.draft07(node) == {"type": "object", "additionalProperties": False, "properties": {
        "ratio": {"type": "number", "exclusiveMinimum": 0},
        "names": {"type": "array", "items": {"type": "string"}},
    }}


def test_the_generated_health_covers_telemetry_access_and_opt_in_rules() -> None:
    health = values_schema.health_schema()
    prom = health["properties"]["prometheus"]["properties"]
    assert prom["url"]["pattern"] == "^https?://"
    assert set(prom["access"]["properties"]) == {"bearerTokenFile", "basicAuth", "tls", "headers"}
    include = prom["defaultRules"]["properties"]["include"]["items"]
    assert set(include["enum"]) == {"roce-slow-restart", "roce-out-of-sequence", "roce-cnp-storm",
                                    "roce-pfc-pause"}
    assert health["additionalProperties"] is False and prom["access"]["additionalProperties"] is False
    assert "x-kubernetes-validations" not in json.dumps(health)

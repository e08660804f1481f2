"""The telemetry examples are valid manifests whose rules compile."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from fabricsched.api import topology as api
from fabricsched.telemetry import rules

EXAMPLES = sorted((pathlib.Path(__file__).parents[3] / "examples").glob("telemetry-*.yaml"))


def test_there_are_telemetry_examples() -> None:
    assert {p.name for p in EXAMPLES} >= {"telemetry-infiniband.yaml", "telemetry-switch.yaml",
                                          "telemetry-roce.yaml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.name} validates and compiles its rules")
def test_example_validates_and_compiles(path: pathlib.Path) -> None:
    manifest = yaml.safe_load(path.read_text())
    spec = api.FabricTopologySpec.model_validate(manifest["spec"])
    prom = spec.health.prometheus
    assert prom is not None
    compiled = rules.compile_rules(spec)
    assert {r.name for r in prom.rules} <= {r.name for r in compiled}
    assert len({r.name for r in compiled}) == len(compiled)
    tiers = {t.name for t in spec.tiers}
    assert all(r.tier in tiers for r in compiled if r.target == "domain")

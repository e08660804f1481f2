"""FabricTopology models: the full ib-east example round-trips; bad specs fail as the CRD's rules do."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from fabricsched.api import topology


def contains(whole: Any, part: Any, path: str = "") -> None:
    """Every value of ``part`` appears in ``whole`` (which may add defaults); nulls mean unset."""
    if isinstance(part, dict):
        for key, value in part.items():
            if value is None:
                assert key not in whole, f"{path}.{key} should read back unset"
            else:
                assert key in whole, f"{path}.{key} is lost"
                contains(whole[key], value, f"{path}.{key}")
    elif isinstance(part, list):
        assert len(whole) == len(part), path
        for i, (w, p) in enumerate(zip(whole, part, strict=True)):
            contains(w, p, f"{path}[{i}]")
    else:
        assert whole == part, path


def test_the_design_example_round_trips(topology_manifest: dict[str, Any]) -> None:
    obj = topology.FabricTopology.model_validate(topology_manifest)
    wire: dict[str, Any] = obj.to_wire()
    contains(wire, topology_manifest)
    assert topology.FabricTopology.model_validate(wire) == obj
    assert obj.spec.tiers[1].oversubscription == 1.0
    assert wire["spec"]["tiers"][1]["oversubscription"] == 1.0, "the default is written out"
    assert obj.status is not None and obj.status.degraded[0].recovering_since is None
    assert obj.spec.links[0].state is topology.LinkState.DEGRADED


def test_a_minimal_spec_gets_every_default() -> None:
    spec = topology.FabricTopologySpec.model_validate({"tiers": [{"name": "leaf", "nodeLabel": "l"}]})
    assert spec.to_wire() == {
        "nodeSelector": {"matchLabels": {}, "matchExpressions": []},
        "gpuResource": "nvidia.com/gpu",
        "tiers": [{"name": "leaf", "nodeLabel": "l", "oversubscription": 1.0}],
        "rails": 1,
        "railDevices": [],
        "gpuBandwidthGbps": 400.0,
        "health": {
            "nodeConditions": ["FabricLinkDegraded"], "conditionPresets": ["nvsentinel"],
            "dra": {"enabled": True, "rdmaDeviceAttribute": "dra.net/rdmaDevice"},
            "degradedCapacity": 0.5, "recoverAfterSeconds": 300,
        },
        "links": [],
    }


def test_wire_names_stay_camel_case() -> None:
    # Other components read these keys; a rename here is a breaking API change.
    assert list(topology.FabricTopologySpec.model_json_schema(by_alias=True)["properties"]) == [
        "nodeSelector", "gpuResource", "tiers", "rails", "railDevices", "gpuBandwidthGbps", "traffic",
        "health", "links",
        "draGpus",
    ]
    assert list(topology.FabricTopologyStatus.model_json_schema(by_alias=True)["properties"]) == [
        "observedGeneration", "nodes", "gpus", "domains", "degraded", "degradedCount", "conflicts",
        "conditions",
    ]


LEAF = {"name": "leaf", "nodeLabel": "t0"}
SPINE = {"name": "spine", "nodeLabel": "t1"}


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ({"tiers": {"leaf": "t0"}}, "valid list"),
        ({"tiers": []}, "at least 1 item"),
        ({"tiers": [{**LEAF, "oversubscription": 0}]}, "greater than 0"),
        ({"tiers": [{**LEAF, "oversubscription": -2}]}, "greater than 0"),
        ({"tiers": [LEAF, {**SPINE, "name": "leaf"}]}, "tier names must be unique; repeated: leaf"),
        ({"tiers": [LEAF, {**SPINE, "nodeLabel": "t0"}]}, "tier nodeLabels must be unique; repeated: t0"),
        ({"tiers": [LEAF], "links": [{"tier": "leaf", "domain": "l1", "state": "degraded", "capacity": 1.5}]},
         "less than or equal to 1"),
        ({"tiers": [LEAF], "links": [{"tier": "leaf", "domain": "l1", "state": "broken"}]},
         "'healthy', 'degraded' or 'down'"),
        ({"tiers": [LEAF], "links": [{"tier": "core", "domain": "c1", "state": "down"}]},
         "unknown: core"),
        ({"tiers": [LEAF], "rails": 8, "railDevices": ["mlx5_0", "mlx5_1"]}, "2 devices, 8 rails"),
        ({"tiers": [LEAF], "tierz": []}, "Extra inputs are not permitted"),
    ],
    ids=[
        "tiers must be a list",
        "at least one tier",
        "oversubscription 0 is refused",
        "negative oversubscription is refused",
        "duplicate tier names are refused",
        "duplicate tier node labels are refused",
        "link capacity above 1 is refused",
        "an unknown link state is refused",
        "a link naming an undeclared tier is refused",
        "rail devices must match the rail count",
        "a misspelt field is refused",
    ],
)
def test_invalid_specs_are_refused_with_a_readable_message(spec: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValidationError) as caught:
        topology.FabricTopologySpec.model_validate(spec)
    assert complaint in str(caught.value)


def test_rail_devices_one_per_rail_are_accepted() -> None:
    spec = topology.FabricTopologySpec.model_validate(
        {"tiers": [LEAF], "rails": 2, "railDevices": ["mlx5_0", "mlx5_1"]}
    )
    assert spec.rail_devices == ["mlx5_0", "mlx5_1"]

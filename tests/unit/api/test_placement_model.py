"""FabricPlacement models: the gang b example round-trips; inconsistent plans are refused."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from fabricsched.api import placement


def test_the_design_example_round_trips(placement_manifest: dict[str, Any]) -> None:
    obj = placement.FabricPlacement.model_validate(placement_manifest)
    assert obj.to_wire() == placement_manifest
    assert obj.spec.job_uid.startswith("1f0c")
    assert obj.spec.tier.policy is placement.TierPolicy.PREFERRED
    assert obj.status is not None and obj.status.phase is placement.PlacementPhase.RESERVED
    assert obj.spec.domains == {"leaf": ["l03", "l04"], "spine": ["s1"]}
    nodes = {r.rank: r.node for r in obj.spec.ranks}
    assert nodes[11] == "gpu-028" and 12 not in nodes


def test_job_uid_keeps_its_kubernetes_spelling() -> None:
    spec = placement.FabricPlacementSpec(
        gang="g", job_uid="u1", size=1, gpus_per_pod=8,
        tier=placement.PlacementTier(required="spine", preferred="leaf"), topology="ib-east",
    )
    wire = spec.to_wire()
    assert wire["jobUID"] == "u1" and "jobUid" not in wire
    assert wire["gpusPerPod"] == 8 and wire["tier"] == {"required": "spine", "preferred": "leaf"}


@pytest.mark.parametrize(("tier", "constraint"), [
    pytest.param({"name": "leaf", "policy": "required"}, ("leaf", True, None), id="the old shape, required"),
    pytest.param({"name": "leaf", "policy": "preferred"}, ("leaf", False, None),
                 id="the old shape, preferred"),
    pytest.param({"name": "leaf"}, ("leaf", False, None), id="the old shape without a policy"),
    pytest.param({"required": "spine", "preferred": "leaf"}, ("spine", True, "leaf"),
                 id="required and preferred"),
    pytest.param({"preferred": "leaf"}, ("leaf", False, None), id="preferred alone"),
    pytest.param({}, (None, False, None), id="no constraint"),
])
def test_both_shapes_of_spec_tier_read_as_one_constraint(
    tier: dict[str, str], constraint: tuple[str | None, bool, str | None],
) -> None:
    assert placement.PlacementTier.model_validate(tier).constraint() == constraint


def test_status_defaults_describe_a_fresh_reservation() -> None:
    assert placement.FabricPlacementStatus().to_wire() == {
        "phase": "Reserved", "boundRanks": [], "degradedPath": False, "reasons": [],
    }


def spec_with(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "gang": "g", "size": 2, "gpusPerPod": 8, "tier": {"name": "leaf"}, "topology": "ib-east",
        "ranks": [{"rank": 0, "node": "n1"}, {"rank": 1, "node": "n2"}],
    }
    return {**base, **changes}


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        (spec_with(ranks=[{"rank": 0, "node": "n1"}, {"rank": 0, "node": "n2"}]), "must be unique"),
        (spec_with(ranks=[{"rank": 2, "node": "n1"}]), "below size (2); got [2]"),
        (spec_with(size=0), "greater than or equal to 1"),
        (spec_with(tier={"name": "leaf", "policy": "maybe"}), "'required' or 'preferred'"),
        (spec_with(domains={"leaf": "l1"}), "valid list"),
    ],
    ids=[
        "a rank planned twice is refused",
        "a rank beyond the gang size is refused",
        "an empty gang is refused",
        "an unknown tier policy is refused",
        "domains map tier names to lists",
    ],
)
def test_inconsistent_plans_are_refused(spec: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValidationError) as caught:
        placement.FabricPlacementSpec.model_validate(spec)
    assert complaint in str(caught.value)


@pytest.mark.parametrize("slowdown", [0.99, 0.0], ids=["below 1 is impossible", "zero is impossible"])
def test_comm_slowdown_is_at_least_one(slowdown: float) -> None:
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        placement.FabricPlacementStatus(comm_slowdown=slowdown)

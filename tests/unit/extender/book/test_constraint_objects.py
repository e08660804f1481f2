"""Constraints in the extender (issue 31): the FabricPlacement's new spec.tier shape, slices with
their domains and which constraint held; objects of the shape before still read; the native
topology key mapped to the tier whose nodeLabel it is."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fabricsched import gangs, ids
from fabricsched.api import placement as api
from fabricsched.extender.book import objects, reservations
from fabricsched.extender.decide import planning
from fabricsched.placement import request
from fabricsched.topology import fabric

N, D = ids.NodeName, ids.DomainName


def entry(**changes: Any) -> reservations.Entry:
    base = reservations.Entry(
        key=ids.GangKey("train/llm@u1"), namespace="train", name="llm", job_uid="u1", job_name=None,
        size=4, gpus_per_pod=8, topology=ids.TopologyName("ib"), tier="spine", required=True,
        ranks=(N("a"), N("b"), N("c"), N("d")), preferred_tier="leaf",
        slices=request.Slices(2, "leaf"), slice_domains=(D("l1"), D("l2")),
        domains={"leaf": (D("l1"), D("l2")), "spine": (D("s1"),)},
    )
    return dataclasses.replace(base, **changes)


def test_the_object_says_which_constraint_held_and_reads_back_the_same() -> None:
    manifest = objects.manifest_of(entry())
    assert manifest["spec"]["tier"] == {"required": "spine", "preferred": "leaf"}
    assert manifest["spec"]["slices"] == {"size": 2, "tier": "leaf", "policy": "required",
                                          "domains": ["l1", "l2"]}
    assert manifest["status"]["preferredTierHeld"] is False and manifest["status"]["slicesHeld"] is True
    back = objects.entry_of(manifest)
    assert (back.tier, back.required, back.preferred_tier, back.slices, back.slice_domains) == (
        "spine", True, "leaf", request.Slices(2, "leaf"), (D("l1"), D("l2")))


def test_an_object_of_the_shape_before_still_reads() -> None:
    manifest = objects.manifest_of(entry(preferred_tier=None, slices=None, slice_domains=()))
    manifest["spec"]["tier"] = {"name": "spine", "policy": "required"}
    back = objects.entry_of(manifest)
    assert (back.tier, back.required, back.preferred_tier, back.slices) == ("spine", True, None, None)
    manifest["spec"]["tier"] = {"name": "leaf", "policy": "preferred"}
    assert (objects.entry_of(manifest).tier, objects.entry_of(manifest).required) == ("leaf", False)


def test_a_pending_gang_claims_nothing_held() -> None:
    status = objects.manifest_of(entry(domains={}, phase=api.PlacementPhase.PENDING))["status"]
    assert "preferredTierHeld" not in status and "slicesHeld" not in status


TIERS = (fabric.Tier(ids.TierName("leaf"), "example.com/leaf"),
         fabric.Tier(ids.TierName("spine"), "example.com/spine"))
FAB = fabric.Fabric(TIERS, {}, {}, 400.0)


def gang(key: str | None, **changes: Any) -> gangs.GangIdentity:
    base = gangs.GangIdentity(ids.GangKey("train/pg@podgroup"), "train", "pg", None, "podgroup", 4, None,
                              None, False, 8, topology_key=key)
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize(("key", "tier"), [("example.com/leaf", "leaf"), ("example.com/spine", "spine")])
def test_the_native_key_is_the_required_tier_whose_node_label_it_is(key: str, tier: str) -> None:
    found = planning.resolved(gang(key), FAB)
    assert isinstance(found, gangs.GangIdentity) and (found.tier, found.required) == (tier, True)


def test_a_native_key_of_no_tier_is_refused_naming_the_key_and_the_tiers() -> None:
    found = planning.resolved(gang("topology.kubernetes.io/rack"), FAB)
    assert isinstance(found, request.NoFit) and found.unresolvable
    assert found.reason == ("topology key 'topology.kubernetes.io/rack' is no tier's nodeLabel "
                            "(tiers: leaf, spine)")


def test_a_tier_named_on_the_pods_is_not_overridden() -> None:
    named = gang("example.com/spine", tier="leaf", required=False)
    assert planning.resolved(named, FAB) is named


def test_the_traffic_pattern_is_written_and_read_back_and_absent_reads_all_to_all() -> None:
    ring = objects.manifest_of(entry(traffic=request.Pattern.RING))
    assert ring["spec"]["traffic"] == "ring"
    assert objects.entry_of(ring).pattern == request.Pattern.RING
    older = objects.manifest_of(entry())
    assert "traffic" not in older["spec"]
    back = objects.entry_of(older)
    assert back.traffic is None and back.pattern == request.Pattern.ALL_TO_ALL


def test_a_gang_request_takes_the_gangs_pattern_else_the_fabrics() -> None:
    ringed = dataclasses.replace(FAB, traffic=request.Pattern.RING)
    for fab, own, expected in ((FAB, None, request.Pattern.ALL_TO_ALL), (ringed, None, request.Pattern.RING),
                               (ringed, request.Pattern.ALL_TO_ALL, request.Pattern.ALL_TO_ALL)):
        asked = planning.gang_request(gang(None, traffic=own), fab)
        assert isinstance(asked, request.GangRequest) and asked.pattern == expected

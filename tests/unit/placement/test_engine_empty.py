"""A fabric with no host (every node conflicted, or none matched) is a NoFit, never a crash."""

from __future__ import annotations

import pytest
from placement_builders import gang

import builders
from fabricsched import ids
from fabricsched.placement import patience, placing, request, snapshot
from fabricsched.topology import fabric, index


def _conflicted_fabric() -> fabric.Fabric:
    """Two spines claim leaf l1: every node under it is left out, and that is every node."""
    spec = builders.make_topology(builders.topograph_tiers(2))
    built = index.FabricIndex(spec)
    built.set_node(builders.make_node("a").leaf("l1").spine("s1").gpus(8).info())
    built.set_node(builders.make_node("b").leaf("l1").spine("s2").gpus(8).info())
    result = built.snapshot()
    assert [c.kind for c in result.conflicts] == ["multipleParents"]
    return result.fabric


@pytest.mark.parametrize("fab", [
    pytest.param(fabric.Fabric(tiers=(fabric.Tier(ids.TierName("leaf"), "leaf", 2.0),
                                      fabric.Tier(ids.TierName("spine"), "spine")), hosts={}, domains={}),
                 id="tiers but no node matched"),
    pytest.param(_conflicted_fabric(), id="every node in a conflict"),
    pytest.param(fabric.Fabric(tiers=(), hosts={}, domains={}), id="no tier and no node"),
])
@pytest.mark.parametrize("pods", [1, 4])
def test_an_empty_fabric_gives_an_unresolvable_no_fit(fab: fabric.Fabric, pods: int) -> None:
    assert not fab.hosts
    result = placing.place(snapshot.build(fab), {}, gang(pods))
    assert isinstance(result, request.NoFit) and result.unresolvable, result
    assert "no host has 8 GPUs" in result.reason
    assert patience.floor_slowdown(fab, pods, 8) == float("inf")

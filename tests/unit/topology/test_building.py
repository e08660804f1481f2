from __future__ import annotations

import pytest

import builders
from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.topology import building, fabric, gpus, health, nodes

AWS_TIERS = [("layer3", builders.AWS.format(3)), ("layer2", builders.AWS.format(2)),
             ("layer1", builders.AWS.format(1))]


def build(spec: api.FabricTopologySpec, *nodes_: builders.NodeBuilder,
          health_view: dict[health.ElementId, health.ElementHealth] | None = None) -> building.BuildResult:
    return building.build_fabric(spec, [n.info() for n in nodes_], health_view or {})


def test_two_tier_topograph_fabric(two_tier: api.FabricTopologySpec) -> None:
    result = build(two_tier, *(builders.make_node(f"gpu-{i}").leaf(f"l{i // 2}").spine("s1").gpus(8)
                               for i in range(4)))
    fab = result.fabric
    assert result.conflicts == ()
    assert [t.name for t in fab.tiers] == ["leaf", "spine"]
    assert fab.hosts[ids.NodeName("gpu-3")].path == ("l1", "s1")
    assert fab.domains[(0, ids.DomainName("l0"))].hosts == ("gpu-0", "gpu-1")
    assert fab.domains[(0, ids.DomainName("l0"))].parent == "s1"
    spine = fab.domains[(1, ids.DomainName("s1"))]
    assert (spine.children, spine.gpus) == (("l0", "l1"), 32)
    assert spine.hosts == ("gpu-0", "gpu-1", "gpu-2", "gpu-3")
    assert fab.uplink_capacity_gbps((0, ids.DomainName("l0"))) == 16 * 400 / 2.0
    assert fab.domains[(0, ids.DomainName("l1"))].parent == "s1"
    assert "gpu-3" in fab.domains[(0, ids.DomainName("l1"))].hosts


def test_three_tier_aws_fabric_uses_layer_three_as_the_lowest_tier() -> None:
    spec = builders.make_topology(AWS_TIERS)
    result = build(spec,
                   builders.make_node("a").aws("nn-top", "nn-mid1", "nn-low1").gpus(8),
                   builders.make_node("b").aws("nn-top", "nn-mid1", "nn-low2").gpus(8),
                   builders.make_node("c").aws("nn-top", "nn-mid2", "nn-low3").gpus(8))
    fab = result.fabric
    assert result.conflicts == ()
    assert fab.hosts[ids.NodeName("a")].path == ("nn-low1", "nn-mid1", "nn-top")
    assert fab.domains[(1, ids.DomainName("nn-mid1"))].children == ("nn-low1", "nn-low2")
    assert fab.domains[(2, ids.DomainName("nn-top"))].parent is None
    assert fab.domains[(2, ids.DomainName("nn-top"))].hosts == ("a", "b", "c")


def test_aws_pool_mixing_four_layer_instance_types_reports_the_three_layer_nodes() -> None:
    spec = builders.make_topology([("layer4", builders.AWS.format(4)), *AWS_TIERS])
    result = build(spec,
                   builders.make_node("p6-1").aws("t", "m", "l", "u1", instance_type="p6e-gb200.36xlarge")
                   .gpus(4),
                   builders.make_node("p5-1").aws("t", "m", "l").gpus(8))
    assert set(result.fabric.hosts) == {"p6-1"}
    [conflict] = result.conflicts
    assert (conflict.kind, conflict.node, conflict.tier) == ("missingTierLabel", "p5-1", "layer4")
    assert builders.AWS.format(4) in conflict.message
    assert conflict.to_api().kind == "missingTierLabel"


def test_rail_optimized_fabric_names_the_scalable_unit_by_the_lowest_label() -> None:
    spec = builders.make_topology([("su", builders.NVIDIA.format("leaf")),
                                   ("spine", builders.NVIDIA.format("spine"))],
                                  rails=8, railDevices=[f"mlx5_{i}" for i in range(8)])
    result = build(spec, *(builders.make_node(f"dgx-{i}").nvidia(f"su{i // 4}", "sp1").gpus(8)
                           for i in range(8)))
    fab = result.fabric
    assert fab.rails == 8
    assert fab.domains[(0, ids.DomainName("su1"))].hosts == ("dgx-4", "dgx-5", "dgx-6", "dgx-7")


def test_one_degraded_rail_costs_one_rail_of_bandwidth() -> None:
    spec = builders.make_topology([("su", builders.NVIDIA.format("leaf"))], rails=4)
    rail = health.ElementId.node("dgx-0", rail=2)
    record = health.ElementHealth(rail, fabric.HealthState.DEGRADED, 0.5, 0.0, None, ())
    result = build(spec, builders.make_node("dgx-0").nvidia("su0", "sp1").gpus(8), health_view={rail: record})
    host = result.fabric.hosts[ids.NodeName("dgx-0")]
    assert host.state is fabric.HealthState.DEGRADED
    assert host.health == pytest.approx((4 - 1 + 0.5) / 4)


def test_leaf_under_two_spines_is_reported_and_left_out(two_tier: api.FabricTopologySpec) -> None:
    result = build(two_tier,
                   builders.make_node("a").leaf("l1").spine("s1").gpus(8),
                   builders.make_node("b").leaf("l1").spine("s2").gpus(8),
                   builders.make_node("c").leaf("l2").spine("s2").gpus(8))
    [conflict] = result.conflicts
    assert (conflict.kind, conflict.tier, conflict.domain) == ("multipleParents", "leaf", "l1")
    assert "s1 (1 nodes)" in conflict.message and "s2 (1 nodes)" in conflict.message
    assert set(result.fabric.hosts) == {"c"}
    assert (0, "l1") not in result.fabric.domains
    assert result.fabric.domains[(1, ids.DomainName("s2"))].hosts == ("c",)
    assert (1, "s1") not in result.fabric.domains


def test_node_without_a_tier_label_is_reported_never_guessed(two_tier: api.FabricTopologySpec) -> None:
    result = build(two_tier, builders.make_node("a").leaf("l1").spine("s1").gpus(8),
                   builders.make_node("b").leaf("l1").gpus(8))
    assert set(result.fabric.hosts) == {"a"}
    assert [(c.kind, c.node, c.tier) for c in result.conflicts] == [("missingTierLabel", "b", "spine")]


@pytest.mark.parametrize("node", [
    builders.make_node("cpu-1").leaf("l1").spine("s1"),
    builders.make_node("cpu-2").leaf("l1").spine("s1").gpus(0),
    builders.make_node("cpu-3"),
], ids=["no GPU resource", "zero GPUs", "no GPU and no tier label either"])
def test_gpu_less_nodes_are_ignored_not_reported(two_tier: api.FabricTopologySpec,
                                                 node: builders.NodeBuilder) -> None:
    result = build(two_tier, builders.make_node("a").leaf("l1").spine("s1").gpus(8), node)
    assert set(result.fabric.hosts) == {"a"}
    assert result.conflicts == ()


@pytest.mark.parametrize(("selector", "selected"), [
    ({}, {"a", "b", "c"}),
    ({"matchLabels": {"pool": "h100"}}, {"a", "b"}),
    ({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["h100", "a100"]}]}, {"a", "b", "c"}),
    ({"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["h100"]}]}, {"c"}),
    ({"matchExpressions": [{"key": "reserved", "operator": "Exists"}]}, {"b"}),
    ({"matchExpressions": [{"key": "reserved", "operator": "DoesNotExist"}]}, {"a", "c"}),
    ({"matchLabels": {"pool": "h100"},
      "matchExpressions": [{"key": "reserved", "operator": "DoesNotExist"}]}, {"a"}),
], ids=["empty selects all", "matchLabels", "In", "NotIn", "Exists", "DoesNotExist",
        "labels and expressions must all hold"])
def test_node_selector_matching(selector: dict[str, object], selected: set[str]) -> None:
    spec = builders.make_topology(builders.topograph_tiers(1), nodeSelector=selector)
    result = build(spec, builders.make_node("a").leaf("l1").label("pool", "h100").gpus(8),
                   builders.make_node("b").leaf("l1").label("pool", "h100").label("reserved", "x").gpus(8),
                   builders.make_node("c").leaf("l1").label("pool", "a100").gpus(8))
    assert set(result.fabric.hosts) == selected


def test_free_gpus_subtract_active_bound_pods_with_a_floor_of_zero(two_tier: api.FabricTopologySpec) -> None:
    fab = build(two_tier, builders.make_node("a").leaf("l1").spine("s1").gpus(8),
                builders.make_node("b").leaf("l1").spine("s1").gpus(8),
                builders.make_node("c").leaf("l1").spine("s1").gpus(8)).fabric
    pods = [builders.make_pod("p1").gpus(4).on("a"), builders.make_pod("p2").gpus(2).on("a"),
            builders.make_pod("p3").gpus(8).on("b").phase("Succeeded"), builders.make_pod("p4").gpus(8),
            builders.make_pod("p5").gpus(8).on("c"), builders.make_pod("p6").gpus(8).on("c"),
            builders.make_pod("p7").gpus(8).on("elsewhere")]
    active = [u for u in (p.usage() for p in pods) if u.active]
    free = gpus.free_of(fab, lambda node: sum(u.gpus("nvidia.com/gpu") for u in active if u.node == node))
    assert free == {"a": 2, "b": 8, "c": 0}


def test_incremental_index_matches_a_fresh_build(two_tier: api.FabricTopologySpec) -> None:
    from fabricsched.topology import index

    idx = index.FabricIndex(two_tier)
    infos = {f"n{i}": builders.make_node(f"n{i}").leaf(f"l{i % 3}").spine(f"s{i % 3 // 2}").gpus(8)
             for i in range(12)}
    for b in infos.values():
        idx.set_node(b.info())
    idx.snapshot()
    # Rewire: a node moves leaf, one leaf gets a second parent (conflict), then it is fixed again.
    infos["n0"] = builders.make_node("n0").leaf("l1").spine("s0").gpus(8)
    infos["n2"] = builders.make_node("n2").leaf("l2").spine("s0").gpus(4)
    for name in ("n0", "n2"):
        idx.set_node(infos[name].info())
    assert _same(idx.snapshot(), building.build_fabric(two_tier, [b.info() for b in infos.values()], {}))
    infos["n2"] = builders.make_node("n2").leaf("l2").spine("s1").gpus(4)
    idx.set_node(infos["n2"].info())
    idx.remove_node(ids.NodeName("n5"))
    del infos["n5"]
    assert _same(idx.snapshot(), building.build_fabric(two_tier, [b.info() for b in infos.values()], {}))


def _same(a: building.BuildResult, b: building.BuildResult) -> bool:
    return (a.conflicts == b.conflicts and dict(a.fabric.hosts) == dict(b.fabric.hosts)
            and dict(a.fabric.domains) == dict(b.fabric.domains))


def test_unchanged_node_event_does_not_invalidate_the_snapshot(two_tier: api.FabricTopologySpec) -> None:
    from fabricsched.topology import index

    idx = index.FabricIndex(two_tier)
    node: nodes.NodeInfo = builders.make_node("a").leaf("l1").spine("s1").gpus(8).info()
    assert idx.set_node(node)
    first = idx.snapshot()
    assert not idx.set_node(builders.make_node("a").leaf("l1").spine("s1").gpus(8).label("x", "y").info())
    assert idx.snapshot() is first

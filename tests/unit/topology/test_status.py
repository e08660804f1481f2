from __future__ import annotations

import builders
from fabricsched.api import topology as api
from fabricsched.topology import building, conflicts, fabric, gpus, health, status


def test_status_rows_totals_records_and_conditions(two_tier: api.FabricTopologySpec) -> None:
    t = health.HealthTracker(300, 0.5)
    degraded = fabric.HealthState.DEGRADED
    t.update(0.0, "spec.links", [health.Observation(health.ElementId.domain("leaf", "l1"), degraded,
                                                    0.25, "spec.links", "4 of 16 uplinks flapping")])
    t.update(0.0, "condition", [health.Observation(health.ElementId.node("b"), degraded, None,
                                                   "condition", "FabricLinkDegraded: x")])
    node_list = [builders.make_node("a").leaf("l1").spine("s1").gpus(8),
                 builders.make_node("b").leaf("l1").spine("s1").gpus(8),
                 builders.make_node("c").leaf("l2").spine("s1").gpus(8),
                 builders.make_node("d").leaf("l2").gpus(8)]
    result = building.build_fabric(two_tier, [n.info() for n in node_list], t.effective())
    used = {"a": 8, "c": 2}
    free = gpus.free_of(result.fabric, lambda node: used.get(node, 0))
    assert free == {"a": 0, "b": 8, "c": 6}
    extra = [conflicts.multiple_topologies("z", ["ib-east", "ib-west"])]
    out = status.build_status(result, t.effective(), free, 86400.0, extra_conflicts=extra, generation=3)
    assert (out.nodes, out.gpus.total, out.gpus.free, out.observed_generation) == (3, 24, 14, 3)
    rows = {(r.tier, r.name): r for r in out.domains}
    assert rows[("leaf", "l1")].gpus.free == 8
    leaf = rows[("leaf", "l1")]
    assert (leaf.health, leaf.uplink_capacity) == (api.LinkState.DEGRADED, 0.25)
    assert rows[("spine", "s1")].nodes == 3
    assert out.degraded_count == 2
    assert [r.kind for r in out.degraded] == ["domain", "node"]
    assert out.degraded[0].since == "1970-01-01T00:00:00Z"
    assert {c.kind for c in out.conflicts} == {"missingTierLabel", "multipleTopologies"}
    conds = {c.type: c for c in out.conditions}
    assert (conds["Ready"].status, conds["Degraded"].status) == ("True", "True")
    assert conds["Ready"].last_transition_time == "1970-01-02T00:00:00Z"
    again = status.build_status(result, t.effective(), free, 90000.0, previous_conditions=out.conditions)
    assert {c.type: c.last_transition_time for c in again.conditions}["Ready"] == "1970-01-02T00:00:00Z"
    # The whole status validates against the wire model (camelCase, no unknown keys).
    api.FabricTopologyStatus.model_validate(out.to_wire())


def test_status_caps_long_lists_but_counts_everything(two_tier: api.FabricTopologySpec) -> None:
    t = health.HealthTracker(300, 0.5)
    t.update(0.0, "label", [health.Observation(health.ElementId.node(f"n{i}"), fabric.HealthState.DOWN, None,
                                               "label", "down") for i in range(20)])
    result = building.build_fabric(two_tier, [], {})
    out = status.build_status(result, t.effective(), {}, 0.0, options=status.StatusOptions(max_records=5))
    assert (len(out.degraded), out.degraded_count) == (5, 20)
    assert [r.node for r in out.degraded] == ["n0", "n1", "n2", "n3", "n4"]
    assert {c.type: c.status for c in out.conditions}["Ready"] == "False"

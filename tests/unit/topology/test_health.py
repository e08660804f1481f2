from __future__ import annotations

import pytest

import builders
from fabricsched.api import topology as api
from fabricsched.topology import fabric, health, status

H = fabric.HealthState
NODE = health.ElementId.node("gpu-1")
LEAF = health.ElementId.domain("leaf", "l07")


def tracker() -> health.HealthTracker:
    return health.HealthTracker(recover_after_s=300, degraded_capacity=0.5)


def obs(state: H = H.DEGRADED, capacity: float | None = None, source: health.Source = "condition",
        element: health.ElementId = NODE,
        reason: str = "FabricLinkDegraded: symbol errors") -> health.Observation:
    return health.Observation(element, state, capacity, source, reason)


def test_worse_applies_at_once_with_the_default_degraded_capacity() -> None:
    t = tracker()
    [change] = t.update(100.0, "condition", [obs()])
    assert (change.kind, change.old, change.new) == ("degraded", H.HEALTHY, H.DEGRADED)
    assert change.new_capacity == 0.5
    record = t.effective()[NODE]
    assert (record.state, record.capacity) == (H.DEGRADED, 0.5)
    assert (record.since, record.recovering_since) == (100.0, None)
    assert "symbol errors" in change.message


def test_down_has_capacity_zero_and_applies_over_degraded_at_once() -> None:
    t = tracker()
    t.update(0.0, "condition", [obs()])
    [change] = t.update(10.0, "label", [obs(H.DOWN, source="label")])
    assert (change.kind, change.new_capacity) == ("down", 0.0)
    assert t.effective()[NODE].since == 10.0


def test_better_applies_only_after_the_wait() -> None:
    t = tracker()
    t.update(0.0, "condition", [obs()])
    [started] = t.update(100.0, "condition", [])
    assert started.kind == "recovering"
    assert t.effective()[NODE].state is H.DEGRADED
    assert t.effective()[NODE].recovering_since == 100.0
    assert t.tick(399.0) == []
    assert t.next_due() == 400.0
    [recovered] = t.tick(400.0)
    assert (recovered.kind, recovered.new) == ("recovered", H.HEALTHY)
    assert NODE not in t.effective()


def test_a_new_worsening_restarts_the_wait() -> None:
    t = tracker()
    t.update(0.0, "condition", [obs()])
    t.update(100.0, "condition", [])
    [relapse] = t.update(200.0, "condition", [obs()])
    assert relapse.kind == "relapsed"
    t.update(250.0, "condition", [])
    assert t.tick(450.0) == []
    assert t.effective()[NODE].recovering_since == 250.0
    assert [c.kind for c in t.tick(550.0)] == ["recovered"]


def test_a_smaller_worsening_during_the_wait_restarts_it_without_applying() -> None:
    t = tracker()
    t.update(0.0, "prometheus", [obs(capacity=0.25, source="prometheus")])
    t.update(100.0, "prometheus", [obs(capacity=0.9, source="prometheus")])
    [restart] = t.update(200.0, "prometheus", [obs(capacity=0.6, source="prometheus")])
    assert (restart.kind, t.effective()[NODE].capacity) == ("recovering", 0.25)
    assert t.tick(450.0) == []
    [applied] = t.tick(500.0)
    assert (applied.kind, applied.new_capacity) == ("capacity", 0.6)


def test_spec_links_apply_at_once_both_ways() -> None:
    t = tracker()
    link = obs(H.DEGRADED, 0.25, "spec.links", LEAF, "4 of 16 uplinks flapping")
    [worse] = t.update(0.0, "spec.links", [link])
    assert (worse.kind, worse.new_capacity) == ("degraded", 0.25)
    [better] = t.update(1.0, "spec.links", [])
    assert better.kind == "recovered"
    assert LEAF not in t.effective()


def test_sources_merge_worst_state_lowest_capacity_all_sources() -> None:
    t = tracker()
    t.update(0.0, "spec.links", [obs(H.DEGRADED, 0.75, "spec.links", LEAF, "admin")])
    t.update(0.0, "prometheus", [obs(H.DEGRADED, 0.4, "prometheus", LEAF, "ib_symbol_errors")])
    record = t.effective()[LEAF]
    assert (record.state, record.capacity) == (H.DEGRADED, 0.4)
    assert sorted(o.source for o in record.sources) == ["prometheus", "spec.links"]
    # Removing the link leaves the observed finding: nothing gets better, nothing changes.
    assert t.update(5.0, "spec.links", []) == []


def test_a_record_keeps_the_worst_few_findings_and_the_level_reads_all() -> None:
    t = tracker()
    many = [obs(H.DEGRADED, 0.9, reason=f"condition {i}") for i in range(300)]
    t.update(0.0, "condition", [*many, obs(H.DOWN, reason="the last one is down")])
    record = t.effective()[NODE]
    assert (record.state, record.capacity) == (H.DOWN, 0.0)
    assert len(record.sources) == health.MAX_FINDINGS_KEPT
    assert [o.reason for o in record.sources[:2]] == ["the last one is down", "condition 0"]


def test_link_removal_during_an_observed_hold_keeps_the_observed_level() -> None:
    t = tracker()
    t.update(0.0, "spec.links", [obs(H.DOWN, None, "spec.links", LEAF, "cordoned")])
    t.update(0.0, "event", [obs(H.DEGRADED, 0.5, "event", LEAF, "sim")])
    [change] = t.update(10.0, "spec.links", [])
    assert (change.kind, change.new_capacity) == ("degraded", 0.5)


def test_scoped_update_replaces_only_the_named_elements() -> None:
    t = tracker()
    other = health.ElementId.node("gpu-2")
    t.update(0.0, "condition", [obs(), obs(element=other)])
    t.update(10.0, "condition", [], scope=[other])
    assert t.effective()[NODE].recovering_since is None
    assert t.effective()[other].recovering_since == 10.0


def test_zero_wait_recovers_immediately() -> None:
    t = health.HealthTracker(recover_after_s=0, degraded_capacity=0.5)
    t.update(0.0, "condition", [obs()])
    assert [c.kind for c in t.update(1.0, "condition", [])] == ["recovered"]


def test_source_mismatch_is_a_broken_invariant() -> None:
    with pytest.raises(ValueError, match="fed as"):
        tracker().update(0.0, "label", [obs(source="condition")])


def test_restore_resumes_the_recovery_wait_from_status() -> None:
    before = tracker()
    before.update(1000.0, "condition", [obs()])
    before.update(1100.0, "condition", [])
    written = [status.health_record(r) for r in before.effective().values()]
    # The operator restarts; status round-trips through its wire form.
    after = tracker()
    after.restore(status.records_from_status(api.HealthRecord.model_validate(w.to_wire()) for w in written))
    assert after.update(1200.0, "condition", []) == []
    record = after.effective()[NODE]
    assert (record.since, record.recovering_since) == (1000.0, 1100.0)
    assert [c.kind for c in after.tick(1400.0)] == ["recovered"]


def test_restore_keeps_since_when_the_finding_is_still_there() -> None:
    after = tracker()
    after.restore([health.ElementHealth(NODE, H.DEGRADED, 0.5, 50.0, None, (obs(),))])
    assert after.update(500.0, "condition", [obs()]) == []
    assert after.effective()[NODE].since == 50.0


def test_restored_element_whose_condition_cleared_while_down_still_waits() -> None:
    after = tracker()
    after.restore([health.ElementHealth(NODE, H.DEGRADED, 0.5, 50.0, None, (obs(),))])
    [change] = after.update(500.0, "condition", [])
    assert (change.kind, after.effective()[NODE].recovering_since) == ("recovering", 500.0)


def test_forget_drops_a_deleted_node_without_a_wait() -> None:
    t = tracker()
    t.update(0.0, "condition", [obs()])
    t.forget([NODE])
    assert NODE not in t.effective()
    assert t.update(1.0, "condition", []) == []


def test_observations_from_node_conditions_and_label(two_tier: api.FabricTopologySpec) -> None:
    node = (builders.make_node("gpu-1").gpus(8)
            .condition("FabricLinkDegraded", True, "symbol errors on mlx5_2")
            .condition("OtherCondition", True).health("down").info())
    found = health.observations_from_node(two_tier, node)
    assert [(o.source, o.state, o.reason) for o in found] == [
        ("condition", H.DEGRADED, "FabricLinkDegraded: symbol errors on mlx5_2"),
        ("label", H.DOWN, "fabricsched.io/fabric-health=down"),
    ]


@pytest.mark.parametrize("node", [
    builders.make_node("n").gpus(8).condition("FabricLinkDegraded", False),
    builders.make_node("n").gpus(8).condition("FabricLinkDegraded", "Unknown"),
    builders.make_node("n").gpus(8).health("healthy"),
    builders.make_node("n").gpus(8).health("flaky"),
], ids=["condition False", "condition Unknown", "label healthy", "label with an unknown value"])
def test_healthy_nodes_give_no_findings(two_tier: api.FabricTopologySpec, node: builders.NodeBuilder) -> None:
    assert health.observations_from_node(two_tier, node.info()) == []


def test_observations_from_links() -> None:
    spec = builders.make_topology(builders.topograph_tiers(2), links=[
        {"tier": "leaf", "domain": "l07", "state": "degraded", "capacity": 0.25, "reason": "flapping"},
        {"tier": "leaf", "domain": "l08", "state": "down", "rail": 3},
    ])
    found = health.observations_from_links(spec)
    assert [(o.element, o.state, o.capacity, o.source) for o in found] == [
        (LEAF, H.DEGRADED, 0.25, "spec.links"),
        (health.ElementId.domain("leaf", "l08", rail=3), H.DOWN, None, "spec.links"),
    ]


def test_a_host_and_its_rails_update_together() -> None:
    # Element ids of a host (rail None) and of its rails sort together: one update may carry both.
    t = tracker()
    whole, rail = health.ElementId.node("h"), health.ElementId.node("h", 2)
    found = [health.Observation(e, H.DEGRADED, None, "condition", "x") for e in (rail, whole)]
    assert [c.element for c in t.update(0.0, "condition", found)] == [whole, rail]
    leaf = health.ElementId.domain("leaf", "l1")
    assert sorted([rail, leaf, whole]) == [leaf, whole, rail], "the host before its rails"


def test_a_condition_message_is_bounded_and_printable(two_tier: api.FabricTopologySpec) -> None:
    message = "\u202eevil\x1b[31m" + "x" * 100_000
    node = builders.make_node("gpu-1").gpus(8).condition("FabricLinkDegraded", True, message).info()
    (found,) = health.observations_from_node(two_tier, node)
    assert len(found.reason.encode()) <= health.REASON_BYTES
    assert found.reason.startswith("FabricLinkDegraded: ?evil?[31m")

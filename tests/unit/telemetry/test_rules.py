"""Rule evaluation: comparisons, naming elements from labels, capacities, rails, defaults."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError
from telemetry_builders import make_rule, make_spec, sample

from fabricsched.api import topology as api
from fabricsched.telemetry import defaults, rules
from fabricsched.topology import fabric, health

NODE = health.ElementId.node
EIGHT = tuple(f"mlx5_{i}" for i in range(8))


@pytest.mark.parametrize(
    ("comparison", "value", "threshold", "fires"),
    [
        (">", 2.0, 1.0, True), (">", 1.0, 1.0, False),
        (">=", 1.0, 1.0, True), (">=", 0.5, 1.0, False),
        ("<", 0.25, 1.0, True), ("<", 1.0, 1.0, False),
        ("<=", 1.0, 1.0, True), ("<=", 1.5, 1.0, False),
        ("==", 4.0, 4.0, True), ("==", 1.0, 4.0, False),
        ("!=", 1.0, 4.0, True), ("!=", 4.0, 4.0, False),
    ],
    ids=lambda v: str(v),
)
def test_each_comparison_fires_exactly_when_value_compares_to_threshold(
    comparison: api.Comparison, value: float, threshold: float, fires: bool
) -> None:
    rule = make_rule(comparison=comparison, threshold=threshold)
    assert rule.fires(value) is fires


@pytest.mark.parametrize(
    ("regex", "label", "name"),
    [
        (None, "gpu-017", "gpu-017"),
        ("([^:]+)(:[0-9]+)?", "gpu-017:9100", "gpu-017"),
        ("([^:]+)(:[0-9]+)?", "gpu-017", "gpu-017"),
        ("node-(.*)", "node-a1", "a1"),
        ("gpu-[0-9]+", "gpu-017", "gpu-017"),
        ("node-(.*)", "xnode-a1", None),
        ("gpu", "gpu-017", None),
    ],
    ids=[
        "no regex takes the label value as it is",
        "the host part of host:9100 names the node",
        "the port is optional",
        "the first capture group is the name",
        "without a group the whole match is the name",
        "the regex must match from the start",
        "the regex must match the whole value",
    ],
)
def test_target_regex_extracts_the_element_name(regex: str | None, label: str, name: str | None) -> None:
    rule = make_rule(target_regex=regex)
    assert rule.target_name({"instance": label}) == name


def test_samples_without_the_target_label_or_not_matching_are_reported_as_unmatched() -> None:
    rule = make_rule(target_regex="gpu-(.*)")
    found = [sample(5, instance="gpu-1"), sample(5, instance="cpu-1"), sample(5, job="x")]
    result = rules.evaluate(rule, found)
    assert set(result.readings) == {NODE("1")}
    assert result.unmatched == ("cpu-1", "<no instance label>")


def test_the_worst_sample_of_an_element_decides_and_names_its_device() -> None:
    rule = make_rule(comparison=">", threshold=1, rail_label="device")
    result = rules.evaluate(rule, [sample(0, instance="h1", device="mlx5_0"),
                                   sample(7, instance="h1", device="mlx5_1"),
                                   sample(3, instance="h1", device="mlx5_2")])
    reading = result.readings[NODE("h1")]
    assert (reading.fires, reading.value, reading.detail) == (True, 7, "device mlx5_1")


def test_a_nan_sample_is_no_reading() -> None:
    result = rules.evaluate(make_rule(), [sample(math.nan, instance="h1")])
    assert result.readings == {}


def test_domain_rules_name_domains_of_their_tier() -> None:
    rule = make_rule(target="domain", target_label="leaf", tier="leaf", threshold=0)
    result = rules.evaluate(rule, [sample(2, leaf="l07"), sample(0, leaf="l08")])
    assert {e: r.fires for e, r in result.readings.items()} == {
        health.ElementId.domain("leaf", "l07"): True, health.ElementId.domain("leaf", "l08"): False}


def test_a_domain_rule_without_tier_is_refused() -> None:
    with pytest.raises(ValidationError, match="must name the tier"):
        api.TelemetryRule(name="x", query="q", target="domain")


def test_a_regex_that_does_not_compile_is_refused() -> None:
    with pytest.raises(ValidationError, match="does not compile"):
        api.TelemetryRule(name="x", query="q", target_regex="([")


@pytest.mark.parametrize(
    ("fields", "value", "capacity"),
    [
        ({"capacity_from_value": True}, 0.25, 0.25),
        ({"capacity_from_value": True}, 1.7, 1.0),
        ({"capacity_from_value": True}, -0.5, 0.0),
        ({"capacity": 0.4}, 123.0, 0.4),
        ({}, 123.0, None),
        ({"state": "down"}, 123.0, 0.0),
    ],
    ids=[
        "fromValue takes the value as the capacity",
        "fromValue clamps above 1",
        "fromValue clamps below 0",
        "a fixed capacity ignores the value",
        "no capacity leaves it to degradedCapacity",
        "down is capacity 0",
    ],
)
def test_capacity_of_a_firing_reading(fields: dict[str, Any], value: float, capacity: float | None) -> None:
    assert rules.capacity_of(make_rule(**fields), value) == capacity


def test_fixed_capacity_and_from_value_exclude_each_other() -> None:
    with pytest.raises(ValidationError, match="exclude each other"):
        api.TelemetryRule(name="x", query="q", capacity=0.5, capacity_from_value=True)


@pytest.mark.parametrize(
    ("rails", "devices", "label", "rail"),
    [
        (8, EIGHT, "mlx5_2", 2),
        (8, EIGHT, "mlx5_8", False),
        (4, (), "3", 3),
        (4, (), "mlx5_3", None),
        (1, (), "mlx5_3", None),
    ],
    ids=[
        "a device in railDevices is its rail",
        "a device outside railDevices is not a fabric NIC",
        "a numeric label is the rail index",
        "without railDevices a device name concerns the whole host",
        "a single-rail fabric has no rails",
    ],
)
def test_rail_mapping(rails: int, devices: tuple[str, ...], label: str, rail: int | bool | None) -> None:
    assert rules.RailMap(rails, devices).rail(label) == rail


def test_a_rail_labelled_host_rule_concerns_one_rail_and_ignores_other_nics() -> None:
    spec = make_spec(rails=4, rail_devices=["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"])
    rule = make_rule(rail_label="device", threshold=0)
    result = rules.evaluate(rule, [sample(1, instance="h1", device="mlx5_2"),
                                   sample(1, instance="h1", device="mlx5_9")], rules.RailMap.of(spec))
    assert set(result.readings) == {NODE("h1", 2)}


def test_default_rules_use_node_exporter_infiniband_metrics_and_the_expected_rate() -> None:
    spec = make_spec(defaultRules={"selector": 'job="node"', "window": "2m"})
    by_name = {r.name: r for r in rules.compile_rules(spec)}
    assert set(by_name) == {"ib-symbol-errors", "ib-link-downed", "ib-port-not-active", "ib-link-rate",
                            "ib-link-integrity-errors", "ib-buffer-overrun-errors", "ib-link-error-recovery",
                            "ib-port-receive-errors", "ib-port-transmit-discards"}
    symbols = by_name["ib-symbol-errors"]
    assert symbols.query == 'rate(node_infiniband_symbol_error_total{job="node"}[2m]) * 3600'
    assert by_name["ib-link-downed"].query == 'increase(node_infiniband_link_downed_total{job="node"}[2m])'
    assert (by_name["ib-port-not-active"].comparison, by_name["ib-port-not-active"].threshold) == ("!=", 4)
    assert by_name["ib-port-not-active"].state is fabric.HealthState.DOWN
    rate = by_name["ib-link-rate"]
    assert rate.query == 'node_infiniband_rate_bytes_per_second{job="node"} / 5e+10'  # 400 Gbit/s
    assert rate.capacity_from_value and rate.fires(0.25) and not rate.fires(1.0)
    assert all(r.rail_label == "device" and r.target_name({"instance": "gpu-3:9100"}) == "gpu-3"
               for r in by_name.values())
    assert defaults.expected_rate_bytes(spec) == 50e9


# The published thresholds (docs/telemetry.md names each source): the rule, a value just past
# it, a value just under it (both as the query reads them: per hour, per minute or per second),
# and the state it sets.
PUBLISHED = [
    ("ib-link-downed", 'increase(node_infiniband_link_downed_total[5m])', 1, 0, "down"),
    ("ib-link-integrity-errors", 'increase(node_infiniband_local_link_integrity_errors_total[5m])', 1, 0,
     "down"),
    ("ib-buffer-overrun-errors", 'increase(node_infiniband_excessive_buffer_overrun_errors_total[5m])', 1, 0,
     "down"),
    ("ib-port-not-active", "node_infiniband_state_id", 1, 4, "down"),
    ("ib-symbol-errors", "rate(node_infiniband_symbol_error_total[5m]) * 3600", 121, 120, "degraded"),
    ("ib-link-error-recovery", "rate(node_infiniband_link_error_recovery_total[5m]) * 60", 5.1, 5,
     "degraded"),
    ("ib-port-receive-errors", "rate(node_infiniband_port_errors_received_total[5m])", 10.1, 10, "degraded"),
    ("ib-port-transmit-discards", "rate(node_infiniband_port_discards_transmitted_total[5m])", 101, 100,
     "degraded"),
    ("roce-slow-restart", "rate(node_infiniband_roce_slow_restart_total[5m])", 10.1, 10, "degraded"),
    ("roce-out-of-sequence", "rate(node_infiniband_out_of_sequence_packets_received_total[5m])", 101, 100,
     "degraded"),
    ("roce-cnp-storm", "rate(node_infiniband_rp_cnp_packets_handled_total[5m])", 20001, 20000, "degraded"),
    ("roce-pfc-pause", "rate(node_ethtool_received_prio3_pause[5m])", 1001, 1000, "degraded"),
]


@pytest.mark.parametrize(("name", "query", "bad", "good", "state"), PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_each_default_rule_fires_just_past_its_published_threshold(
        name: str, query: str, bad: float, good: float, state: str) -> None:
    spec = make_spec(defaultRules={"include": ["roce-slow-restart", "roce-out-of-sequence", "roce-cnp-storm",
                                               "roce-pfc-pause"]})
    rule = {r.name: r for r in rules.compile_rules(spec)}[name]
    assert rule.query == query
    assert rule.fires(bad) and not rule.fires(good)
    assert rule.state is fabric.HealthState(state)


def test_the_roce_rules_are_opt_in() -> None:
    names = {r.name for r in rules.compile_rules(make_spec())}
    assert not {n for n in names if n.startswith("roce-")}
    with pytest.raises(ValidationError):
        make_spec(defaultRules={"include": ["roce-everything"]})


def test_the_pfc_rule_reads_the_whole_host_since_ethtool_names_the_netdev_not_the_rdma_device() -> None:
    spec = make_spec(rails=2, rail_devices=["mlx5_0", "mlx5_1"], defaultRules={"include": ["roce-pfc-pause"]})
    rule = {r.name: r for r in rules.compile_rules(spec)}["roce-pfc-pause"]
    result = rules.evaluate(rule, [sample(5000, instance="h1:9100", device="eth2")], rules.RailMap.of(spec))
    assert set(result.readings) == {NODE("h1", None)}


def test_a_spec_rule_named_like_a_default_replaces_it_and_defaults_can_be_switched_off() -> None:
    mine = {"name": "ib-link-downed", "query": "increase(x[1m])", "threshold": 3}
    names = [r.name for r in rules.compile_rules(make_spec([mine]))]
    assert names.count("ib-link-downed") == 1
    assert [r.threshold for r in rules.compile_rules(make_spec([mine])) if r.name == "ib-link-downed"] == [3]
    off = make_spec([mine], defaultRules={"enabled": False})
    assert [r.name for r in rules.compile_rules(off)] == ["ib-link-downed"]


def test_rule_names_must_be_unique() -> None:
    with pytest.raises(ValidationError, match="repeated: a"):
        make_spec([{"name": "a", "query": "x"}, {"name": "a", "query": "y"}])


def test_a_spec_without_prometheus_has_no_rules() -> None:
    spec = api.FabricTopologySpec.model_validate({"tiers": [{"name": "leaf", "nodeLabel": "t0"}]})
    assert spec.health.prometheus is None
    assert rules.compile_rules(spec) == []

"""NVSentinel's NIC Health Monitor conditions read per NIC: messages as its platform connector writes them."""

from __future__ import annotations

import pytest

import builders
from fabricsched.api import topology as api
from fabricsched.topology import fabric, health, nvsentinel, rails

H = fabric.HealthState
DEVICES = tuple(f"mlx5_{i}" for i in range(8))
RAILS = rails.RailMap(8, DEVICES)

# Entries as the connector builds them: identity tokens, the monitor's text, the action, ";".
PORT_DOWN = ("NIC:mlx5_3 NICPort:1 Port mlx5_3 port 1 state DOWN (phys Disabled) "
             "Recommended Action=REPLACE_VM;")
LINK_DOWNED = ("NIC:mlx5_3 NICPort:1 Port mlx5_3 port 1: link_downed - Link went down (value=3, delta=1, "
               "rate=0.00/interval) Recommended Action=RESTART_VM;")
RCV_ERRORS = ("NIC:mlx5_5 NICPort:1 Port mlx5_5 port 1: port_rcv_errors - Receive errors (value=900, "
              "delta=900, rate=15.00/sec) Recommended Action=NONE;")
CARD = "PCI:0000:47:00 card has 0 active ports, expected 1 Recommended Action=REPLACE_VM;"


def rail_spec(**health_spec: object) -> api.FabricTopologySpec:
    return builders.make_topology(builders.topograph_tiers(2), rails=8, railDevices=list(DEVICES),
                                  health=health_spec)


@pytest.mark.parametrize(("check", "message", "expected"), [
    ("InfiniBandStateCheck", PORT_DOWN, [(3, H.DOWN)]),
    ("EthernetStateCheck", PORT_DOWN, [(3, H.DOWN)]),
    ("InfiniBandDegradationCheck", LINK_DOWNED, [(3, H.DOWN)]),
    ("InfiniBandDegradationCheck", RCV_ERRORS, [(5, H.DEGRADED)]),
    ("EthernetDegradationCheck", RCV_ERRORS, [(5, H.DEGRADED)]),
    ("InfiniBandStateCheck", PORT_DOWN + RCV_ERRORS.replace("port_rcv_errors", "x"),
     [(3, H.DOWN), (5, H.DOWN)]),
    ("InfiniBandStateCheck", CARD, [(None, H.DEGRADED)]),
    ("InfiniBandStateCheck", "NIC:mlx5_9 NICPort:1 storage NIC down Recommended Action=NONE;", []),
    ("InfiniBandStateCheck", "No Health Failures", []),
], ids=[
    "a state check downs the named NIC's rail",
    "the Ethernet state check too",
    "a fatal counter (link_downed) downs the rail",
    "a non-fatal counter degrades the rail",
    "the Ethernet degradation check too",
    "two faults give two rails",
    "a card-level fault naming no NIC degrades the whole host",
    "a NIC outside railDevices is ignored",
    "the healthy message gives nothing",
])
def test_entries_map_to_rails(check: str, message: str, expected: list[tuple[int | None, H]]) -> None:
    assert [(f.rail, f.state) for f in nvsentinel.findings(check, message, RAILS)] == expected


def test_reason_names_check_nic_port_and_fatal_counter() -> None:
    [finding] = nvsentinel.findings("InfiniBandDegradationCheck", LINK_DOWNED, RAILS)
    assert finding.reason == "InfiniBandDegradationCheck: NIC mlx5_3 port 1 (link_downed)"


def test_without_rails_a_nic_fault_is_the_whole_host() -> None:
    [finding] = nvsentinel.findings("InfiniBandStateCheck", PORT_DOWN, rails.RailMap(1, ()))
    assert (finding.rail, finding.state) == (None, H.DOWN)


@pytest.mark.parametrize(("message", "why"), [
    ("NIC:mlx5_3 NIC:mlx5_4 NICPort:1 two NICs Recommended Action=NONE;", "2 NICs in one entry"),
    ("NIC:mlx5_\u00b3 NICPort:1 x;", "unreadable fault, NIC:'mlx5_?'"),
    ("NIC:mlx5_3 NICPort:\u0661 x;", "unreadable fault"),
    ("NIC: NICPort:1 x;", "unreadable fault"),
    ("lorem ipsum;", "no NIC named: 'lorem ipsum'"),
    ("", "True without a fault in its message"),
    ("NIC:mlx5_1 x;" * 100, "more than 64 faults"),
    ("NIC:mlx5_1 " + "x" * 10_000, "message not read past 8192 characters"),
], ids=["two NICs in one entry", "a non-ASCII digit in the NIC", "a non-ASCII port", "an empty NIC",
        "free text only", "an empty message", "too many entries", "a message past the limit"])
def test_unreadable_messages_degrade_the_whole_host_with_a_reason(message: str, why: str) -> None:
    found = nvsentinel.findings("InfiniBandStateCheck", message, RAILS)
    whole = [f for f in found if f.rail is None]
    assert whole, found
    assert all(f.state is H.DEGRADED for f in whole), "text we cannot read never downs a host"
    assert any(why in f.reason for f in whole), [f.reason for f in whole]
    assert all(len(f.reason.encode()) <= nvsentinel.REASON_CHARS for f in found)


def test_a_huge_message_costs_a_bounded_read() -> None:
    found = nvsentinel.findings("InfiniBandStateCheck", PORT_DOWN * 200_000, RAILS)
    assert {(f.rail, f.state) for f in found} == {(3, H.DOWN), (None, H.DEGRADED)}


def test_node_conditions_become_per_rail_observations() -> None:
    node = (builders.make_node("gpu-1").gpus(8)
            .condition("InfiniBandStateCheck", True, PORT_DOWN, "InfiniBandStateCheckIsNotHealthy")
            .condition("InfiniBandDegradationCheck", False, "No Health Failures")
            .condition("SomeoneElsesCheck", True, "NIC:mlx5_1 down").info())
    found = health.observations_from_node(rail_spec(), node)
    assert [(o.element, o.state, o.source) for o in found] == [
        (health.ElementId.node("gpu-1", 3), H.DOWN, "condition")]


def test_presets_off_and_listed_reads_the_type_as_a_whole_host_condition() -> None:
    node = builders.make_node("gpu-1").gpus(8).condition("InfiniBandStateCheck", True, PORT_DOWN).info()
    assert health.observations_from_node(rail_spec(conditionPresets=[]), node) == []
    listed = rail_spec(conditionPresets=[], nodeConditions=["InfiniBandStateCheck"])
    [obs] = health.observations_from_node(listed, node)
    assert (obs.element, obs.state) == (health.ElementId.node("gpu-1"), H.DEGRADED)


def test_listing_a_preset_type_does_not_read_it_twice() -> None:
    spec = rail_spec(nodeConditions=["FabricLinkDegraded", "InfiniBandStateCheck"])
    node = builders.make_node("gpu-1").gpus(8).condition("InfiniBandStateCheck", True, PORT_DOWN).info()
    found = health.observations_from_node(spec, node)
    assert [o.element for o in found] == [health.ElementId.node("gpu-1", 3)]


def test_node_elements_cover_the_host_and_each_rail() -> None:
    assert health.node_elements("h", 1) == (health.ElementId.node("h"),)
    rails_of_h = tuple(health.ElementId.node("h", r) for r in range(3))
    assert health.node_elements("h", 3) == (health.ElementId.node("h"), *rails_of_h)

"""ClusterState with NVSentinel conditions and DRA device taints: per-rail health of the right host."""

from __future__ import annotations

from typing import Any

import pytest
from controller_harness import RECOVER_S, Harness, gpu_node, topology_body

from fabricsched import ids
from fabricsched.ports import changes
from fabricsched.topology import dra, fabric, health

IB = ids.TopologyName("ib")
DEVICES = [f"mlx5_{i}" for i in range(8)]
PORT_DOWN = "NIC:mlx5_3 NICPort:1 Port mlx5_3 port 1 state DOWN Recommended Action=REPLACE_VM;"


@pytest.fixture
def railed(harness: Harness) -> Harness:
    harness.state.apply_topology("ib", topology_body(rails=8, railDevices=DEVICES))
    harness.fabric({"l1": 2, "l2": 2})
    harness.state.mark_synced()
    return harness


def host(h: Harness, name: str) -> fabric.Host:
    snap = h.state.snapshot(IB)
    assert snap is not None
    return snap.fabric.hosts[ids.NodeName(name)]


def test_an_nvsentinel_condition_degrades_one_rail_of_one_host(railed: Harness) -> None:
    railed.state.apply_node(gpu_node("l1-h0").condition("InfiniBandStateCheck", True, PORT_DOWN).build())
    records = railed.state.topologies[IB].health()
    assert list(records) == [health.ElementId.node("l1-h0", 3)]
    assert records[health.ElementId.node("l1-h0", 3)].state is fabric.HealthState.DOWN
    bad = host(railed, "l1-h0")
    assert (bad.state, bad.health) == (fabric.HealthState.DEGRADED, 7 / 8), "one of 8 rails gone"
    assert host(railed, "l1-h1").state is fabric.HealthState.HEALTHY


def test_the_rail_recovers_after_the_wait_when_the_condition_clears(railed: Harness) -> None:
    railed.state.apply_node(gpu_node("l1-h0").condition("InfiniBandStateCheck", True, PORT_DOWN).build())
    healthy = gpu_node("l1-h0").condition("InfiniBandStateCheck", False, "No Health Failures")
    railed.state.apply_node(healthy.build())
    railed.clock.advance(RECOVER_S)
    railed.state.tick()
    assert railed.state.topologies[IB].health() == {}
    kinds = [c.change.kind for c in railed.of(changes.HealthChanged)]
    assert kinds == ["down", "recovering", "recovered"]


def slice_body(node: str, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    device: dict[str, Any] = {"name": "pci-0000-47-00-0",
                              "attributes": {"dra.net/rdmaDevice": {"string": "mlx5_3"}}}
    if taints:
        device["taints"] = taints
    return {"metadata": {"name": f"{node}-dranet"},
            "spec": {"driver": "dra.net", "nodeName": node, "pool": {"name": node}, "devices": [device]}}


def apply_slice(h: Harness, body: dict[str, Any]) -> None:
    h.state.refeed_devices(h.state.devices.set_slice(*dra.parse_slice(body)))


def test_a_device_taint_rule_downs_a_rail_with_source_dra(railed: Harness) -> None:
    apply_slice(railed, slice_body("l2-h1"))
    rule = dra.parse_rule({"metadata": {"name": "fence"}, "spec": {
        "deviceSelector": {"pool": "l2-h1", "device": "pci-0000-47-00-0"},
        "taint": {"key": "example.com/nic", "effect": "NoExecute"}}})
    assert railed.state.devices.set_rule(rule)
    railed.state.refeed_devices(None)
    record = railed.state.topologies[IB].health()[health.ElementId.node("l2-h1", 3)]
    assert (record.state, [o.source for o in record.sources]) == (fabric.HealthState.DOWN, ["dra"])
    assert railed.state.devices.remove_rule("fence")
    railed.state.refeed_devices(None)
    railed.clock.advance(RECOVER_S)
    railed.state.tick()
    assert railed.state.topologies[IB].health() == {}


def test_a_node_joining_later_gets_its_device_taints(harness: Harness) -> None:
    harness.state.apply_topology("ib", topology_body(rails=8, railDevices=DEVICES))
    harness.state.mark_synced()
    apply_slice(harness, slice_body("l1-h0", [{"key": "k", "effect": "NoSchedule"}]))
    assert harness.state.topologies[IB].health() == {}, "not a member yet: not in its status"
    harness.fabric({"l1": 1})
    record = harness.state.topologies[IB].health()[health.ElementId.node("l1-h0", 3)]
    assert record.state is fabric.HealthState.DEGRADED

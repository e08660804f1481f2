"""DRA device taints on RDMA NICs: ResourceSlices and DeviceTaintRules as the API server serves them."""

from __future__ import annotations

from typing import Any

import pytest

import builders
from fabricsched import ids, parsing
from fabricsched.api import topology as api
from fabricsched.topology import dra, fabric, health

H = fabric.HealthState
DEVICES = [f"mlx5_{i}" for i in range(8)]


def nic(name: str, rdma: str, *taints: dict[str, str],
        attribute: str = "dra.net/rdmaDevice") -> dict[str, Any]:
    return {"name": name, "attributes": {attribute: {"string": rdma}, "dra.net/rdma": {"bool": True},
                                         "dra.net/numaNode": {"int": 0}},
            **({"taints": list(taints)} if taints else {})}


def resource_slice(node: str, *devices: dict[str, Any], driver: str = "dra.net",
                   name: str = "") -> dict[str, Any]:
    """As DRANET publishes it: one pool per node, named after the node."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name or f"{node}-dra.net-x1"},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                 "resourceSliceCount": 1},
                     "devices": list(devices)}}


def rule(name: str, effect: str, **selector: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": name},
            "spec": {"deviceSelector": selector, "taint": {"key": "fabric.example.com/bad-nic",
                                                           "value": "symbol-errors", "effect": effect}}}


def rail_spec(**health_spec: object) -> api.FabricTopologySpec:
    return builders.make_topology(builders.topograph_tiers(2), rails=8, railDevices=DEVICES,
                                  health=health_spec)


def index_with(*slices: dict[str, Any], rules: tuple[dict[str, Any], ...] = ()) -> dra.DeviceIndex:
    index = dra.DeviceIndex()
    for body in slices:
        index.set_slice(*dra.parse_slice(body))
    for body in rules:
        index.set_rule(dra.parse_rule(body))
    return index


def found(index: dra.DeviceIndex, node: str = "gpu-1", spec: api.FabricTopologySpec | None = None
          ) -> list[tuple[int | None, H]]:
    return [(o.element.rail, o.state)
            for o in dra.observations(spec or rail_spec(), index, ids.NodeName(node))]


GPU1 = resource_slice("gpu-1", nic("pci-0000-1a-00-0", "mlx5_0"), nic("pci-0000-47-00-0", "mlx5_3"),
                      nic("pci-0000-9a-00-0", "mlx5_9"))


@pytest.mark.parametrize(("effect", "expected"), [
    ("NoExecute", [(3, H.DOWN)]), ("NoSchedule", [(3, H.DEGRADED)]), ("None", []), ("Someday", []),
], ids=["NoExecute downs the rail", "NoSchedule degrades it", "None only informs",
        "an unknown effect counts as None"])
def test_a_device_taint_rule_on_one_nic(effect: str, expected: list[tuple[int, H]]) -> None:
    index = index_with(GPU1, rules=(rule("fence-mlx5-3", effect, driver="dra.net", pool="gpu-1",
                                         device="pci-0000-47-00-0"),))
    assert found(index) == expected


def test_an_empty_selector_matches_every_device_and_a_missing_one_none() -> None:
    everything = rule("all", "NoSchedule")
    nothing = rule("none", "NoExecute")
    del nothing["spec"]["deviceSelector"]
    index = index_with(GPU1, rules=(everything, nothing))
    assert found(index) == [(0, H.DEGRADED), (3, H.DEGRADED)], "mlx5_9 is outside railDevices"


def test_a_taint_in_the_resource_slice_counts_like_a_rule() -> None:
    tainted = resource_slice("gpu-1", nic("pci-0000-47-00-0", "mlx5_3",
                                          {"key": "dra.net/link", "value": "down", "effect": "NoExecute"}))
    [obs] = dra.observations(rail_spec(), index_with(tainted), ids.NodeName("gpu-1"))
    assert (obs.element, obs.state, obs.source) == (health.ElementId.node("gpu-1", 3), H.DOWN, "dra")
    assert obs.reason == ("ResourceSlice gpu-1-dra.net-x1: dra.net/link=down:NoExecute on "
                          "dra.net/gpu-1/pci-0000-47-00-0 (NIC mlx5_3)")


def test_a_rule_on_another_node_or_driver_does_not_match() -> None:
    index = index_with(GPU1, resource_slice("gpu-2", nic("pci-0000-47-00-0", "mlx5_3")),
                       rules=(rule("other-pool", "NoExecute", pool="gpu-2"),
                              rule("other-driver", "NoExecute", driver="gpu.nvidia.com")))
    assert found(index, "gpu-1") == []
    assert found(index, "gpu-2") == [(3, H.DOWN)]


def test_devices_without_the_rdma_attribute_are_not_nics() -> None:
    gpu = resource_slice("gpu-1", {"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-1"}}},
                         driver="gpu.nvidia.com")
    assert found(index_with(gpu, rules=(rule("all", "NoExecute"),))) == []


def test_the_attribute_is_configurable_and_unqualified_names_are_the_drivers() -> None:
    own = resource_slice("gpu-1", nic("eth3", "mlx5_3", attribute="nic.example.com/hca"),
                         driver="nic.example.com")
    short = resource_slice("gpu-1", nic("eth3", "mlx5_3", attribute="hca"), driver="nic.example.com",
                           name="s2")
    spec = rail_spec(dra={"rdmaDeviceAttribute": "nic.example.com/hca"})
    for body in (own, short):
        assert found(index_with(body, rules=(rule("all", "NoExecute"),)), spec=spec) == [(3, H.DOWN)]


def test_without_rails_the_host_and_turned_off_nothing() -> None:
    index = index_with(GPU1, rules=(rule("n", "NoExecute", device="pci-0000-47-00-0"),))
    single = builders.make_topology(builders.topograph_tiers(2))
    assert found(index, spec=single) == [(None, H.DOWN)]
    assert found(index, spec=rail_spec(dra={"enabled": False})) == []


def test_replacing_and_removing_slices_reports_the_nodes_touched() -> None:
    index = dra.DeviceIndex()
    name, devices = dra.parse_slice(GPU1)
    assert index.set_slice(name, devices) == {"gpu-1"}
    assert index.set_slice(name, devices) == set(), "an unchanged slice touches nothing"
    moved = dra.parse_slice(resource_slice("gpu-2", nic("x", "mlx5_3"), name=name))
    assert index.set_slice(*moved) == {"gpu-1", "gpu-2"}
    assert list(index.devices_of(ids.NodeName("gpu-1"))) == []
    assert index.remove_slice(name) == {"gpu-2"}
    assert list(index.nodes()) == []


def test_rules_change_only_when_they_differ() -> None:
    index = dra.DeviceIndex()
    parsed = dra.parse_rule(rule("r", "NoExecute"))
    assert index.set_rule(parsed) and not index.set_rule(parsed)
    assert index.remove_rule("r") and not index.remove_rule("r")


def test_network_attached_devices_have_no_host() -> None:
    body = resource_slice("", nic("fabric-nic", "mlx5_3"))
    body["spec"].pop("nodeName")
    body["spec"]["allNodes"] = True
    assert dra.parse_slice(body)[1] == ()


@pytest.mark.parametrize("mutate", [
    lambda b: b["spec"].update(devices="not a list"),
    lambda b: b["spec"]["devices"][0].update(taints=[{"key": 7, "effect": "NoExecute"}]),
    lambda b: b["spec"].update(driver=["dra.net"]),
], ids=["devices not a list", "a taint key not a string", "driver not a string"])
def test_a_wrong_shape_is_refused_with_a_short_error(mutate: Any) -> None:
    body = resource_slice("gpu-1", nic("d", "mlx5_3"))
    mutate(body)
    with pytest.raises(parsing.Invalid):
        dra.parse_slice(body)


def test_big_values_are_bounded() -> None:
    many = [nic(f"d{i}", "mlx5_3", {"key": "k", "effect": "NoExecute"}) for i in range(500)]
    long_value = nic("d", "x" * 10_000)
    _, devices = dra.parse_slice(resource_slice("gpu-1", *many))
    assert len(devices) == dra.MAX_DEVICES
    _, (device,) = dra.parse_slice(resource_slice("gpu-1", long_value))
    assert dra.rdma_name(device, "dra.net/rdmaDevice") is None


def test_a_hostile_nic_name_is_shown_printable_and_cut() -> None:
    hostile = "<script>\x00\x1b[2J\r\n\u202e\u200b\U0001f4a3" + "x" * 40
    taint = {"key": "k" * 63, "value": "v" * 63, "effect": "NoExecute"}
    index = index_with(resource_slice("gpu-1", nic("pci-0000-1a-00-0", hostile, taint)))
    single = builders.make_topology(builders.topograph_tiers(2))
    [short] = dra.observations(single, index_with(resource_slice("gpu-1", nic(
        "pci-0000-1a-00-0", hostile, {"key": "k", "effect": "NoExecute"}))), ids.NodeName("gpu-1"))
    assert "(NIC <script>??[2J????\U0001f4a3xx" in short.reason and short.reason.isprintable()
    [cut] = dra.observations(single, index, ids.NodeName("gpu-1"))
    assert len(cut.reason.encode()) <= dra.REASON_CHARS and cut.reason.endswith(parsing.ELLIPSIS)


def test_findings_per_element_are_the_worst_few() -> None:
    fenced = [nic(f"d{i}", "mlx5_3", *({"key": f"k{t}", "effect": "NoSchedule"} for t in range(16)))
              for i in range(127)]
    down = nic("d127", "mlx5_3", {"key": "dead", "effect": "NoExecute"})
    index = index_with(resource_slice("gpu-1", *fenced, down), resource_slice(
        "gpu-1", nic("e0", "mlx5_0", {"key": "k", "effect": "NoSchedule"}), name="second"))
    found_here = dra.observations(rail_spec(), index, ids.NodeName("gpu-1"))
    assert [(o.element.rail, o.state) for o in found_here] == [
        (3, H.DOWN), (3, H.DEGRADED), (3, H.DEGRADED), (3, H.DEGRADED), (0, H.DEGRADED)]
    assert "dead" in found_here[0].reason

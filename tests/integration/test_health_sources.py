"""Health from the tools fabric teams already run, on the real control plane: NVSentinel's NIC Health
Monitor conditions and DRA device taints, read per rail, with the real kube-scheduler, kwok and
``fabricsched run`` (the conftest's ``fabric``: 2 spines x 2 leaves x 4 hosts of 8 GPUs,
``recoverAfterSeconds: 0``, here made rail-optimized: 8 rails, ``mlx5_0`` ... ``mlx5_7``).

The conditions are written as NVSentinel's platform connector writes them (type = the check's
name, reason ``<Check>IsNotHealthy``, ``;``-terminated entries ``NIC:<device> NICPort:<n> ...
Recommended Action=...``); the ResourceSlice as DRANET publishes one (driver ``dra.net``, pool = the
node, ``dra.net/rdmaDevice`` = the NIC), the DeviceTaintRule in ``resource.k8s.io/v1`` (1.37).
"""

from __future__ import annotations

import datetime
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from harness import TOPOLOGIES, TOPOLOGY, Fabric
from waiting import wait_for

from fabricsched.cluster import rest

DEVICES = [f"mlx5_{i}" for i in range(8)]
RESOURCE = "/apis/resource.k8s.io/v1"
PORT_DOWN = ("NIC:mlx5_3 NICPort:1 Port mlx5_3 port 1 state DOWN (phys Disabled) "
             "Recommended Action=REPLACE_VM;")


@pytest.fixture(scope="module")
def railed(fabric: Fabric) -> Fabric:
    """The module's fabric, rail-optimized (its spec edited once, before any test)."""
    fabric.api.call("PATCH", f"{TOPOLOGIES}/{TOPOLOGY}", {"spec": {"rails": 8, "railDevices": DEVICES}},
                    rest.MERGE_PATCH)
    wait_for("the operator saw the rails", lambda: fabric.topology_status().get("observedGeneration", 0) >= 2)
    return fabric


def set_check(fabric: Fabric, node: str, check: str, message: str | None) -> None:
    """NVSentinel's condition ``check`` on ``node``: unhealthy with ``message``, or healthy (None)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {"type": check, "status": "False" if message is None else "True",
                 "reason": f"{check}IsHealthy" if message is None else f"{check}IsNotHealthy",
                 "message": "No Health Failures" if message is None else message,
                 "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
    fabric.api.call("PATCH", f"/api/v1/nodes/{node}/status", {"status": {"conditions": [condition]}},
                    rest.STRATEGIC_MERGE_PATCH)


def records_of(fabric: Fabric, node: str) -> list[dict[str, Any]]:
    return [r for r in fabric.topology_status().get("degraded", []) if r.get("node") == node]


def ready(fabric: Fabric) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{fabric.operator.health_port}/readyz", timeout=5) as r:
        return r.status == 200


def test_an_nvsentinel_condition_naming_mlx5_3_degrades_rail_3_of_that_host_only(
    railed: Fabric, ns: str
) -> None:
    hosts = sorted(railed.leaf_of)
    host = hosts[0]
    set_check(railed, host, "InfiniBandStateCheck", PORT_DOWN)
    try:
        [record] = wait_for(f"rail 3 of {host} in status", lambda: records_of(railed, host) or None)
        assert (record["rail"], record["state"], record["capacity"]) == (3, "down", 0.0)
        assert record["sources"] == [{"source": "condition",
                                      "reason": "InfiniBandStateCheck: NIC mlx5_3 port 1"}]
        assert [r.get("node") for r in railed.topology_status()["degraded"]] == [host], "that host only"
        # A gang needs every rail of its hosts: it avoids the host while a healthy placement exists.
        railed.job(ns, "gang", pods=4)
        placed = railed.placed(ns, "gang", 4)
        assert host not in placed and len({railed.leaf_of[n] for n in placed}) == 1
        # A single-pod job talks over no NIC: it may use the host.
        railed.job(ns, "solo", pods=1, gpus=2)
        assert railed.placed(ns, "solo", 1) == [host]
    finally:
        set_check(railed, host, "InfiniBandStateCheck", None)
    wait_for(f"{host} healthy again", lambda: not records_of(railed, host))


def test_a_fatal_counter_from_the_degradation_check_downs_the_rail_too(railed: Fabric, ns: str) -> None:
    host = sorted(railed.leaf_of)[6]
    message = ("NIC:mlx5_6 NICPort:1 Port mlx5_6 port 1: link_downed - Link went down (value=2, delta=1, "
               "rate=0.00/interval) Recommended Action=RESTART_VM;")
    set_check(railed, host, "InfiniBandDegradationCheck", message)
    try:
        [record] = wait_for(f"rail 6 of {host} in status", lambda: records_of(railed, host) or None)
        assert (record["rail"], record["state"]) == (6, "down")
        assert "link_downed" in record["sources"][0]["reason"]
    finally:
        set_check(railed, host, "InfiniBandDegradationCheck", None)
    wait_for(f"{host} healthy again", lambda: not records_of(railed, host))


def test_a_malformed_nvsentinel_message_degrades_the_whole_host_with_a_reason(
    railed: Fabric, ns: str
) -> None:
    host = sorted(railed.leaf_of)[9]
    garbage = "NIC:mlx5_\u00b3 NIC:mlx5_4 \u202e" + "x" * 20_000
    set_check(railed, host, "EthernetStateCheck", garbage)
    try:
        records = wait_for(f"{host} in status", lambda: records_of(railed, host) or None)
        whole = [r for r in records if r.get("rail") is None]
        assert [(r["state"], r["capacity"]) for r in whole] == [("degraded", 0.5)], records
        reasons = [s["reason"] for s in whole[0]["sources"]]
        assert any("EthernetStateCheck: unreadable fault, 2 NICs in one entry" in r for r in reasons), reasons
        assert any("not read past 8192 characters" in r for r in reasons), reasons
        assert all(len(r.encode()) <= 160 and r.isprintable() for r in reasons), reasons
        assert ready(railed), "the operator keeps serving"
    finally:
        set_check(railed, host, "EthernetStateCheck", None)
    wait_for(f"{host} healthy again", lambda: not records_of(railed, host))


def resource_slice(node: str) -> dict[str, Any]:
    """The node's NICs as DRANET publishes them (one pool per node, named after it)."""
    devices = [{"name": f"pci-0000-{16 * i + 10:02x}-00-0",
                "attributes": {"dra.net/rdmaDevice": {"string": dev}, "dra.net/rdma": {"bool": True},
                               "dra.net/ifName": {"string": f"ibp{i}s0"}}}
               for i, dev in enumerate(DEVICES)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-dra.net"},
            "spec": {"driver": "dra.net", "nodeName": node, "devices": devices,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}}


@pytest.fixture
def nics(railed: Fabric) -> Iterator[str]:
    """A host whose 8 NICs are published in a ResourceSlice (deleted after the test)."""
    host = sorted(railed.leaf_of)[12]
    body = resource_slice(host)
    railed.api.call("POST", f"{RESOURCE}/resourceslices", body)
    yield host
    railed.api.request("DELETE", f"{RESOURCE}/resourceslices/{body['metadata']['name']}")


def test_a_device_taint_rule_downs_the_nics_rail_with_source_dra(railed: Fabric, ns: str, nics: str) -> None:
    host = nics
    rule = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": "fence-mlx5-5"},
            "spec": {"deviceSelector": {"driver": "dra.net", "pool": host, "device": "pci-0000-5a-00-0"},
                     "taint": {"key": "fabric.example.com/bad-nic", "value": "symbol-errors",
                               "effect": "NoExecute"}}}
    railed.api.call("POST", f"{RESOURCE}/devicetaintrules", rule)
    try:
        [record] = wait_for(f"rail 5 of {host} in status", lambda: records_of(railed, host) or None)
        assert (record["rail"], record["state"]) == (5, "down")
        assert [s["source"] for s in record["sources"]] == ["dra"]
        assert record["sources"][0]["reason"] == (
            "DeviceTaintRule fence-mlx5-5: fabric.example.com/bad-nic=symbol-errors:NoExecute on "
            f"dra.net/{host}/pci-0000-5a-00-0 (NIC mlx5_5)")
        # NoSchedule only degrades it.
        railed.api.call("PATCH", f"{RESOURCE}/devicetaintrules/fence-mlx5-5",
                        {"spec": {"taint": {"effect": "NoSchedule"}}}, rest.MERGE_PATCH)
        wait_for(f"rail 5 of {host} degraded",
                 lambda: [r["state"] for r in records_of(railed, host)] == ["degraded"])
    finally:
        railed.api.request("DELETE", f"{RESOURCE}/devicetaintrules/fence-mlx5-5")
    wait_for(f"{host} healthy again", lambda: not records_of(railed, host))

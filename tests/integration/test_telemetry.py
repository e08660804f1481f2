"""Link health from port counters in a real Prometheus, end to end through ``fabricsched run``.

A test exporter serves node_exporter InfiniBand series per host and switch uplink counters per
leaf; a real Prometheus scrapes it every second; the operator evaluates the default rules plus a
switch rule every second and writes FabricTopology status and Events.

The timing budget of a degradation is telemetrykit's ``DEGRADE_BUDGET_S``.

The last test closes the loop through a real kube-scheduler: a control plane of its own
(``harness.plane_with_fabricsched``) with the second scheduler ``fabricsched`` calling the
extender of ``fabricsched run``, so a gang submitted as an Indexed Job is seen to avoid the host
its counters degraded.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clusterkit import Cluster, NodeFactory
from harness import Fabric, plane_with_fabricsched
from prometheus_harness import Exporter, PrometheusServer, find_prometheus_or_skip
from telemetrykit import (
    DEGRADE_BUDGET_S,
    INTERVAL_S,
    RECOVER_AFTER_S,
    apply_crds,
    condition,
    operator,
    record,
    status_of,
    timed,
    topology_manifest,
)
from waiting import holds_for, wait_for

from fabricsched.api import topology as api


@pytest.fixture(scope="module")
def crds(cluster: Cluster, repo_root: Path) -> None:
    apply_crds(cluster, repo_root)


@pytest.fixture
def fabric(cluster: Cluster, crds: None, node_factory: NodeFactory, custom_objects: Any,
           tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Two leaves of two nodes, an exporter, Prometheus, a FabricTopology and the operator."""
    binary = find_prometheus_or_skip()
    l1 = node_factory(2, gpus=8, leaf="l01")
    l2 = node_factory(2, gpus=8, leaf="l02")
    exporter = Exporter(l1 + l2, ["l01", "l02"]).start()
    prom = PrometheusServer(binary, tmp_path, exporter).start()
    name = f"tel-{uuid.uuid4().hex[:8]}"
    manifest = topology_manifest(name, node_factory.selector, prom.url)
    custom_objects.create_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL, manifest)
    try:
        with operator(cluster, tmp_path, [f"--prometheus-allow-url={prom.url}"]):
            yield {"name": name, "l1": l1, "l2": l2, "exporter": exporter, "prometheus": prom}
    finally:
        prom.stop()
        exporter.stop()
        with contextlib.suppress(Exception):
            custom_objects.delete_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL, name)


def events_about(core_v1: Any, name: str) -> list[Any]:
    found = core_v1.list_namespaced_event("default", field_selector=f"involvedObject.name={name}")
    return list(found.items)


def wait_telemetry_ok(custom_objects: Any, name: str) -> None:
    def ok() -> bool:
        st = status_of(custom_objects, name)
        cond = condition(st, "TelemetryUnavailable")
        return st.get("nodes") == 4 and cond is not None and cond["status"] == "False"
    wait_for("the topology's status with TelemetryUnavailable=False", ok, timeout=60)


def test_symbol_errors_degrade_the_host_and_clearing_them_recovers_it_after_the_hysteresis(
    fabric: dict[str, Any], custom_objects: Any, core_v1: Any
) -> None:
    name, host = fabric["name"], fabric["l1"][0]
    wait_telemetry_ok(custom_objects, name)
    assert record(status_of(custom_objects, name), "node", host) is None

    fabric["exporter"].symbol_errors(host, "mlx5_1", per_s=10.0)  # 600 a minute, threshold 1
    row, took = timed(f"node {host} degraded by prometheus",
                      lambda: record(status_of(custom_objects, name), "node", host), DEGRADE_BUDGET_S)
    assert row["state"] == "degraded"
    [source] = row["sources"]
    assert (source["source"], source["rule"]) == ("prometheus", "ib-symbol-errors")
    assert source["value"] > 1
    assert "device mlx5_1" in source["reason"]
    assert took <= DEGRADE_BUDGET_S
    others = [h for h in fabric["l1"] + fabric["l2"] if h != host]
    assert all(record(status_of(custom_objects, name), "node", h) is None for h in others)

    def degraded_event() -> bool:
        return any(e.reason == "FabricDegraded" and host in e.message and "ib-symbol-errors" in e.message
                   for e in events_about(core_v1, name))
    wait_for("a FabricDegraded Event naming the rule", degraded_event, timeout=15)

    fabric["exporter"].symbol_errors(host, "mlx5_1", per_s=0.0)
    waiting = wait_for("the recovery wait to start",
                       lambda: (r := record(status_of(custom_objects, name), "node", host))
                       and r.get("recoveringSince"), timeout=30)
    assert waiting
    started = time.monotonic()
    wait_for(f"node {host} healthy again",
             lambda: record(status_of(custom_objects, name), "node", host) is None, timeout=30)
    # recoveringSince is written in whole seconds: allow one second of rounding.
    assert time.monotonic() - started >= RECOVER_AFTER_S - 1.5


def test_degraded_leaf_uplinks_show_in_the_domain_row(fabric: dict[str, Any], custom_objects: Any) -> None:
    name = fabric["name"]
    wait_telemetry_ok(custom_objects, name)
    fabric["exporter"].uplink_errors("l02", per_s=5.0)

    def leaf_row() -> dict[str, Any] | None:
        st = status_of(custom_objects, name)
        row = next((d for d in st.get("domains") or () if d["tier"] == "leaf" and d["name"] == "l02"), None)
        return row if row is not None and row["health"] == "degraded" else None

    row = wait_for("leaf l02 uplinks degraded", leaf_row, timeout=DEGRADE_BUDGET_S)
    assert row["uplinkCapacity"] == 0.5  # the spec's degradedCapacity: the rule has no capacity
    rec = record(status_of(custom_objects, name), "domain", "l02")
    assert rec is not None and rec["sources"][0]["rule"] == "leaf-uplink-errors"
    assert record(status_of(custom_objects, name), "domain", "l01") is None


def test_stopping_prometheus_sets_telemetry_unavailable_and_keeps_the_last_health(
    fabric: dict[str, Any], custom_objects: Any, core_v1: Any
) -> None:
    name = fabric["name"]
    wait_telemetry_ok(custom_objects, name)
    fabric["exporter"].uplink_errors("l01", per_s=5.0)
    wait_for("leaf l01 degraded", lambda: record(status_of(custom_objects, name), "domain", "l01"),
             timeout=DEGRADE_BUDGET_S)

    fabric["prometheus"].stop()

    def unavailable() -> dict[str, Any] | None:
        cond = condition(status_of(custom_objects, name), "TelemetryUnavailable")
        return cond if cond is not None and cond["status"] == "True" else None

    cond = wait_for("TelemetryUnavailable=True", unavailable, timeout=20)
    assert cond["reason"] == "PrometheusUnreachable"
    assert fabric["prometheus"].url.removeprefix("http://") in cond["message"]
    wait_for("a TelemetryUnavailable Event",
             lambda: any(e.reason == "TelemetryUnavailable" for e in events_about(core_v1, name)), timeout=15)

    # Looked at all through a period longer than the hysteresis: a finding that was dropped
    # would start its recovery wait (recoveringSince) at once, and have recovered by the end.
    def kept() -> bool:
        rec = record(status_of(custom_objects, name), "domain", "l01")
        still = rec is not None and rec["state"] == "degraded" and rec.get("recoveringSince") is None
        return still and unavailable() is not None

    holds_for("leaf l01 degraded while Prometheus is away", kept, RECOVER_AFTER_S + 2 * INTERVAL_S)

    fabric["prometheus"].start()  # same port: the operator's retries find it again
    wait_for("TelemetryUnavailable=False again",
             lambda: (c := condition(status_of(custom_objects, name), "TelemetryUnavailable"))
             and c["status"] == "False", timeout=30)


@dataclass
class Scheduled:
    """A control plane with the ``fabricsched`` kube-scheduler, telemetry on one leaf of 4 hosts."""

    jobs: Fabric
    topology: str
    hosts: list[str]
    exporter: Exporter

    def status(self) -> dict[str, Any]:
        obj = self.jobs.api.call("GET", f"/apis/{api.GROUP}/{api.VERSION}/{api.PLURAL}/{self.topology}")
        return dict(obj.get("status") or {})


@pytest.fixture
def scheduled(tmp_path: Path) -> Iterator[Scheduled]:
    """Its own plane (the session cluster has no second scheduler), nodes, Prometheus, operator."""
    binary = find_prometheus_or_skip()
    with plane_with_fabricsched(tmp_path) as jobs, contextlib.ExitStack() as stack:
        # unwinds before the plane, in reverse: the operator, Prometheus, the exporter
        factory = NodeFactory(jobs.api)
        hosts = factory(4, gpus=8, leaf="l01")
        jobs.leaf_of.update(dict.fromkeys(hosts, "l01"))
        jobs.spine_of.update(dict.fromkeys(hosts, "s1"))
        exporter = Exporter(hosts, ["l01"]).start()
        stack.callback(exporter.stop)
        prom = PrometheusServer(binary, tmp_path, exporter).start()
        stack.callback(prom.stop)
        name = f"tel-{uuid.uuid4().hex[:8]}"
        jobs.add_topology(topology_manifest(name, factory.selector, prom.url))
        jobs.operator.args.append(f"--prometheus-allow-url={prom.url}")
        stack.callback(jobs.operator.stop)
        jobs.operator.start()
        yield Scheduled(jobs, name, hosts, exporter)


@pytest.mark.timeout(480)  # a control plane of its own on a loaded two-core machine
def test_the_next_gang_avoids_the_host_whose_symbol_errors_degraded_it(scheduled: Scheduled) -> None:
    jobs = scheduled.jobs
    wait_for("the topology's status with TelemetryUnavailable=False",
             lambda: scheduled.status().get("nodes") == 4
             and (c := condition(scheduled.status(), "TelemetryUnavailable")) is not None
             and c["status"] == "False", timeout=60)

    # Control: 3 pods of 8 GPUs on one leaf of 4 hosts leave one host out; with every host
    # healthy the engine's choice is deterministic. Its first rank's host is the one to degrade.
    before = jobs.namespace()
    jobs.job(before, "gang", pods=3)
    control = jobs.placed(before, "gang", 3)
    assert len(set(control)) == 3, control
    host = control[0]
    jobs.clean(before)

    scheduled.exporter.symbol_errors(host, "mlx5_1", per_s=10.0)
    row, took = timed(f"node {host} degraded by prometheus",
                      lambda: record(scheduled.status(), "node", host), DEGRADE_BUDGET_S)
    assert took <= DEGRADE_BUDGET_S
    [source] = row["sources"]
    assert (row["state"], source["source"], source["rule"]) == ("degraded", "prometheus", "ib-symbol-errors")
    # The control gang is gone, GPUs and reservation with it, before the next gang comes.
    wait_for("the control gang's pods gone", lambda: not jobs.pods(before), timeout=60)
    wait_for("the control gang's FabricPlacement gone", lambda: jobs.placement(before, "gang") is None,
             timeout=60)

    after = jobs.namespace()
    try:
        jobs.job(after, "gang", pods=3)
        placed = jobs.placed(after, "gang", 3)
        assert host not in placed, (host, placed)
        # The healthy placement exists: the three other hosts, one rank each.
        assert sorted(placed) == sorted(h for h in scheduled.hosts if h != host)
        placement = wait_for("the next gang's FabricPlacement", lambda: jobs.placement(after, "gang"))
        assert [r["node"] for r in placement["spec"]["ranks"]] == placed
        assert record(scheduled.status(), "node", host) is not None  # still degraded while it ran
    finally:
        jobs.clean(after)

"""Link health from port counters in a real Prometheus, end to end through ``fabricsched run``.

A test exporter serves node_exporter InfiniBand series per host and switch uplink counters per
leaf; a real Prometheus scrapes it every second; the operator evaluates the default rules plus a
switch rule every second and writes FabricTopology status and Events.

Timing budget of a degradation: one scrape for Prometheus to see the counter move, then
``degradeAfter`` (N) firing evaluations, one more interval for the evaluation that straddles the
change, and one status write: (N + 1) x interval + scrape + status interval, plus a fixed
allowance for a loaded two-core CI machine.

The last test closes the loop through a real kube-scheduler: a control plane of its own with the
second scheduler ``fabricsched`` calling the extender of ``fabricsched run``, so a gang submitted
as an Indexed Job is seen to avoid the host its counters degraded.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# test_extender's Operator (``fabricsched run`` with a known extender port) and Fabric (Indexed
# Jobs, bound ranks, FabricPlacements) drive the scheduled-gang test; a module import, so its
# fixtures stay out of this module.
import test_extender
from clusterkit import Cluster, NodeFactory, find_binaries_or_skip
from prometheus_harness import Exporter, PrometheusServer, find_prometheus_or_skip, free_port
from waiting import holds, wait_for

from fabricsched.api import placement as placement_api
from fabricsched.api import topology as api
from fabricsched.cluster import commands, controlplane, processes

INTERVAL_S = 1
DEGRADE_AFTER = 2
RECOVER_AFTER_S = 4
STATUS_INTERVAL_S = 1.0
ALLOWANCE_S = 4.0
DEGRADE_BUDGET_S = (DEGRADE_AFTER + 1) * INTERVAL_S + 1.0 + STATUS_INTERVAL_S + ALLOWANCE_S
LEAF_RULE = {
    "name": "leaf-uplink-errors", "target": "domain", "targetLabel": "leaf", "tier": "leaf",
    "query": 'sum by (leaf) (increase(fabric_switch_port_errors_total{role="uplink"}[5s]))',
    "comparison": ">", "threshold": 0,
}


def apply_crds(cluster: Cluster, repo_root: Path) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(repo_root / "crds"))
    for crd in (api.PLURAL, placement_api.PLURAL):
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}.{api.GROUP}")


@pytest.fixture(scope="module")
def crds(cluster: Cluster, repo_root: Path) -> None:
    apply_crds(cluster, repo_root)


def topology_manifest(name: str, selector: dict[str, str], prometheus_url: str) -> dict[str, Any]:
    """A two-tier FabricTopology over ``selector``'s nodes, its health read from ``prometheus_url``."""
    return {
        "apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": selector},
            "tiers": [{"name": "leaf", "nodeLabel": "fabric.topograph.run/tier-0"},
                      {"name": "spine", "nodeLabel": "fabric.topograph.run/tier-1"}],
            "health": {"recoverAfterSeconds": RECOVER_AFTER_S, "prometheus": {
                "url": prometheus_url, "intervalSeconds": INTERVAL_S, "timeoutSeconds": 2,
                "degradeAfter": DEGRADE_AFTER, "defaultRules": {"window": "5s"}, "rules": [LEAF_RULE]}},
        },
    }


@contextlib.contextmanager
def operator(cluster: Cluster, workdir: Path, args: Sequence[str] = ()) -> Iterator[subprocess.Popen[bytes]]:
    """``fabricsched run`` against the test cluster on free ports, until the block ends; ``args``
    are more flags (the Prometheus allow-list: without one no Prometheus is asked)."""
    health = f"127.0.0.1:{free_port()}"
    log = (workdir / "operator.log").open("wb")
    argv = [sys.executable, "-m", "fabricsched.cli", "run", f"--kubeconfig={cluster.kubeconfig}",
            f"--health-address={health}", f"--extender-address=127.0.0.1:{free_port()}",
            f"--status-interval={STATUS_INTERVAL_S}", *args]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def ready() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"fabricsched run exited:\n{(workdir / 'operator.log').read_text()[-3000:]}",
                        pytrace=False)
        try:
            with urllib.request.urlopen(f"http://{health}/readyz", timeout=1) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    try:
        wait_for("fabricsched run to be ready", ready, timeout=60)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


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


def status_of(custom_objects: Any, name: str) -> dict[str, Any]:
    obj = custom_objects.get_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL, name)
    return dict(obj.get("status") or {})


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or () if c["type"] == ctype), None)


def record(status: dict[str, Any], kind: str, name: str) -> dict[str, Any] | None:
    key = "node" if kind == "node" else "domain"
    return next((r for r in status.get("degraded") or () if r["kind"] == kind and r.get(key) == name), None)


def timed(what: str, check: Callable[[], Any], timeout: float) -> tuple[Any, float]:
    started = time.monotonic()
    result = wait_for(what, check, timeout=timeout, interval=0.2)
    return result, time.monotonic() - started


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

    holds("leaf l01 degraded while Prometheus is away", kept, RECOVER_AFTER_S + 2 * INTERVAL_S)

    fabric["prometheus"].start()  # same port: the operator's retries find it again
    wait_for("TelemetryUnavailable=False again",
             lambda: (c := condition(status_of(custom_objects, name), "TelemetryUnavailable"))
             and c["status"] == "False", timeout=30)


class TelemetryOperator(test_extender.Operator):
    """test_extender's ``fabricsched run``, with the flag that allows the test's Prometheus."""

    def __init__(self, kubeconfig: Path, log_dir: Path, extender_port: int, health_port: int,
                 prometheus_url: str) -> None:
        super().__init__(kubeconfig, log_dir, extender_port, health_port)
        self.prometheus_url = prometheus_url

    def start(self) -> None:
        path = self.log_dir / f"fabricsched-run-{next(self.starts)}.log"
        with path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "fabricsched.cli", "run", f"--kubeconfig={self.kubeconfig}",
                 f"--extender-address=127.0.0.1:{self.extender_port}",
                 f"--health-address=127.0.0.1:{self.health_port}",
                 f"--prometheus-allow-url={self.prometheus_url}"],
                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        wait_for("fabricsched run ready", self._ready, timeout=60)


@dataclass
class Scheduled:
    """A control plane with the ``fabricsched`` kube-scheduler, telemetry on one leaf of 4 hosts."""

    jobs: test_extender.Fabric
    topology: str
    hosts: list[str]
    exporter: Exporter

    def status(self) -> dict[str, Any]:
        obj = self.jobs.api.call("GET", f"/apis/{api.GROUP}/{api.VERSION}/{api.PLURAL}/{self.topology}")
        return dict(obj.get("status") or {})


@pytest.fixture
def scheduled(tmp_path: Path, repo_root: Path) -> Iterator[Scheduled]:
    """Its own plane (the session cluster has no second scheduler), nodes, Prometheus, operator."""
    find_binaries_or_skip("telemetry tests")
    binary = find_prometheus_or_skip()
    # The extender's port comes first: the scheduler's configuration names it.
    extender_port, health_port = processes.free_ports(2)
    scheduler = commands.fabricsched_scheduler(f"http://127.0.0.1:{extender_port}")
    with contextlib.ExitStack() as stack:  # unwinds in reverse: operator first, plane last
        plane = controlplane.up(tmp_path / "cluster", extra_schedulers=[scheduler])
        stack.callback(plane.down)
        client = plane.client()
        stack.callback(client.close)
        apply_crds(Cluster(plane, client), repo_root)
        factory = NodeFactory(client)
        hosts = factory(4, gpus=8, leaf="l01")
        exporter = Exporter(hosts, ["l01"]).start()
        stack.callback(exporter.stop)
        prom = PrometheusServer(binary, tmp_path, exporter).start()
        stack.callback(prom.stop)
        name = f"tel-{uuid.uuid4().hex[:8]}"
        client.call("POST", f"/apis/{api.GROUP}/{api.VERSION}/{api.PLURAL}",
                    topology_manifest(name, factory.selector, prom.url))
        operator = TelemetryOperator(plane.kubeconfig, tmp_path, extender_port, health_port, prom.url)
        stack.callback(operator.stop)
        operator.start()
        jobs = test_extender.Fabric(plane, client, operator, dict.fromkeys(hosts, "l01"),
                                    dict.fromkeys(hosts, "s1"))
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

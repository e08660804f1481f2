"""``fabricsched run`` against the real control plane: status, health, Events, restart, probes.

The operator runs as a subprocess with the cluster's kubeconfig, once per module (restarted by
the restart test). Each test makes its own FabricTopology selecting only its own nodes (the
``node_factory`` group label), with a short ``recoverAfterSeconds``, and polls with deadlines.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from waiting import wait_for

from fabricsched.api import topology as api
from fabricsched.cluster import samples

STATUS_DEADLINE_S = 5.0
"""The issue's bound: status right within 5 s of a change."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def metric(text: str, name: str, **labels: str) -> float:
    """One sample's value from a /metrics page (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    prefix = f"{name}{{{wanted}}} "
    return next((float(line[len(prefix):]) for line in text.splitlines() if line.startswith(prefix)), 0.0)


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


class Operator:
    """One ``fabricsched run`` subprocess; ``restart`` stops it with SIGTERM and starts another."""

    def __init__(self, kubeconfig: Path, logs: Path) -> None:
        self.kubeconfig = kubeconfig
        self.logs = logs
        self.health = f"127.0.0.1:{free_port()}"
        self.extender = f"127.0.0.1:{free_port()}"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def url(self, path: str) -> str:
        return f"http://{self.health}{path}"

    def start(self) -> None:
        self.starts += 1
        log = (self.logs / f"operator-{self.starts}.log").open("wb")
        argv = [sys.executable, "-m", "fabricsched.cli", "run", "--kubeconfig", str(self.kubeconfig),
                "--health-address", self.health, "--extender-address", self.extender, "--log-format", "json"]
        self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log.close()
        wait_for("the operator to be ready",
                 lambda: self._alive() and http_get(self.url("/readyz"))[0] == 200, timeout=60)

    def _alive(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            pytest.fail(f"operator exited with {self.process.returncode}:\n{self.log_tail()}", pytrace=False)
        return True

    def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail("operator did not stop within 30 s of SIGTERM", pytrace=False)

    def restart(self) -> None:
        assert self.stop() == 0, self.log_tail()
        self.start()

    def log_tail(self, lines: int = 40) -> str:
        text = (self.logs / f"operator-{self.starts}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


@pytest.fixture(scope="module")
def crds(cluster: Any, repo_root: Path) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(repo_root / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=120s",
                    f"crd/{api.PLURAL}.{api.GROUP}")


@pytest.fixture(scope="module")
def operator(cluster: Any, crds: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    op = Operator(cluster.kubeconfig, tmp_path_factory.mktemp("operator"))
    op.start()
    try:
        yield op
    finally:
        if op.process is not None and op.process.poll() is None:
            op.stop()


@pytest.fixture
def topology(operator: Operator, custom_objects: Any, node_factory: Any) -> Iterator[Callable[..., str]]:
    """Creates a FabricTopology over this test's nodes; deleted after the test."""
    created: list[str] = []

    def create(recover_after_s: int = 3, **spec: Any) -> str:
        name = f"ft-{uuid.uuid4().hex[:8]}"
        body = {
            "apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"matchLabels": node_factory.selector},
                "tiers": [{"name": "leaf", "nodeLabel": samples.TOPOGRAPH.leaf, "oversubscription": 2.0},
                          {"name": "spine", "nodeLabel": samples.TOPOGRAPH.spine}],
                "health": {"recoverAfterSeconds": recover_after_s},
                **spec,
            },
        }
        custom_objects.create_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL, body)
        created.append(name)
        return name

    yield create
    for name in created:
        try:
            custom_objects.delete_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL, name)
        except ApiException as e:
            if e.status != 404:
                raise


def status_of(custom_objects: Any, name: str) -> dict[str, Any]:
    obj = custom_objects.get_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL, name)
    result: dict[str, Any] = obj.get("status") or {}
    return result


def set_condition(core_v1: Any, node: str, degraded: bool, message: str = "") -> None:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {"type": "FabricLinkDegraded", "status": "True" if degraded else "False",
                 "reason": "SymbolErrors" if degraded else "LinkClean", "message": message,
                 "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
    core_v1.patch_node_status(node, {"status": {"conditions": [condition]}},
                              _content_type="application/strategic-merge-patch+json")


def node_record(status: dict[str, Any], node: str) -> dict[str, Any] | None:
    return next((r for r in status.get("degraded", []) if r.get("node") == node), None)


def topology_events(core_v1: Any, name: str, reason: str) -> list[Any]:
    found = core_v1.list_namespaced_event("default", field_selector=f"involvedObject.name={name}")
    return [e for e in found.items if e.reason == reason]


def waiting_record(custom_objects: Any, name: str, node: str) -> dict[str, Any] | None:
    """The node's record once its recovery wait has started."""
    record = node_record(status_of(custom_objects, name), node)
    return record if record is not None and record.get("recoveringSince") else None


def test_status_shows_nodes_gpus_and_domains(topology: Callable[..., str], node_factory: Any,
                                             custom_objects: Any) -> None:
    node_factory(2, gpus=8, leaf="l01", spine="s1")
    node_factory(1, gpus=4, leaf="l02", spine="s1")
    name = topology()

    def right() -> dict[str, Any] | None:
        st = status_of(custom_objects, name)
        return st if st.get("nodes") == 3 else None

    st = wait_for("status with 3 nodes", right, timeout=STATUS_DEADLINE_S)
    assert st["gpus"] == {"total": 20, "free": 20}
    assert st["observedGeneration"] == 1
    rows = {(r["tier"], r["name"]): r for r in st["domains"]}
    assert set(rows) == {("leaf", "l01"), ("leaf", "l02"), ("spine", "s1")}
    assert (rows[("leaf", "l01")]["parent"], rows[("leaf", "l01")]["gpus"]["total"]) == ("s1", 16)
    assert rows[("spine", "s1")]["nodes"] == 3
    ready = {c["type"]: c["status"] for c in st["conditions"]}
    assert ready == {"Ready": "True", "Degraded": "False"}


def test_a_running_gpu_pod_lowers_free_gpus(topology: Callable[..., str], node_factory: Any,
                                            custom_objects: Any, core_v1: Any, namespace: str,
                                            kubelet: Any) -> None:
    (node,) = node_factory(1, gpus=8, leaf="l01")
    name = topology()
    wait_for("the node in status", lambda: status_of(custom_objects, name).get("nodes") == 1,
             timeout=STATUS_DEADLINE_S)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer", "namespace": namespace},
           "spec": {"nodeName": node, "containers": [{
               "name": "main", "image": "trainer:1",
               "resources": {"requests": {"nvidia.com/gpu": "6"}, "limits": {"nvidia.com/gpu": "6"}}}]}}
    core_v1.create_namespaced_pod(namespace, pod)
    kubelet(namespace, "trainer", "Running")
    wait_for("gpus.free to drop to 2", lambda: status_of(custom_objects, name)["gpus"]["free"] == 2,
             timeout=STATUS_DEADLINE_S)
    kubelet(namespace, "trainer", "Succeeded")
    wait_for("gpus.free back to 8", lambda: status_of(custom_objects, name)["gpus"]["free"] == 8,
             timeout=STATUS_DEADLINE_S)


def test_degraded_condition_applies_at_once_and_recovers_after_the_wait(
        topology: Callable[..., str], node_factory: Any, custom_objects: Any, core_v1: Any) -> None:
    node, _ = node_factory(2, gpus=8, leaf="l01")
    name = topology(recover_after_s=3)
    wait_for("both nodes in status", lambda: status_of(custom_objects, name).get("nodes") == 2,
             timeout=STATUS_DEADLINE_S)

    set_condition(core_v1, node, True, "symbol errors on mlx5_2")
    record = wait_for("the node degraded", lambda: node_record(status_of(custom_objects, name), node),
                      timeout=STATUS_DEADLINE_S)
    assert (record["state"], record["capacity"]) == ("degraded", 0.5)
    assert record["sources"] == [{"source": "condition",
                                  "reason": "FabricLinkDegraded: symbol errors on mlx5_2"}]
    assert status_of(custom_objects, name)["degradedCount"] == 1
    event = wait_for("a FabricDegraded Event", lambda: topology_events(core_v1, name, "FabricDegraded"),
                     timeout=STATUS_DEADLINE_S)
    assert event[0].message.startswith(f"node {node} fabric link degraded")
    assert "symbol errors on mlx5_2" in event[0].message

    set_condition(core_v1, node, False)
    cleared_at = time.monotonic()
    wait_for("the recovery wait to start", lambda: waiting_record(custom_objects, name, node),
             timeout=STATUS_DEADLINE_S)
    if time.monotonic() - cleared_at < 2.5:  # still inside the 3 s wait: must still count as degraded
        assert status_of(custom_objects, name)["degradedCount"] == 1
    wait_for("the node recovered", lambda: node_record(status_of(custom_objects, name), node) is None,
             timeout=3 + STATUS_DEADLINE_S)
    assert time.monotonic() - cleared_at >= 2.0  # not before the wait (less status write latency)
    wait_for("a FabricRecovered Event", lambda: topology_events(core_v1, name, "FabricRecovered"),
             timeout=STATUS_DEADLINE_S)


def test_restart_resumes_the_recovery_wait(topology: Callable[..., str], node_factory: Any,
                                           custom_objects: Any, core_v1: Any, operator: Operator) -> None:
    recover_s = 15
    (node,) = node_factory(1, gpus=8, leaf="l03")
    name = topology(recover_after_s=recover_s)
    wait_for("the node in status", lambda: status_of(custom_objects, name).get("nodes") == 1,
             timeout=STATUS_DEADLINE_S)
    set_condition(core_v1, node, True, "port trained down to 1x")
    wait_for("the node degraded", lambda: node_record(status_of(custom_objects, name), node),
             timeout=STATUS_DEADLINE_S)
    set_condition(core_v1, node, False)
    before = wait_for("the recovery wait to start", lambda: waiting_record(custom_objects, name, node),
                      timeout=STATUS_DEADLINE_S)
    started = datetime.datetime.fromisoformat(before["recoveringSince"]).timestamp()

    operator.restart()
    after = node_record(status_of(custom_objects, name), node)
    assert after == before, "a restarted operator must resume the wait, not restart or drop it"
    # The new process has recomputed the status from its own state (and found nothing to write).
    wait_for("a status pass of the restarted operator",
             lambda: metric(http_get(operator.url("/metrics"))[1], "fabricsched_status_reconciles_total",
                            topology=name) >= 1, timeout=STATUS_DEADLINE_S)
    assert node_record(status_of(custom_objects, name), node) == before

    wait_for("the node recovered", lambda: node_record(status_of(custom_objects, name), node) is None,
             timeout=recover_s + STATUS_DEADLINE_S)
    # Recovered on the original schedule: not before recoveringSince + recoverAfterSeconds.
    assert time.time() >= started + recover_s - 1


def test_probes_and_metrics_answer(operator: Operator, topology: Callable[..., str],
                                   node_factory: Any, custom_objects: Any) -> None:
    node_factory(1, gpus=8)
    name = topology()
    wait_for("status", lambda: status_of(custom_objects, name).get("nodes") == 1, timeout=STATUS_DEADLINE_S)
    assert http_get(operator.url("/healthz"))[0] == 200
    assert http_get(operator.url("/readyz"))[0] == 200
    code, text = http_get(operator.url("/metrics"))
    assert code == 200
    assert 'fabricsched_state_objects{kind="nodes"}' in text
    assert f'fabricsched_status_writes_total{{outcome="written",topology="{name}"}}' in text


def test_an_extender_address_in_use_stops_the_process_with_the_reason(
    cluster: Any, crds: None, tmp_path: Path
) -> None:
    # A companion that fails (here the extender, which cannot listen) must not leave a process
    # that looks healthy but answers no scheduler.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [sys.executable, "-m", "fabricsched.cli", "run", "--kubeconfig", str(cluster.kubeconfig),
                "--health-address", f"127.0.0.1:{free_port()}", "--extender-address", f"127.0.0.1:{port}"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 1, done.stderr[-2000:]
    assert "fabricsched run: error: extender: OSError" in done.stderr, done.stderr[-2000:]
    assert str(port) in done.stderr.splitlines()[-1], done.stderr[-2000:]

"""A FabricTopology's Prometheus (on the allow-list) that misbehaves: it hangs, trickles, answers
50 MB, answers what is not JSON, or JSON of the wrong types. ``fabricsched run`` stays
responsive and each topology gets ``TelemetryUnavailable`` with a bounded, printable reason.

One loopback HTTP server in the test plays five Prometheus servers at once, one per URL path;
each of five topologies (one node each) names one of them, all allowed by
``--prometheus-allow-url``. While all five misbehave together, a separate process
(``front_flood.py measure``) times ``/filter`` and ``/healthz``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import telemetrykit
from clusterkit import Cluster, NodeFactory
from harness import running_operator
from waiting import pause, wait_for

from fabricsched.api import topology as api
from fabricsched.cluster import samples

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent
HUGE_BYTES = 50 * 1024 * 1024
MEASURE_S = 12
MODES = ("hang", "trickle", "huge", "garbage", "types")
EXPECTED = {"hang": "timed out", "trickle": "timed out", "huge": "larger than",
            "garbage": "not a JSON object", "types": "unreadable"}
FILTER_P99_MS = 250.0
HEALTHZ_P99_MS = 250.0
REASON_MAX = 2048


def huge_answer() -> bytes:
    """A well-formed vector of 50 MB: the worst for the reader (it must not parse it all)."""
    item = b'{"metric":{"leaf":"l-%07d","padding":"' + b"x" * 200 + b'"},"value":[0,"1"]},'
    count = HUGE_BYTES // (len(item) + 2)
    rows = b"".join(item.replace(b"%07d", str(i).zfill(7).encode()) for i in range(count)).rstrip(b",")
    return b'{"status":"success","data":{"resultType":"vector","result":[' + rows + b"]}}"


WRONG_TYPES = json.dumps({"status": "success", "data": {
    "resultType": "vector",
    "result": [{"metric": {"leaf": "\x00\x1b[31m" + "\u202e" * 10_000}, "value": {"not": "a pair"}}, 7, None],
}}).encode()


class Hostile(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.released = threading.Event()
        self.huge = huge_answer()
        self.asked = {mode: 0 for mode in MODES}

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the operator hung up on a trickle or a hang: expected

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Hostile
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        mode = self.path.split("/")[1]
        self.server.asked[mode] = self.server.asked.get(mode, 0) + 1
        try:
            if mode == "hang":
                self.server.released.wait()  # never answers while the test runs
            elif mode == "trickle":
                self._head(10_000)
                for _ in range(10_000):  # a byte every 0.2 s: 2,000 s for the body
                    if self.server.released.is_set():
                        return
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    pause(0.2)
            elif mode == "huge":
                self._send(self.server.huge)
            elif mode == "garbage":
                self._send(b"<html>\x00\xff\xfe not prometheus " + os.urandom(4096))
            else:
                self._send(WRONG_TYPES)
        except OSError:
            return  # the operator gave up: what a hostile server wants to see

    def _head(self, length: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def _send(self, body: bytes) -> None:
        self._head(len(body))
        self.wfile.write(body)


@pytest.fixture(scope="module")
def hostile() -> Iterator[Hostile]:
    server = Hostile()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.released.set()
        server.shutdown()
        server.server_close()


def topology(name: str, selector: dict[str, str], url: str) -> dict[str, Any]:
    rule = {"name": "leaf-errors", "target": "domain", "targetLabel": "leaf", "tier": "leaf",
            "query": "sum by (leaf) (fabric_errors)", "comparison": ">", "threshold": 0}
    return {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": selector},
                     "tiers": [{"name": "leaf", "nodeLabel": samples.TOPOGRAPH.leaf},
                               {"name": "spine", "nodeLabel": samples.TOPOGRAPH.spine}],
                     "health": {"prometheus": {"url": url, "intervalSeconds": 1, "timeoutSeconds": 2,
                                               "defaultRules": {"enabled": False}, "rules": [rule]}}}}


def summary(times: dict[str, list[float]], asked: dict[str, int]) -> str:
    f, h = times["filter"], times["healthz"]
    return (f"hostile Prometheus x5 for {MEASURE_S} s: /filter p50 {percentile(f, 50):.1f} ms "
            f"p99 {percentile(f, 99):.1f} ms max {max(f):.1f} ms ({len(f)} calls); /healthz p50 "
            f"{percentile(h, 50):.1f} ms p99 {percentile(h, 99):.1f} ms max {max(h):.1f} ms; "
            f"requests per mode {asked}")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def test_a_misbehaving_prometheus_leaves_the_operator_responsive_and_telemetry_unavailable(
        cluster: Cluster, repo_root: Path, node_factory: NodeFactory, hostile: Hostile,
        tmp_path: Path) -> None:
    telemetrykit.apply_crds(cluster, repo_root)
    names: dict[str, str] = {}
    hosts: list[str] = []
    for i, mode in enumerate(MODES):
        node = node_factory(1, gpus=8, leaf=f"l{i:02d}", labels={"hostile-mode": mode})
        hosts += node
        names[mode] = f"hostile-{mode}-{uuid.uuid4().hex[:6]}"
    flags = [f"--prometheus-allow-url={hostile.url}/", "--status-interval=1"]
    with running_operator(cluster.kubeconfig, tmp_path, flags) as operator:
        for mode in MODES:
            selector = {**node_factory.selector, "hostile-mode": mode}
            cluster.api.call("POST", f"/apis/{api.GROUP}/{api.VERSION}/{api.PLURAL}",
                             topology(names[mode], selector, f"{hostile.url}/{mode}"))
        try:
            probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": "probe", "namespace": "hostile-probe", "uid": "5b0c2f0e-0000-4000-8000-000000000002"},
                "spec": {"schedulerName": "fabricsched", "containers": [
                    {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
            body = tmp_path / "filter.json"
            body.write_text(json.dumps({"Pod": probe, "NodeNames": hosts}))
            wait_for("every hostile Prometheus asked", lambda: all(hostile.asked.values()), timeout=30)
            measured = subprocess.run(
                [sys.executable, str(HERE / "front_flood.py"), "measure",
                 f"127.0.0.1:{operator.extender_port}", f"127.0.0.1:{operator.health_port}",
                 str(MEASURE_S), str(body)],
                capture_output=True, check=True, timeout=MEASURE_S + 120,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
            times = json.loads(measured.stdout)
            print(summary(times, dict(hostile.asked)))

            def unavailable(mode: str) -> dict[str, Any] | None:
                found = telemetrykit.condition(cluster.api.call(
                    "GET", f"/apis/{api.GROUP}/{api.VERSION}/{api.PLURAL}/{names[mode]}").get("status") or {},
                    "TelemetryUnavailable")
                return found if found and found["status"] == "True" and EXPECTED[mode] in found["message"] \
                    else None

            reasons = {mode: wait_for(f"TelemetryUnavailable ({mode})", lambda m=mode: unavailable(m),
                                      timeout=60) for mode in MODES}
            asked = dict(hostile.asked)
        finally:
            for mode in MODES:
                cluster.api.request("DELETE", f"/apis/{api.GROUP}/{api.VERSION}/{api.PLURAL}/{names[mode]}")
    filter_p99, healthz_p99 = percentile(times["filter"], 99), percentile(times["healthz"], 99)
    print(summary(times, asked))
    for mode, cond in reasons.items():
        print(f"  {mode}: {cond['reason']}: {cond['message'][:160]!r} ({len(cond['message'])} chars)")
        assert len(cond["message"]) <= REASON_MAX and cond["message"].isprintable()
    assert filter_p99 <= FILTER_P99_MS
    assert healthz_p99 <= HEALTHZ_P99_MS

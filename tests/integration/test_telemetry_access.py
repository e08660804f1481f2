"""``fabricsched run`` against a real Prometheus that requires TLS, a client certificate and basic
auth (``--web.config.file``), with the credentials as files in one directory, as the chart
mounts its Secret; and the operator's allow-list, which keeps it from asking any other URL.

Each test has its own nodes, topology and ``fabricsched run``; the Prometheus of a test scrapes
the test exporter every second (``prometheus_harness``).
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import chartkit
import pytest
import telemetrykit
import yaml
from clusterkit import Cluster, NodeFactory, find_binaries_or_skip
from prometheus_harness import Exporter, PrometheusServer, Secured, find_prometheus_or_skip
from telemetrykit import DEGRADE_BUDGET_S, RECOVER_AFTER_S, condition, record, status_of
from waiting import holds_for, wait_for

from fabricsched.api import topology as api

USER, PASSWORD = "fabricsched", "correct horse"


@pytest.fixture(scope="module")
def crds(cluster: Cluster, repo_root: Path) -> None:
    telemetrykit.apply_crds(cluster, repo_root)


@dataclass
class Secure:
    """A secured Prometheus, the credentials directory the operator reads, and the exporter."""

    prometheus: PrometheusServer
    exporter: Exporter
    creds: Path
    hosts: list[str]
    selector: dict[str, str]

    def access(self) -> dict[str, Any]:
        """spec.health.prometheus.access naming the mounted files."""
        return {"basicAuth": {"username": USER, "passwordFile": str(self.creds / "password")},
                "tls": {"caFile": str(self.creds / "ca.crt"), "certFile": str(self.creds / "tls.crt"),
                        "keyFile": str(self.creds / "tls.key")}}

    def args(self, *allowed: str) -> list[str]:
        return [f"--prometheus-allow-url={u}" for u in allowed or (self.prometheus.url,)] + [
            f"--prometheus-credentials-dir={self.creds}"]


@pytest.fixture
def secure(crds: None, node_factory: NodeFactory, tmp_path: Path) -> Iterator[Secure]:
    binary = find_prometheus_or_skip()
    hosts = node_factory(2, gpus=8, leaf="l01")
    exporter = Exporter(hosts, ["l01"]).start()
    secured = Secured.create(tmp_path, {USER: PASSWORD})
    prom = PrometheusServer(binary, tmp_path, exporter, secured).start()
    # The Secret as the chart mounts it: one file per key in one directory.
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "password").write_text(PASSWORD + "\n")
    shutil.copy(secured.pki.ca.cert, creds / "ca.crt")
    shutil.copy(secured.pki.admin.cert, creds / "tls.crt")
    shutil.copy(secured.pki.admin.key, creds / "tls.key")
    try:
        yield Secure(prom, exporter, creds, hosts, node_factory.selector)
    finally:
        prom.stop()
        exporter.stop()


@contextlib.contextmanager
def topology(custom_objects: Any, selector: dict[str, str], url: str,
             access: dict[str, Any] | None, rules: list[dict[str, Any]] | None = None) -> Iterator[str]:
    manifest = telemetrykit.topology_manifest(f"tla-{uuid.uuid4().hex[:8]}", selector, url)
    prom = manifest["spec"]["health"]["prometheus"]
    prom["rules"] = rules or []
    if access is not None:
        prom["access"] = access
    name = manifest["metadata"]["name"]
    custom_objects.create_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL, manifest)
    try:
        yield name
    finally:
        with contextlib.suppress(Exception):
            custom_objects.delete_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL, name)


def telemetry_condition(custom_objects: Any, name: str, status: str) -> dict[str, Any] | None:
    cond = condition(status_of(custom_objects, name), "TelemetryUnavailable")
    return cond if cond is not None and cond["status"] == status else None


def test_with_the_mounted_credentials_a_rising_link_downed_counter_downs_the_link_and_it_recovers(
    secure: Secure, cluster: Cluster, custom_objects: Any, tmp_path: Path
) -> None:
    host = secure.hosts[0]
    with topology(custom_objects, secure.selector, secure.prometheus.url, secure.access()) as name, \
            telemetrykit.operator(cluster, tmp_path, secure.args()):
        wait_for("TelemetryUnavailable=False over TLS and basic auth",
                 lambda: telemetry_condition(custom_objects, name, "False"), timeout=60)
        wait_for("Prometheus to hold the counter before the step",
                 lambda: secure.prometheus.has_scraped(host), timeout=30)
        secure.exporter.link_downed(host, "mlx5_0")
        row, took = telemetrykit.timed(f"node {host} down by ib-link-downed",
                                         lambda: record(status_of(custom_objects, name), "node", host),
                                         DEGRADE_BUDGET_S)
        assert took <= DEGRADE_BUDGET_S
        [source] = row["sources"]
        assert (row["state"], source["rule"], source["source"]) == ("down", "ib-link-downed", "prometheus")
        assert "device mlx5_0" in source["reason"]
        assert record(status_of(custom_objects, name), "node", secure.hosts[1]) is None
        # The counter stays at 1: once the 5 s window no longer holds the step, the rule reads
        # good, the recovery wait starts, and the link is healthy after recoverAfterSeconds.
        def recovering() -> Any:
            row = record(status_of(custom_objects, name), "node", host)
            return row and row.get("recoveringSince")
        wait_for("the recovery wait to start", recovering, timeout=30)
        started = time.monotonic()
        wait_for(f"node {host} healthy again",
                 lambda: record(status_of(custom_objects, name), "node", host) is None, timeout=30)
        assert time.monotonic() - started >= RECOVER_AFTER_S - 1.5


def test_a_wrong_password_gives_telemetry_unavailable_saying_401_and_a_rotated_one_is_picked_up(
    secure: Secure, cluster: Cluster, custom_objects: Any, tmp_path: Path
) -> None:
    (secure.creds / "password").write_text("wrong\n")
    with topology(custom_objects, secure.selector, secure.prometheus.url, secure.access()) as name, \
            telemetrykit.operator(cluster, tmp_path, secure.args()) as proc:
        cond = wait_for("TelemetryUnavailable=True",
                        lambda: telemetry_condition(custom_objects, name, "True"), timeout=60)
        assert cond["reason"] == "PrometheusUnauthorized"
        assert "HTTP 401" in cond["message"] and len(cond["message"]) < 1000
        assert PASSWORD not in cond["message"] and "wrong" not in cond["message"]
        assert proc.poll() is None, "fabricsched run is still up"
        # Rotate the Secret the way the kubelet does: write aside, then rename over.
        (secure.creds / "password.new").write_text(PASSWORD + "\n")
        (secure.creds / "password.new").replace(secure.creds / "password")
        wait_for("TelemetryUnavailable=False after the rotation",
                 lambda: telemetry_condition(custom_objects, name, "False"), timeout=60)


def test_a_missing_password_file_and_an_invalid_rule_are_reported_by_name(
    secure: Secure, cluster: Cluster, custom_objects: Any, tmp_path: Path
) -> None:
    missing = dict(secure.access(), basicAuth={"username": USER, "passwordFile": str(secure.creds / "nope")})
    bad_rule = [{"name": "broken-promql", "query": "rate(node_infiniband_symbol_error_total[5m]"}]
    url = secure.prometheus.url
    nobody = {"fabricsched.io/test-none": uuid.uuid4().hex[:8]}  # two topologies must not share nodes
    with topology(custom_objects, nobody, url, missing) as no_file, \
            topology(custom_objects, secure.selector, url, secure.access(), bad_rule) as bad, \
            telemetrykit.operator(cluster, tmp_path, secure.args()):
        cond = wait_for("TelemetryUnavailable=True (no password file)",
                        lambda: telemetry_condition(custom_objects, no_file, "True"), timeout=60)
        assert cond["reason"] == "CredentialsUnavailable"
        assert f"{secure.creds / 'nope'} does not exist" in cond["message"]
        cond = wait_for("TelemetryUnavailable=True (invalid PromQL)",
                        lambda: telemetry_condition(custom_objects, bad, "True"), timeout=60)
        assert cond["reason"] == "QueryFailed"
        assert cond["message"].startswith("rule broken-promql: bad_data")


class Listener:
    """A loopback HTTP server that counts the requests it gets (the URL a topology must not reach)."""

    def __init__(self) -> None:
        self.requests = 0
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                listener.requests += 1
                self.send_error(404)

            do_GET = do_POST

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def test_a_url_outside_the_allow_list_is_never_requested(
    secure: Secure, cluster: Cluster, custom_objects: Any, tmp_path: Path
) -> None:
    target = Listener()
    try:
        with topology(custom_objects, secure.selector, target.url + "/api", None) as name, \
                telemetrykit.operator(cluster, tmp_path, secure.args()):
            cond = wait_for("TelemetryUnavailable=True (not allowed)",
                            lambda: telemetry_condition(custom_objects, name, "True"), timeout=60)
            assert cond["reason"] == "PrometheusNotAllowed"
            assert f"{target.url}/api is not allowed" in cond["message"]
            # Three evaluation intervals: any request would have been made by now.
            holds_for("no request to the URL outside the allow-list", lambda: target.requests == 0, 3.0)
            assert target.requests == 0
    finally:
        target.stop()


MOUNT = "/etc/fabricsched/prometheus"
"""Where the chart mounts telemetry.prometheus.credentialsSecret; the test stands a folder in for it."""


@pytest.fixture
def helm(tmp_path: Path) -> chartkit.Helm:
    found = find_binaries_or_skip("the chart's tests")
    if found.helm is None:
        pytest.skip("helm is not built; run `make tools`")
    (tmp_path / "helm").mkdir()
    return chartkit.Helm(found.helm, tmp_path / "helm")


def test_fabricsched_run_configured_from_the_chart_queries_the_secured_prometheus(
    secure: Secure, helm: chartkit.Helm, cluster: Cluster, custom_objects: Any, tmp_path: Path
) -> None:
    name = f"tla-chart-{uuid.uuid4().hex[:8]}"
    access = {"basicAuth": {"username": USER, "passwordFile": f"{MOUNT}/password"},
              "tls": {"caFile": f"{MOUNT}/ca.crt", "certFile": f"{MOUNT}/tls.crt",
                      "keyFile": f"{MOUNT}/tls.key"}}
    values = {
        "telemetry": {"prometheus": {"allowedURLs": [secure.prometheus.url],
                                     "credentialsSecret": "prom-creds"}},
        "topology": {"create": True, "name": name, "nodeSelector": {"matchLabels": secure.selector},
                     "health": {"recoverAfterSeconds": RECOVER_AFTER_S, "prometheus": {
                         "url": secure.prometheus.url, "intervalSeconds": 1, "access": access}}},
    }
    docs = helm.render(values, "fabricsched-system")
    pod = chartkit.one(docs, "Deployment")["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "fabricsched")
    mount = next(m for m in container["volumeMounts"] if m["name"] == "prometheus-credentials")
    volume = next(v for v in pod["volumes"] if v["name"] == "prometheus-credentials")
    assert (mount["mountPath"], mount["readOnly"]) == (MOUNT, True)
    assert volume["secret"]["secretName"] == "prom-creds"
    flags = [a for a in container["args"] if a.startswith("--prometheus-")]
    assert flags == [f"--prometheus-allow-url={secure.prometheus.url}",
                     f"--prometheus-credentials-dir={MOUNT}"]
    # The Secret's keys as the kubelet projects them: one file each, in the folder standing in
    # for the mount; the chart's paths point there.
    here = str(secure.creds)
    manifest = chartkit.one(docs, "FabricTopology")
    text = yaml.safe_dump(manifest).replace(MOUNT, here)
    custom_objects.create_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL, yaml.safe_load(text))
    try:
        with telemetrykit.operator(cluster, tmp_path, [f.replace(MOUNT, here) for f in flags]):
            wait_for("TelemetryUnavailable=False with the chart's configuration",
                     lambda: telemetry_condition(custom_objects, name, "False"), timeout=60)
    finally:
        with contextlib.suppress(Exception):
            custom_objects.delete_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL, name)


@pytest.mark.parametrize(("access", "complaint"), [
    ({"headers": [{"name": "Authorization", "value": "Bearer x"}]}, "set by the client"),
    ({"bearerTokenFile": "/etc/fabricsched/prometheus/../../../var/run/secrets/token"}, "may not contain .."),
    ({"bearerTokenFile": "token"}, "should match"),
    ({"tls": {"certFile": "/etc/fabricsched/prometheus/tls.crt"}}, "certFile and keyFile go together"),
    ({"bearerTokenFile": "/a/t", "basicAuth": {"username": "u", "passwordFile": "/a/p"}},
     "exclude each other"),
], ids=["an Authorization header", "a path climbing out", "a relative path", "a certificate without its key",
        "two kinds of credentials"])
def test_the_api_server_refuses_bad_access_at_apply_time(
    crds: None, custom_objects: Any, access: dict[str, Any], complaint: str
) -> None:
    from kubernetes.client import exceptions

    manifest = telemetrykit.topology_manifest(f"tla-bad-{uuid.uuid4().hex[:8]}", {"x": "y"},
                                                "http://prometheus.monitoring:9090")
    manifest["spec"]["health"]["prometheus"]["access"] = access
    with pytest.raises(exceptions.ApiException) as info:
        custom_objects.create_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL, manifest)
    assert info.value.status == 422
    assert complaint in str(info.value.body)

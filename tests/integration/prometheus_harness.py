"""A real Prometheus for the telemetry tests, scraping a tiny exporter the test controls.

``Exporter`` serves, per host, node_exporter's InfiniBand series (``?host=NAME``), and switch
port counters labelled by leaf (``/switch``). ``PrometheusServer`` runs the distribution's
``prometheus`` binary on a free loopback port with its storage in a temporary folder and a 1 s
scrape interval; each host is its own scrape target, relabelled so ``instance`` reads
``host:9100`` as on a real node_exporter. With ``Secured`` it serves HTTPS only, requires a
client certificate from its CA and basic auth (``--web.config.file``); the harness's own calls
then authenticate too. Without the binary the tests skip (``apt-get install prometheus``); under
``CI=true`` they fail instead.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml
from waiting import wait_for

from fabricsched.cluster import certs

SCRAPE_INTERVAL_S = 1.0
DEVICES = ("mlx5_0", "mlx5_1")
RATE_BYTES = 50e9
"""node_infiniband_rate_bytes_per_second of a healthy 400 Gbit/s port."""


def find_prometheus_or_skip() -> Path:
    debian = Path("/usr/bin/prometheus")
    found = shutil.which("prometheus") or (str(debian) if debian.is_file() else None)
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true and the prometheus binary is missing (apt-get install -y prometheus)",
                        pytrace=False)
        pytest.skip("telemetry tests need a prometheus binary: apt-get install -y prometheus")
    return Path(found)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class _Counter:
    """A counter that grows at ``per_s`` from ``since`` (so rate() sees a steady rate)."""

    base: float = 0.0
    per_s: float = 0.0
    since: float = field(default_factory=time.monotonic)

    def value(self, now: float) -> float:
        return self.base + self.per_s * (now - self.since)

    def set_rate(self, per_s: float, now: float) -> None:
        self.base, self.per_s, self.since = self.value(now), per_s, now


class Exporter:
    """The metrics the test steers: per-host InfiniBand ports and per-leaf switch uplinks."""

    def __init__(self, hosts: Iterable[str], leaves: Iterable[str]) -> None:
        self.hosts = list(hosts)
        self.leaves = list(leaves)
        self._lock = threading.Lock()
        self._symbols = {(h, d): _Counter() for h in self.hosts for d in DEVICES}
        self._uplinks = {leaf: _Counter() for leaf in self.leaves}
        self.state = {(h, d): 4 for h in self.hosts for d in DEVICES}
        self.downed = {(h, d): 0 for h in self.hosts for d in DEVICES}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="exporter")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Exporter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def symbol_errors(self, host: str, device: str, per_s: float) -> None:
        """Let a port's symbol error counter grow at ``per_s`` (0: it stops growing)."""
        with self._lock:
            self._symbols[(host, device)].set_rate(per_s, time.monotonic())

    def link_downed(self, host: str, device: str) -> None:
        """The port's link went down once (and came back: the counter steps by one)."""
        with self._lock:
            self.downed[(host, device)] += 1

    def uplink_errors(self, leaf: str, per_s: float) -> None:
        with self._lock:
            self._uplinks[leaf].set_rate(per_s, time.monotonic())

    def host_metrics(self, host: str) -> str:
        now = time.monotonic()
        lines = ["# TYPE node_infiniband_symbol_error_total counter"]
        with self._lock:
            for d in DEVICES:
                lines.append(f'node_infiniband_symbol_error_total{{device="{d}",port="1"}} '
                             f"{self._symbols[(host, d)].value(now):.0f}")
            lines.append("# TYPE node_infiniband_link_downed_total counter")
            lines += [f'node_infiniband_link_downed_total{{device="{d}",port="1"}} {self.downed[(host, d)]}'
                      for d in DEVICES]
            lines.append("# TYPE node_infiniband_state_id gauge")
            lines += [f'node_infiniband_state_id{{device="{d}",port="1"}} {self.state[(host, d)]}'
                      for d in DEVICES]
            lines.append("# TYPE node_infiniband_rate_bytes_per_second gauge")
            lines += [f'node_infiniband_rate_bytes_per_second{{device="{d}",port="1"}} {RATE_BYTES:.0f}'
                      for d in DEVICES]
        return "\n".join(lines) + "\n"

    def switch_metrics(self) -> str:
        now = time.monotonic()
        lines = ["# TYPE fabric_switch_port_errors_total counter"]
        with self._lock:
            for leaf, counter in self._uplinks.items():
                lines.append(f'fabric_switch_port_errors_total{{leaf="{leaf}",port="swp49",role="uplink"}} '
                             f"{counter.value(now):.0f}")
        return "\n".join(lines) + "\n"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                if url.path == "/switch":
                    body = exporter.switch_metrics()
                else:
                    host = urllib.parse.parse_qs(url.query).get("host", [""])[0]
                    if host not in exporter.hosts:
                        self.send_error(404)
                        return
                    body = exporter.host_metrics(host)
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # Prometheus scrapes every second: keep the test output readable

        return Handler


@dataclass(frozen=True)
class Secured:
    """HTTPS with a client certificate required, and basic auth: a fresh CA, a serving
    certificate for 127.0.0.1 and a client certificate (the control plane's PKI generator), and
    bcrypt-hashed users in Prometheus' web configuration."""

    pki: certs.Pki
    users: Mapping[str, str]
    """User name -> password."""

    @classmethod
    def create(cls, workdir: Path, users: Mapping[str, str]) -> Secured:
        return cls(certs.generate(workdir / "pki", datetime.datetime.now(datetime.UTC)), dict(users))

    def web_config(self) -> dict[str, Any]:
        # Cost 4, bcrypt's least: Prometheus checks the hash on every request.
        hashed = {u: bcrypt.hashpw(p.encode(), bcrypt.gensalt(rounds=4)).decode()
                  for u, p in self.users.items()}
        serving = self.pki.apiserver  # its names include 127.0.0.1
        return {
            "tls_server_config": {"cert_file": str(serving.cert), "key_file": str(serving.key),
                                  "client_auth_type": "RequireAndVerifyClientCert",
                                  "client_ca_file": str(self.pki.ca.cert)},
            "basic_auth_users": hashed,
        }

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca.cert))
        context.load_cert_chain(str(self.pki.admin.cert), str(self.pki.admin.key))
        return context

    def authorization(self) -> str:
        user, password = next(iter(self.users.items()))
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class PrometheusServer:
    """``prometheus`` on a free loopback port, scraping ``exporter`` (if any) and the
    ``scrape_configs`` given every second."""

    def __init__(self, binary: Path, workdir: Path, exporter: Exporter | None,
                 secured: Secured | None = None, scrape_configs: Iterable[Mapping[str, Any]] = ()) -> None:
        self.binary = binary
        self.dir = workdir
        self.exporter = exporter
        self.secured = secured
        self.scrape_configs = [dict(c) for c in scrape_configs]
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = workdir / "prometheus.log"

    @property
    def url(self) -> str:
        return f"{'https' if self.secured else 'http'}://127.0.0.1:{self.port}"

    def _open(self, path: str, data: bytes | None = None, timeout: float = 5) -> Any:
        request = urllib.request.Request(f"{self.url}{path}", data=data)
        context = None
        if self.secured is not None:
            request.add_header("Authorization", self.secured.authorization())
            context = self.secured.client_context()
        return urllib.request.urlopen(request, timeout=timeout, context=context)

    def config(self) -> dict[str, Any]:
        interval = f"{SCRAPE_INTERVAL_S:g}s"
        return {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": self._exporter_jobs() + self.scrape_configs,
        }

    def _exporter_jobs(self) -> list[dict[str, Any]]:
        if self.exporter is None:
            return []
        hosts = [{"targets": [self.exporter.address], "labels": {"__param_host": h}}
                 for h in self.exporter.hosts]
        return [
            {"job_name": "node", "metrics_path": "/metrics", "static_configs": hosts,
             # As a node_exporter target would read: instance = host:9100.
             "relabel_configs": [{"source_labels": ["__param_host"], "target_label": "instance",
                                  "replacement": "${1}:9100"}]},
            {"job_name": "switches", "metrics_path": "/switch",
             "static_configs": [{"targets": [self.exporter.address]}]},
        ]

    def start(self) -> PrometheusServer:
        config = self.dir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config()))
        argv = [str(self.binary), f"--config.file={config}", f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]
        if self.secured is not None:
            web = self.dir / "web.yml"
            web.write_text(yaml.safe_dump(self.secured.web_config()))
            argv.append(f"--web.config.file={web}")
        with self._log.open("ab") as log:
            self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        proc = self._proc

        def ready() -> bool:
            if proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = self._log.read_text()[-2000:]
                pytest.fail(f"prometheus did not become ready:\n{tail}", pytrace=False)
            return self._ready()

        deadline = time.monotonic() + 30
        wait_for("prometheus ready", ready, timeout=60)
        return self

    def _ready(self) -> bool:
        try:
            with self._open("/-/ready", timeout=1) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return False

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def has_scraped(self, host: str) -> bool:
        """Whether Prometheus holds two samples of the host's ports: a counter step made now is
        then a step from a known value (a series whose first sample already reads 1 has no increase)."""
        assert self.exporter is not None
        series = f'node_infiniband_link_downed_total{{instance="{host}:9100"}}'
        found = self.query(f"count_over_time({series}[1m])")
        return bool(found) and all(float(r["value"][1]) >= 2 for r in found)

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query, for the test's own checks (what Prometheus sees)."""
        data = urllib.parse.urlencode({"query": promql}).encode()
        with self._open("/api/v1/query", data=data) as resp:
            result: list[dict[str, Any]] = json.load(resp)["data"]["result"]
        return result

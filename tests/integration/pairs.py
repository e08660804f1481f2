"""The chart's pod, as processes: a kube-scheduler with the chart's rendered configuration and a
``fabricsched run`` with the chart's rendered arguments, side by side (a "pair").

``render_chart`` runs the real helm (``helm template``); ``Pair`` starts both processes of one
replica against the local control plane, changing only what differs outside a pod: the
kubeconfig (the chart's is the pod's service account), the loopback ports (two pairs share
one host here) and file paths (certificates). Used by the HA and the mutual TLS tests.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterkit import stop_process
from waiting import wait_for

from fabricsched.cluster import binaries, components, processes

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "fabricsched"
RELEASE = "pair"


def helm_binary(found: binaries.Binaries) -> Path:
    if found.helm is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and helm {binaries.HELM_VERSION} is not built", pytrace=False)
        pytest.skip(f"helm {binaries.HELM_VERSION} is not built; run `make tools`")
    return found.helm


def render_chart(helm: Path, home: Path, namespace: str, values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``helm template`` of the chart with ``values``: every rendered object. The pairs run as
    plain processes on one machine, so the parts that need the pod around them are off: the
    namespace webhook (its certificate is a mounted Secret, its caller the API server through a
    Service) and the fabric page (two pairs would share its loopback port)."""
    home.mkdir(parents=True, exist_ok=True)
    values_file = home / f"values-{uuid.uuid4().hex[:8]}.yaml"
    merged = {"webhook": {"enabled": False}, "dashboard": {"enabled": False}, **dict(values)}
    values_file.write_text(yaml.safe_dump(merged), encoding="utf-8")
    env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data")}
    result = subprocess.run(
        [str(helm), "template", RELEASE, str(CHART), "--namespace", namespace,
         "--kube-version", binaries.kubernetes_version(), "--values", str(values_file)],
        capture_output=True, text=True, env=env, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod["containers"]}


def scheduler_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(one(docs, "ConfigMap")["data"]["kube-scheduler-config.yaml"])
    return loaded


def https_context(ca: Path | None = None, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca) if ca else None)
    if ca is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


def answers(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, context=context, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
        return False


@dataclass
class Pair:
    """One replica of the chart's pod: ``name`` is its pod name (``POD_NAME``, as the chart sets)."""

    name: str
    bins: binaries.Binaries
    kubeconfig: Path
    work: Path
    config: dict[str, Any]
    """The chart's KubeSchedulerConfiguration, parsed."""
    args: list[str]
    """The chart's arguments of the fabricsched container."""
    extender_port: int = 0
    health_port: int = 0
    scheduler_port: int = 0
    files: Mapping[str, Path] = field(default_factory=dict)
    """Chart paths -> local files (the mounted Secret's, for TLS)."""
    scheduler: subprocess.Popen[bytes] | None = None
    operator: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.extender_port, self.health_port, self.scheduler_port = processes.free_ports(3)
        self.work.mkdir(parents=True, exist_ok=True)

    @property
    def scheduler_log(self) -> Path:
        return self.work / "kube-scheduler.log"

    @property
    def operator_log(self) -> Path:
        return self.work / "fabricsched-run.log"

    def _local(self, value: str) -> str:
        for chart_path, local in self.files.items():
            value = value.replace(chart_path, str(local))
        return value.replace("127.0.0.1:8888", f"127.0.0.1:{self.extender_port}")

    def start(self) -> None:
        config = yaml.safe_load(self._local(yaml.safe_dump(self.config)))
        config["clientConnection"]["kubeconfig"] = str(self.kubeconfig)
        config_file = self.work / "kube-scheduler-config.yaml"
        config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
        args = [self._local(a) for a in self.args if not a.startswith("--health-address=")]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "POD_NAME": self.name}
        with self.operator_log.open("ab") as log:
            self.operator = subprocess.Popen(
                [sys.executable, "-m", "fabricsched.cli", *args, f"--kubeconfig={self.kubeconfig}",
                 f"--health-address=127.0.0.1:{self.health_port}",
                 f"--extender-address=127.0.0.1:{self.extender_port}"],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        with self.scheduler_log.open("ab") as log:
            self.scheduler = subprocess.Popen(
                [str(self.bins.kube_scheduler), f"--config={config_file}", "--bind-address=127.0.0.1",
                 f"--secure-port={self.scheduler_port}", f"--authentication-kubeconfig={self.kubeconfig}",
                 f"--authorization-kubeconfig={self.kubeconfig}", "--v=2", *components.gang_flags(self.bins)],
                stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        def ready() -> bool:
            for process, log in ((self.operator, self.operator_log), (self.scheduler, self.scheduler_log)):
                if process is None or process.poll() is not None:
                    tail = processes.log_tail(log, 40)
                    pytest.fail(f"{self.name}: a process exited:\n{tail}", pytrace=False)
            return (answers(f"http://127.0.0.1:{self.health_port}/readyz")
                    and answers(f"https://127.0.0.1:{self.scheduler_port}/healthz", https_context()))
        wait_for(f"pair {self.name} ready", ready, timeout=90)

    def leads_scheduling(self) -> bool:
        """Its kube-scheduler took the scheduler's Lease (it logs so; both pairs share one host
        name here, so the Lease's holder identity does not tell them apart)."""
        return "successfully acquired lease" in self.scheduler_log.read_text(errors="replace").lower()

    def kill(self) -> None:
        """SIGKILL both processes, as a node failure would."""
        for process in (self.scheduler, self.operator):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGKILL)
        for process in (self.scheduler, self.operator):
            if process is not None:
                process.wait(10)

    def stop(self) -> None:
        for process in (self.scheduler, self.operator):
            if process is not None:
                stop_process(process)

"""Helpers of the front-process tests: ``fabricsched run`` with the opt-in webhook registered
(as ``cluster up`` does, on free ports), a labelled namespace, AdmissionReviews posted over
TLS from this process, and the resident memory of the process and its children.

A module of its own, not conftest: the webhook memory and flood tests both use it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import ssl
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clusterkit import Cluster, stop_process, wait_for

from fabricsched.api import admission as contract
from fabricsched.cluster import admission, processes


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    log: Path
    webhook_port: int
    health_port: int
    extender_port: int
    dashboard_port: int
    ca: Path
    labelled: str

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def _ready(served: Served) -> bool:
    if served.process.poll() is not None:
        pytest.fail(f"fabricsched run exited:\n{processes.log_tail(served.log, 40)}", pytrace=False)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{served.health_port}/readyz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def serving(cluster: Cluster, repo_root: Path, log_dir: Path, extra: Sequence[str] = ()) -> Iterator[Served]:
    """``fabricsched run`` with the webhook, the page and a labelled namespace, until the end."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(repo_root / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=120s", "-f", str(repo_root / "crds"))
    webhook_port, health_port, extender_port, dashboard_port = processes.free_ports(4)
    registration = admission.register(cluster.dir, cluster.api, f"https://127.0.0.1:{webhook_port}")
    log = log_dir / "fabricsched-run.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "fabricsched.cli", "run", f"--kubeconfig={cluster.kubeconfig}",
             f"--extender-address=127.0.0.1:{extender_port}", f"--health-address=127.0.0.1:{health_port}",
             f"--dashboard-address=127.0.0.1:{dashboard_port}", *registration.run_flags(), *extra],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    labelled = f"optin-{uuid.uuid4().hex[:10]}"
    cluster.api.call("POST", "/api/v1/namespaces", {"metadata": {
        "name": labelled, "labels": {contract.NAMESPACE_LABEL: contract.NAMESPACE_LABEL_VALUE}}})
    served = Served(process, log, webhook_port, health_port, extender_port, dashboard_port,
                    cluster.dir / "pki" / "ca.crt", labelled)
    try:
        wait_for("fabricsched run ready", lambda: _ready(served), timeout=90)
        yield served
    finally:
        stop_process(process)
        admission.unregister(cluster.api)
        cluster.api.request("DELETE", f"/api/v1/namespaces/{labelled}")


def review(uid: str, operation: str = "CREATE", obj: Any = None) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "operation": operation, "namespace": "team",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
        "object": obj, "oldObject": obj if operation == "UPDATE" else None}}).encode()


class Poster:
    """One kept-alive TLS connection to the webhook (a new one after any error)."""

    def __init__(self, served: Served) -> None:
        self.port = served.webhook_port
        self.context = ssl.create_default_context(cafile=str(served.ca))
        self.connection: http.client.HTTPSConnection | None = None

    def post(self, body: bytes) -> tuple[int, dict[str, Any] | None]:
        if self.connection is None:
            self.connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context,
                                                          timeout=30)
        try:
            self.connection.request("POST", contract.PATH, body, {"Content-Type": "application/json"})
            answer = self.connection.getresponse()
            data = answer.read()
        except (OSError, http.client.HTTPException):
            self.connection.close()
            self.connection = None
            raise
        return answer.status, json.loads(data)["response"] if answer.status == 200 else None


    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def family(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo += _children(current)
    return out


def resident_kb(pid: int) -> int:
    """The resident memory of ``pid`` and its descendants, in KiB."""
    total = 0
    for member in family(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total

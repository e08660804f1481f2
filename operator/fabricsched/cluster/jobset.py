"""The JobSet controller (sigs.k8s.io/jobset) on a local cluster, for the tests that ask for it.

Never started by ``cluster up``. ``start`` installs the CRD that build-tools.sh copied from the
module at the pinned version, starts the controller with a configuration of its own (no leader
election, no metrics, no certificate rotation, health and webhooks on loopback only), and
registers its JobSet webhooks (defaulting and validation) with a loopback URL. Its pod webhooks
are not registered: they place JobSet pods exclusively per topology domain, which is
fabricsched's job here, and a failing pod webhook would stop pod creation cluster-wide.
The webhook serves the API server's own certificate (its SANs name 127.0.0.1), trusted
through the cluster CA. ``Controller.stop`` removes the webhooks again, then the process.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fabricsched.cluster import components, controlplane, errors, processes, rest

COMPONENT = "jobset-controller"
CRD_FILE = "jobset.x-k8s.io_jobsets.yaml"
CRD_NAME = "jobsets.jobset.x-k8s.io"
API = "/apis/jobset.x-k8s.io/v1alpha2"
_MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
_VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
WEBHOOK_NAME = "fabricsched-test-jobset"


@dataclass
class Controller:
    plane: controlplane.ControlPlane
    process: subprocess.Popen[bytes]
    record: processes.ProcessRecord

    def stop(self) -> None:
        with self.plane.client() as api:
            for path in (_MUTATING, _VALIDATING):
                api.request("DELETE", f"{path}/{WEBHOOK_NAME}")
        processes.stop([self.record])
        self.process.wait()


def _configuration(webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "clientConnection": {"qps": 100, "burst": 200},
    }


def _webhook(kind: str, name: str, url: str, ca: bytes, operations: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": WEBHOOK_NAME},
        "webhooks": [{
            "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "clientConfig": {"url": url, "caBundle": base64.b64encode(ca).decode()},
            "rules": [{"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"],
                       "operations": operations, "resources": ["jobsets"]}],
        }],
    }


def _install_crd(api: rest.Client, crd_path: Path, deadline: float) -> None:
    crd = yaml.safe_load(crd_path.read_text(encoding="utf-8"))
    status, body = api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    if status not in (201, 409):
        raise errors.api_error("POST", f"customresourcedefinitions/{CRD_NAME}", status, str(body)[:300])
    while api.request("GET", f"{API}/jobsets")[0] != 200:
        if time.monotonic() > deadline:
            raise errors.ClusterError(f"CRD {CRD_NAME} not served")
        time.sleep(0.1)


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def start(plane: controlplane.ControlPlane, timeout: float = 60.0) -> Controller:
    """The controller running against ``plane``, its webhooks registered; ``MissingBinaries``
    when ``make tools`` did not build it."""
    binary = plane.binaries.jobset
    if binary is None or not (binary.parent / CRD_FILE).is_file():
        raise errors.MissingBinaries("the JobSet controller or its CRD is not built; run `make tools`")
    layout = components.Layout(plane.dir)
    folder = plane.dir / "jobset"
    cert_dir = folder / "certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(plane.dir / "pki" / "apiserver.crt", cert_dir / "tls.crt")
    shutil.copyfile(plane.dir / "pki" / "apiserver.key", cert_dir / "tls.key")
    webhook_port, health_port = processes.free_ports(2)
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(_configuration(webhook_port, health_port, cert_dir)), encoding="utf-8")
    deadline = time.monotonic() + timeout
    with plane.client() as api:
        _install_crd(api, binary.parent / CRD_FILE, deadline)
        argv = [str(binary), f"--config={config}", "--zap-log-level=info"]
        process, record = processes.start(COMPONENT, argv, layout.log(COMPONENT),
                                          {"KUBECONFIG": str(plane.kubeconfig)})
        controller = Controller(plane, process, record)
        try:
            while not _healthy(health_port):
                if not processes.is_alive(record) or time.monotonic() > deadline:
                    raise errors.ComponentFailed(f"{COMPONENT} did not become ready; last lines of "
                                                 f"{record.log}:\n{processes.log_tail(record.log)}")
                time.sleep(0.2)
            ca = (plane.dir / "pki" / "ca.crt").read_bytes()
            base = f"https://127.0.0.1:{webhook_port}"
            api.call("POST", _MUTATING, _webhook(
                "MutatingWebhookConfiguration", "mjobset.fabricsched.io",
                f"{base}/mutate-jobset-x-k8s-io-v1alpha2-jobset", ca, ["CREATE"]))
            api.call("POST", _VALIDATING, _webhook(
                "ValidatingWebhookConfiguration", "vjobset.fabricsched.io",
                f"{base}/validate-jobset-x-k8s-io-v1alpha2-jobset", ca, ["CREATE", "UPDATE"]))
        except BaseException:
            controller.stop()
            raise
    return controller

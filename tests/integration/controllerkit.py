"""The real workload controllers for the tests that ask for them (LeaderWorkerSet; Kueue in
kueuekit.py), started against a test cluster the way ``fabricsched.cluster.jobset`` starts
JobSet's.

``make tools`` (hack/build-tools.sh) builds each at the version its wrapper module
(``hack/<name>/go.mod``) pins, into ``<bin dir>/<name>-<version>``, and copies next to the
binary the files read here from the module at the same pin: its webhook manifest and, for
Kueue, its CRDs. Every controller runs with its own configuration: no leader election, metrics
off, health and webhooks on 127.0.0.1 at free ports. Its webhook configurations are the
project's own manifest with each ``service`` reference replaced by a loopback URL, served with a
certificate the tests issue (the API server's, whose SANs name 127.0.0.1, unless said
otherwise), trusted through ``ca``. ``Controller.stop`` removes them before the process, so a
stopped controller never blocks the API server's admission.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import REPO
from waiting import wait_for

from fabricsched.cluster import binaries, components, controlplane, errors, processes, rest

MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_KIND_PATH = {"MutatingWebhookConfiguration": MUTATING, "ValidatingWebhookConfiguration": VALIDATING}


def pinned(wrapper: str, module: str) -> str:
    """The version of ``module`` that ``hack/<wrapper>/go.mod`` requires (the one built)."""
    text = (REPO / "hack" / wrapper / "go.mod").read_text(encoding="utf-8")
    found = re.search(rf"^\s+{re.escape(module)} (v[0-9][^\s]*)", text, re.MULTILINE)
    if found is None:
        raise AssertionError(f"hack/{wrapper}/go.mod requires no {module}")
    return found.group(1)


def built_set(wrapper: str, module: str, *files: str) -> Path:
    """``<bin dir>/<wrapper>-<version>`` holding the binary ``wrapper`` and ``files``; skips
    (fails under CI=true) naming ``make tools`` when any is missing."""
    folder = binaries.bin_dir() / f"{wrapper}-{pinned(wrapper, module)}"
    missing = [name for name in (wrapper, *files) if not (folder / name).exists()]
    if missing:
        message = f"{', '.join(missing)} not built in {folder}; run `make tools`"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    return folder


@dataclass
class Controller:
    """One running controller and the webhook configurations registered for it."""

    name: str
    plane: controlplane.ControlPlane
    process: subprocess.Popen[bytes]
    record: processes.ProcessRecord
    webhooks: list[tuple[str, str]] = field(default_factory=list)
    """(collection path, name) of each configuration, deleted by ``stop``."""

    def stop(self) -> None:
        with self.plane.client() as api:
            unregister(api, self.webhooks)
        processes.stop([self.record])
        self.process.wait()

    def log_tail(self) -> str:
        return processes.log_tail(self.record.log, 40)


def register(api: rest.Client, configurations: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """The webhook configurations created; (collection path, name) of each."""
    made = []
    for body in configurations:
        path = _KIND_PATH[body["kind"]]
        api.call("POST", path, body)
        made.append((path, body["metadata"]["name"]))
    return made


def unregister(api: rest.Client, made: Sequence[tuple[str, str]]) -> None:
    for path, name in made:
        api.request("DELETE", f"{path}/{name}")


def loopback_webhooks(
    manifest: Path, port: int, ca: bytes, names: Mapping[str, str],
    keep: Callable[[dict[str, Any]], bool] = lambda _: True,
    object_selectors: Mapping[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The webhook configurations of a project's ``manifests.yaml`` (kubebuilder's output):
    each renamed by ``names`` (manifest name -> name here), each webhook for which ``keep`` holds
    calling ``https://127.0.0.1:<port><its path>`` with ``ca`` as bundle, and given the object
    selector ``object_selectors`` names for it (what the project's kustomize patches add)."""
    out = []
    for doc in yaml.safe_load_all(manifest.read_text(encoding="utf-8")):
        if not doc or doc.get("kind") not in _KIND_PATH:
            continue
        hooks = []
        for hook in doc.get("webhooks") or ():
            if not keep(hook):
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                    "caBundle": base64.b64encode(ca).decode()}
            if object_selectors and hook["name"] in object_selectors:
                hook["objectSelector"] = object_selectors[hook["name"]]
            hooks.append(hook)
        if hooks:
            out.append({**doc, "metadata": {"name": names[doc["metadata"]["name"]]}, "webhooks": hooks})
    return out


def install_crd(api: rest.Client, body: dict[str, Any], served: str, timeout: float = 30.0) -> None:
    """``body`` created (an existing one is kept) and answering at ``served``."""
    status, answer = api.request("POST", CRDS, body)
    if status not in (201, 409):
        raise errors.api_error("POST", f"customresourcedefinitions/{body['metadata']['name']}",
                               status, str(answer)[:300])
    wait_for(f"CRD {body['metadata']['name']} served at {served}",
             lambda: api.request("GET", served)[0] == 200, timeout=timeout)


def apiserver_certs(plane: controlplane.ControlPlane, folder: Path) -> Path:
    """``folder/certs`` holding the API server's serving pair as tls.crt/tls.key."""
    cert_dir = folder / "certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(plane.dir / "pki" / "apiserver.crt", cert_dir / "tls.crt")
    shutil.copyfile(plane.dir / "pki" / "apiserver.key", cert_dir / "tls.key")
    return cert_dir


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def launch(plane: controlplane.ControlPlane, name: str, argv: Sequence[str], health_port: int | None,
           timeout: float = 90.0, probe: Callable[[], bool] | None = None,
           env: Mapping[str, str] | None = None) -> Controller:
    """``argv`` running against ``plane`` (its kubeconfig in $KUBECONFIG, and ``env``), once
    its health endpoint on 127.0.0.1:``health_port`` answers ready, or ``probe`` holds for a
    controller without one; the process is stopped again when it is not ready in ``timeout``."""
    layout = components.Layout(plane.dir)
    environment = {"KUBECONFIG": str(plane.kubeconfig), **(env or {})}
    process, record = processes.start(name, list(argv), layout.log(name), environment)
    controller = Controller(name, plane, process, record)

    def ready() -> bool:
        if not processes.is_alive(record):
            raise errors.ComponentFailed(f"{name} exited; last lines of {record.log}:\n"
                                         f"{processes.log_tail(record.log, 40)}")
        return probe() if probe is not None else health_port is not None and _ready(health_port)

    try:
        wait_for(f"{name} ready", ready, timeout=timeout)
    except BaseException:
        print(f"{name}: last lines of {record.log}:\n{processes.log_tail(record.log, 40)}")
        controller.stop()
        raise
    return controller


# --- LeaderWorkerSet --------------------------------------------------------------------------

LWS_MODULE = "sigs.k8s.io/lws"
LWS_API = "/apis/leaderworkerset.x-k8s.io/v1"
LWS_CRD = "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
LWS_LABEL = "leaderworkerset.sigs.k8s.io/name"


def start_lws(plane: controlplane.ControlPlane) -> Controller:
    """The LeaderWorkerSet controller with its LeaderWorkerSet and pod webhooks (the pod ones
    only for pods carrying the LeaderWorkerSet name label, as its kustomize patch selects)."""
    version = pinned("lws", LWS_MODULE)
    folder = built_set("lws", LWS_MODULE, "manifests.yaml")
    crd_file = binaries.bin_dir() / "crds" / f"sigs.k8s.io_lws-{version}" / LWS_CRD
    work = plane.dir / "lws"
    cert_dir = apiserver_certs(plane, work)
    webhook_port, health_port = processes.free_ports(2)
    config = work / "config.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "clientConnection": {"qps": 100, "burst": 200},
    }), encoding="utf-8")
    with plane.client() as api:
        install_crd(api, yaml.safe_load(crd_file.read_text(encoding="utf-8")), f"{LWS_API}/leaderworkersets")
        controller = launch(plane, "lws-controller", [str(folder / "lws"), f"--config={config}"], health_port)
        try:
            pods_with_lws_name = {"matchExpressions": [{"key": LWS_LABEL, "operator": "Exists"}]}
            controller.webhooks = register(api, loopback_webhooks(
                folder / "manifests.yaml", webhook_port, (plane.dir / "pki" / "ca.crt").read_bytes(),
                {"mutating-webhook-configuration": "fabricsched-test-lws-mutating",
                 "validating-webhook-configuration": "fabricsched-test-lws-validating"},
                keep=lambda hook: "disaggregatedset" not in hook["clientConfig"]["service"]["path"],
                object_selectors={"mpod.kb.io": pods_with_lws_name, "vpod.kb.io": pods_with_lws_name}))
        except BaseException:
            controller.stop()
            raise
    return controller

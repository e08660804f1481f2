"""The Kubeflow training operator (PyTorchJob) and the MPI operator (MPIJob ``v2beta1``) against
a test cluster, for the tests that ask for them (controllerkit.py says how controllers run here).

The training operator (github.com/kubeflow/training-operator, ``hack/training-operator/go.mod``'s
pin) runs with ``--enable-scheme=pytorchjob`` only: its own MPIJob is ``kubeflow.org/v1`` under
the same CRD name as the MPI operator's ``v2beta1``, so it stays off. Metrics off, health on
127.0.0.1 at a free port, no leader election. Its flags cannot put the webhook server on
loopback (it listens on every address, at the free port ``--webhook-server-port`` names) nor
name its certificate folder. Two things make the folder the test's own:

- the webhook server (controller-runtime) reads ``$TMPDIR/k8s-webhook-server/serving-certs``:
  the process gets a ``TMPDIR`` of its own holding the test-issued pair;
- its certificate rotator (cert-controller) only checks that the fixed
  ``/tmp/k8s-webhook-server/serving-certs/tls.crt`` exists (a Secret volume would be mounted
  there) and gives up after about a minute otherwise: an empty file is put there when missing,
  never overwritten nor removed (another run may be relying on it).

The rotator keeps the Secret ``training-operator-webhook-cert`` of its namespace
(``MY_POD_NAMESPACE``) when it holds a valid pair (``rotatorcerts``), and writes its CA into the
ValidatingWebhookConfiguration ``validator.training-operator.kubeflow.org``: registered here
before the start, with only the PyTorchJob webhook, on a loopback URL.

The MPI operator (github.com/kubeflow/mpi-operator, ``hack/mpi-operator/go.mod``'s pin) has no
webhook and no flag for its health endpoint: it always listens on :8080 (every address) and
exits when that port is taken (the start then fails with its log). It always runs a leader
election (a Lease in ``--lock-namespace``); it is ready once it holds the Lease.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import rotatorcerts
import yaml
from controllerkit import (
    Controller,
    built_set,
    install_crd,
    launch,
    loopback_webhooks,
    pinned,
    register,
    unregister,
)

from fabricsched.cluster import binaries, controlplane, processes, rest

TRAINING_MODULE = "github.com/kubeflow/training-operator"
MPI_MODULE = "github.com/kubeflow/mpi-operator"
PYTORCH_API = "/apis/kubeflow.org/v1"
MPI_API = "/apis/kubeflow.org/v2beta1"
TRAINING_NAMESPACE = "kubeflow"
TRAINING_SECRET = "training-operator-webhook-cert"
TRAINING_WEBHOOK = "validator.training-operator.kubeflow.org"
"""The configuration name the operator's rotator writes its CA into (fixed in its main.go)."""
ROTATOR_CHECKED = Path("/tmp/k8s-webhook-server/serving-certs/tls.crt")
MPI_LOCK_NAMESPACE = "mpi-operator"
MPI_LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{MPI_LOCK_NAMESPACE}/leases/mpi-operator"


def _crd(module: str, wrapper: str, file: str) -> dict[str, Any]:
    """A CRD build-tools.sh copied from ``module`` at the pin ``hack/<wrapper>/go.mod`` builds."""
    folder = binaries.bin_dir() / "crds" / f"{module.replace('/', '_')}-{pinned(wrapper, module)}"
    loaded: dict[str, Any] = yaml.safe_load((folder / file).read_text(encoding="utf-8"))
    return loaded


def _namespace(api: rest.Client, name: str) -> None:
    status, body = api.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert status in (201, 409), body


def _rotator_mount_stand_in() -> None:
    ROTATOR_CHECKED.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError), ROTATOR_CHECKED.open("x"):
        pass


def start_training_operator(plane: controlplane.ControlPlane) -> Controller:
    """The training operator with only its PyTorchJob controller and webhook (module docstring)."""
    folder = built_set("training-operator", TRAINING_MODULE, "manifests.yaml")
    crd = _crd(TRAINING_MODULE, "training-operator", "kubeflow.org_pytorchjobs.yaml")
    work = plane.dir / "training-operator"
    tmp = work / "tmp"
    cert_dir = tmp / "k8s-webhook-server" / "serving-certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    data = rotatorcerts.issue("training-operator-ca", f"training-operator.{TRAINING_NAMESPACE}.svc")
    for name in ("tls.crt", "tls.key"):
        (cert_dir / name).write_bytes(data[name])
    _rotator_mount_stand_in()
    webhook_port, health_port = processes.free_ports(2)
    argv = [str(folder / "training-operator"), "--enable-scheme=pytorchjob", "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{health_port}", f"--webhook-server-port={webhook_port}",
            "--kube-api-qps=100", "--kube-api-burst=200", "--zap-log-level=info"]
    with plane.client() as api:
        install_crd(api, crd, f"{PYTORCH_API}/pytorchjobs")
        _namespace(api, TRAINING_NAMESPACE)
        api.request("DELETE", f"/api/v1/namespaces/{TRAINING_NAMESPACE}/secrets/{TRAINING_SECRET}")
        api.call("POST", f"/api/v1/namespaces/{TRAINING_NAMESPACE}/secrets",
                 rotatorcerts.secret(TRAINING_SECRET, TRAINING_NAMESPACE, data))
        made = register(api, loopback_webhooks(
            folder / "manifests.yaml", webhook_port, data["ca.crt"],
            {"validating-webhook-configuration": TRAINING_WEBHOOK},
            keep=lambda hook: hook["name"].startswith("validator.pytorchjob.")))
        try:
            controller = launch(plane, "training-operator", argv, health_port, timeout=120,
                                env={"TMPDIR": str(tmp), "MY_POD_NAMESPACE": TRAINING_NAMESPACE})
        except BaseException:
            unregister(api, made)
            raise
        controller.webhooks = made
    return controller


def start_mpi_operator(plane: controlplane.ControlPlane) -> Controller:
    """The MPI operator for ``kubeflow.org/v2beta1`` MPIJobs (module docstring)."""
    folder = built_set("mpi-operator", MPI_MODULE)
    crd = _crd(MPI_MODULE, "mpi-operator", "kubeflow.org_mpijobs.yaml")
    argv = [str(folder / "mpi-operator"), f"--lock-namespace={MPI_LOCK_NAMESPACE}", "--monitoring-port=0",
            "--kube-api-qps=100", "--kube-api-burst=200"]
    with plane.client() as api:
        install_crd(api, crd, f"{MPI_API}/mpijobs")
        _namespace(api, MPI_LOCK_NAMESPACE)

        def leading() -> bool:
            status, lease = api.request("GET", MPI_LEASE)
            return status == 200 and bool((lease.get("spec") or {}).get("holderIdentity"))

        return launch(plane, "mpi-operator", argv, None, timeout=120, probe=leading)

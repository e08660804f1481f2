"""The Kubeflow Trainer v2 controller manager (TrainJob -> JobSet) against a test cluster, for the
tests that ask for it (controllerkit.py says how controllers run here).

github.com/kubeflow/trainer/v2 at ``hack/trainer/go.mod``'s pin, started with a configuration
file of its own (``--config``): no leader election, metrics off, health and webhooks on
127.0.0.1 at free ports, its certificate management off (no rotator: the tests issue the
certificate), the client at 100 qps. The configuration has no certificate folder: the webhook
server (controller-runtime) reads ``$TMPDIR/k8s-webhook-server/serving-certs``, so the process
gets a ``TMPDIR`` of its own holding the API server's pair (its SANs name 127.0.0.1). Its
webhooks (TrainJob defaulting and validation, TrainingRuntime and ClusterTrainingRuntime
validation; none on pods) are its manifest's, renamed, on a loopback URL, with the object
selectors its kustomize patch adds.

It needs the JobSet CRD before it starts (it watches the JobSets it makes): the JobSet controller
(``fabricsched.cluster.jobset``) must run first, and it makes the Jobs of the trainer's JobSet.
"""

from __future__ import annotations

import shutil

import yaml
from controllerkit import Controller, built_set, install_crd, launch, loopback_webhooks, pinned, register

from fabricsched.cluster import binaries, controlplane, processes

TRAINER_MODULE = "github.com/kubeflow/trainer/v2"
TRAINER_API = "/apis/trainer.kubeflow.org/v1alpha1"
CRDS = {"trainjobs": "trainer.kubeflow.org_trainjobs.yaml",
        "trainingruntimes": "trainer.kubeflow.org_trainingruntimes.yaml",
        "clustertrainingruntimes": "trainer.kubeflow.org_clustertrainingruntimes.yaml"}
"""Plural -> the CRD file build-tools.sh copies from the module at the pin."""
VALIDATION_OFF = {"matchExpressions": [
    {"key": "trainer.kubeflow.org/webhook-validation", "operator": "NotIn", "values": ["disabled"]}]}


def _configuration(webhook_port: int, health_port: int) -> dict[str, object]:
    return {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "certManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "clientConnection": {"qps": 100, "burst": 200},
    }


def start_trainer(plane: controlplane.ControlPlane) -> Controller:
    """The trainer controller manager with its CRDs and webhooks (module docstring)."""
    version = pinned("trainer", TRAINER_MODULE)
    folder = built_set("trainer", TRAINER_MODULE, "manifests.yaml")
    crd_dir = binaries.bin_dir() / "crds" / f"{TRAINER_MODULE.replace('/', '_')}-{version}"
    work = plane.dir / "trainer"
    tmp = work / "tmp"
    cert_dir = tmp / "k8s-webhook-server" / "serving-certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(plane.dir / "pki" / "apiserver.crt", cert_dir / "tls.crt")
    shutil.copyfile(plane.dir / "pki" / "apiserver.key", cert_dir / "tls.key")
    webhook_port, health_port = processes.free_ports(2)
    config = work / "config.yaml"
    config.write_text(yaml.safe_dump(_configuration(webhook_port, health_port)), encoding="utf-8")
    with plane.client() as api:
        for plural, file in CRDS.items():
            install_crd(api, yaml.safe_load((crd_dir / file).read_text(encoding="utf-8")),
                        f"{TRAINER_API}/{plural}")
        controller = launch(plane, "trainer-controller-manager",
                            [str(folder / "trainer"), f"--config={config}", "--zap-log-level=info"],
                            health_port, timeout=120, env={"TMPDIR": str(tmp)})
        try:
            controller.webhooks = register(api, loopback_webhooks(
                folder / "manifests.yaml", webhook_port, (plane.dir / "pki" / "ca.crt").read_bytes(),
                {"mutating-webhook-configuration": "fabricsched-test-trainer-mutating",
                 "validating-webhook-configuration": "fabricsched-test-trainer-validating"},
                object_selectors={"validator.clustertrainingruntime.trainer.kubeflow.org": VALIDATION_OFF,
                                  "validator.trainingruntime.trainer.kubeflow.org": VALIDATION_OFF}))
        except BaseException:
            controller.stop()
            raise
    return controller

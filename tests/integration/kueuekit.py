"""Kueue (sigs.k8s.io/kueue, the version hack/kueue/go.mod pins) against a test cluster, its
webhooks on loopback, Topology-Aware Scheduling and the visibility server off.

Kueue's certificates. With ``internalCertManagement`` off, Kueue reads a metrics certificate
from the fixed path /etc/kueue/metrics/certs even with metrics off, so it stays on: Kueue's
certificate rotator keeps the Secret ``kueue-webhook-server-cert`` in its namespace when that
Secret already holds a valid CA (named ``kueue-ca``) and a server certificate for
``kueue-webhook-service.<namespace>.svc``; it writes them into the webhook's certificate folder
and puts the CA into the webhook configurations and the conversion webhooks of the CRDs it
manages. The tests issue that Secret here, with 127.0.0.1 among the server certificate's SANs,
so the loopback URLs verify; the configurations and CRDs are created with the same CA already.
"""

from __future__ import annotations

import base64
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

from fabricsched.cluster import controlplane, processes, rest

MODULE = "sigs.k8s.io/kueue"
API = "/apis/kueue.x-k8s.io/v1beta2"
NAMESPACE = "kueue-system"
SERVICE = "kueue-webhook-service"
SECRET = "kueue-webhook-server-cert"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
FRAMEWORKS = ["batch/job", "jobset.x-k8s.io/jobset"]
"""Only these: the webhooks of the others (pods, Deployments...) are not registered."""
WEBHOOK_GROUPS = {"kueue.x-k8s.io", "jobset.x-k8s.io", "batch"}
CONVERTED = ("clusterqueues", "localqueues", "workloads", "resourceflavors", "cohorts", "multikueueclusters")
"""The CRDs whose conversion webhook Kueue's rotator fills in (it needs one on each)."""


def kueue_version() -> str:
    return pinned("kueue", MODULE)


def issue_secret_data() -> dict[str, bytes]:
    """ca.crt/ca.key/tls.crt/tls.key as Kueue's rotator keeps them (see the module docstring)."""
    return rotatorcerts.issue("kueue-ca", f"{SERVICE}.{NAMESPACE}.svc")


def _install_crds(api: rest.Client, crd_dir: Path, port: int, ca: bytes) -> None:
    for path in sorted(crd_dir.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        plural = crd["spec"]["names"]["plural"]
        if plural in CONVERTED:
            crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"url": f"https://127.0.0.1:{port}/convert",
                                 "caBundle": base64.b64encode(ca).decode()}}}
        served = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
        install_crd(api, crd, f"/apis/kueue.x-k8s.io/{served}/{plural}")


def _configuration(webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": NAMESPACE,
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": True, "webhookServiceName": SERVICE,
                                   "webhookSecretName": SECRET},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "clientConnection": {"qps": 100, "burst": 200},
        "integrations": {"frameworks": FRAMEWORKS},
    }


def _wanted(hook: dict[str, Any]) -> bool:
    groups = {group for rule in hook.get("rules") or () for group in rule.get("apiGroups") or ()}
    return bool(groups) and groups <= WEBHOOK_GROUPS


def start(plane: controlplane.ControlPlane) -> Controller:
    """Kueue running against ``plane`` with the JobSet and batch Job integrations (the JobSet
    controller must run too), its CRDs installed, its webhooks registered on loopback."""
    folder = built_set("kueue", MODULE, "bases", "manifests.yaml")
    work = plane.dir / "kueue"
    cert_dir = work / "certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    webhook_port, health_port = processes.free_ports(2)
    config = work / "config.yaml"
    config.write_text(yaml.safe_dump(_configuration(webhook_port, health_port, cert_dir)), encoding="utf-8")
    data = issue_secret_data()
    for name in ("tls.crt", "tls.key"):  # as a Secret volume would hold them: the rotator reads, not writes
        (cert_dir / name).write_bytes(data[name])
    with plane.client() as api:
        status, body = api.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        assert status in (201, 409), body
        api.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}")
        api.call("POST", f"/api/v1/namespaces/{NAMESPACE}/secrets",
                 rotatorcerts.secret(SECRET, NAMESPACE, data))
        _install_crds(api, folder / "bases", webhook_port, data["ca.crt"])
        # Registered before Kueue starts: its rotator waits until it has put the CA into them.
        configurations = loopback_webhooks(
            folder / "manifests.yaml", webhook_port, data["ca.crt"],
            {"mutating-webhook-configuration": "kueue-mutating-webhook-configuration",
             "validating-webhook-configuration": "kueue-validating-webhook-configuration"},
            keep=_wanted)
        made = register(api, configurations)
        gates = "TopologyAwareScheduling=false,VisibilityOnDemand=false"
        try:
            controller = launch(plane, "kueue", [str(folder / "kueue"), f"--config={config}",
                                                 f"--feature-gates={gates}"], health_port, timeout=120)
        except BaseException:
            unregister(api, made)
            raise
        controller.webhooks = made
    return controller


def queues(api: rest.Client, namespace: str, gpus: int, *, preemption: bool = True) -> str:
    """A ResourceFlavor, a ClusterQueue of ``gpus`` GPUs (CPU and memory ample) admitting from
    ``namespace`` and, with ``preemption``, evicting lower priorities in its queue, and a
    LocalQueue in ``namespace`` pointing at it; returns the LocalQueue's name."""
    name = f"cq-{namespace}"
    api.call("POST", f"{API}/resourceflavors", {"apiVersion": "kueue.x-k8s.io/v1beta2",
                                               "kind": "ResourceFlavor", "metadata": {"name": name}})
    quota = [{"name": "cpu", "nominalQuota": "1000"}, {"name": "memory", "nominalQuota": "10Ti"},
             {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}]
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                            "flavors": [{"name": name, "resources": quota}]}],
    }
    if preemption:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    api.call("POST", f"{API}/clusterqueues", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                                             "metadata": {"name": name}, "spec": spec})
    api.call("POST", f"{API}/namespaces/{namespace}/localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "team"},
        "spec": {"clusterQueue": name}})
    return "team"


def delete_queues(api: rest.Client, namespace: str) -> None:
    name = f"cq-{namespace}"
    api.request("DELETE", f"{API}/namespaces/{namespace}/localqueues/team")
    api.request("DELETE", f"{API}/clusterqueues/{name}")
    api.request("DELETE", f"{API}/resourceflavors/{name}")

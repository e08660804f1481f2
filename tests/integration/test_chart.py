"""The Helm chart, with the real helm, API server and kube-scheduler.

- `helm lint --strict` and `helm template` with the default values and with every preset;
  values.schema.json refuses bad values.
- The chart's KubeSchedulerConfiguration is the Python rendering of the one shared template.
- Every rendered object is accepted by the API server (`kubectl apply --dry-run=server`), in a
  namespace that warns about the `restricted` Pod Security profile.
- The rendered RBAC, applied for real: `kubectl auth can-i` as the chart's service account, the
  scheduler rules compared with the live system:kube-scheduler, and the real kube-scheduler run
  with the rendered configuration as that service account (it must take its own Lease and hit no
  `forbidden`).
- hack/kind-gpu.sh gives a node GPU capacity.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartkit import CHART, RELEASE, REPO, Helm, Kubectl, of_kind, one
from clusterkit import stop_process
from cryptography import x509
from waiting import holds_for, wait_for

from fabricsched.api import admission, schedconfig
from fabricsched.api import topology as api
from fabricsched.cluster import binaries

pytestmark = pytest.mark.integration

SERVICE_ACCOUNT = f"{RELEASE}-fabricsched"
LEASE_NAME = "fabricsched-scheduler"
"""The scheduler's leader-election Lease (``resourceName`` in kube-scheduler-config.yaml.tmpl)."""

# Value sets rendered, linted and dry-run applied; ids read as sentences.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "the default values": {},
    "the topograph preset with a FabricTopology": {"topology": {"create": True, "preset": "topograph"}},
    "the nvidia preset with a FabricTopology": {"topology": {"create": True, "preset": "nvidia"}},
    "the aws preset with a FabricTopology": {"topology": {"create": True, "preset": "aws"}},
    "the gke preset with a FabricTopology": {"topology": {"create": True, "preset": "gke"}},
    "custom tiers, health and a cordoned leaf": {
        "topology": {
            "create": True, "name": "ib-east", "nodeSelector": {},
            "tiers": [{"name": "su", "nodeLabel": "example.com/su", "oversubscription": 2.0},
                      {"name": "spine", "nodeLabel": "example.com/spine"}],
            "rails": 2, "railDevices": ["mlx5_0", "mlx5_1"], "gpuBandwidthGbps": 200,
            "health": {"recoverAfterSeconds": 60, "degradedCapacity": 0.25},
            "links": [{"tier": "su", "domain": "su07", "state": "degraded", "capacity": 0.25,
                       "reason": "4 of 16 uplinks flapping"}],
        }
    },
    "a ServiceMonitor, extra args and no authentication reader": {
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
        "rbac": {"authenticationReader": False},
        "scheduler": {"extraArgs": ["--kube-api-qps=100"]},
        "fabricsched": {"extraArgs": ["--log-format=json"]},
        "priorityClassName": "system-cluster-critical",
        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
    },
    "a service account made elsewhere": {"serviceAccount": {"create": False, "name": "pre-made"}},
    "mutual TLS to the extender and one replica": {"extender": {"tls": {"enabled": True}}, "replicas": 1},
}


# --- helm lint and the values schema -----------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=list(VALUE_SETS))
def test_helm_lint_strict_passes_with(helm: Helm, values: dict[str, Any], tmp_path: Path) -> None:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values), encoding="utf-8")
    result = helm.run("lint", "--strict", str(CHART), "--kube-version", binaries.kubernetes_version(),
                      "--values", str(values_file), "--namespace", "fabricsched-system")
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        pytest.param({"fabricsched": {"healthPort": 8888}}, "healthPort",
                     id="the health port may not take the extender's 8888"),
        pytest.param({"scheduler": {"securePort": 0}}, "securePort",
                     id="the scheduler needs its secure port"),
        pytest.param({"sheduler": {}}, "sheduler", id="a misspelt top-level key is refused"),
        pytest.param({"fabricsched": {"restartPlacement": "same"}}, "restartPlacement",
                     id="a restart placement other than previous or fresh is refused"),
        pytest.param({"topology": {"links": [{"tier": "leaf", "domain": "l1", "state": "broken"}]}}, "state",
                     id="a link state outside healthy, degraded, down is refused"),
        pytest.param({"metrics": {"serviceMonitor": {"interval": "30 seconds"}}}, "interval",
                     id="a scrape interval must be a duration"),
        pytest.param({"topology": {"create": True, "preset": "azure"}}, "azure",
                     id="an unknown preset is refused when a topology is created"),
        pytest.param({"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}},
                     "metrics.service.enabled", id="a ServiceMonitor needs the metrics Service"),
    ],
)
def test_bad_values_are_refused(helm: Helm, values: dict[str, Any], complaint: str) -> None:
    result = helm.template(values, "fabricsched-system", check=False)
    assert result.returncode != 0, f"helm accepted {values}"
    assert complaint in result.stderr


# --- what the templates render ------------------------------------------------------------------


def test_default_render_has_one_deployment_and_no_optional_objects(helm: Helm) -> None:
    docs = helm.render({}, "fabricsched-system")
    kinds = sorted(doc["kind"] for doc in docs)
    assert kinds == sorted([
        "ServiceAccount", "ConfigMap", "ClusterRole", "ClusterRole", "ClusterRoleBinding",
        "ClusterRoleBinding", "ClusterRoleBinding", "Role", "RoleBinding", "RoleBinding", "Service",
        "Deployment",
        # The namespace opt-in webhook (on by default): its certificate, Service and configuration.
        "Secret", "Service", "MutatingWebhookConfiguration",
        "Role", "RoleBinding",  # the wake-up object's (rbac-wakeup.yaml)
        "NetworkPolicy",  # who may reach the pod's ports (networkpolicy.yaml)
    ])
    for doc in docs:
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"):
            assert doc["metadata"]["namespace"] in ("fabricsched-system", "kube-system"), doc["metadata"]


def test_deployment_runs_the_scheduler_and_fabricsched_side_by_side(helm: Helm) -> None:
    deployment = one(helm.render({}, "fabricsched-system"), "Deployment")
    spec = deployment["spec"]
    # Two pairs, one scheduling; an update replaces one pod at a time (docs/install.md).
    assert spec["replicas"] == 2
    rolling = {"maxSurge": 0, "maxUnavailable": 1}
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": rolling}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    containers = {c["name"]: c for c in pod["containers"]}
    assert set(containers) == {"kube-scheduler", "fabricsched"}

    scheduler = containers["kube-scheduler"]
    assert scheduler["image"] == f"registry.k8s.io/kube-scheduler:{binaries.kubernetes_version()}"
    assert "--config=/etc/fabricsched/kube-scheduler-config.yaml" in scheduler["args"]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert scheduler[probe]["httpGet"]["scheme"] == "HTTPS"
        assert scheduler[probe]["httpGet"]["port"] == "scheduler"

    fabric = containers["fabricsched"]
    assert fabric["image"] == "fabricsched:0.1.0"
    assert fabric["args"][0] == "run"
    assert "--health-address=0.0.0.0:8081" in fabric["args"]
    assert "--events-namespace=fabricsched-system" in fabric["args"]
    assert "--namespace-for-leases=fabricsched-system" in fabric["args"]
    assert "--leader-elect" in fabric["args"]
    assert not [a for a in fabric["args"] if a.startswith("--extender-tls")]
    assert fabric["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert fabric["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # The extender answers the scheduler on the pod's loopback; no port of it is published.
    assert [p["containerPort"] for p in fabric["ports"]] == [8081, 8443]


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=list(VALUE_SETS))
def test_every_container_is_locked_down_with(helm: Helm, values: dict[str, Any]) -> None:
    pod = one(helm.render(values, "fabricsched-system"), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]


@pytest.mark.parametrize("namespace", ["fabricsched-system", "kube-system"])
def test_scheduler_config_is_the_python_rendering_of_the_shared_template(helm: Helm, namespace: str) -> None:
    configmap = one(helm.render({}, namespace), "ConfigMap", "-scheduler-config")
    expected = schedconfig.render(schedconfig.SchedulerConfigOptions(
        kubeconfig="", extender_url="http://127.0.0.1:8888", lease_namespace=namespace))
    assert configmap["data"]["kube-scheduler-config.yaml"] == expected


def test_mutual_tls_config_is_the_python_rendering_and_each_container_mounts_its_own_key(helm: Helm) -> None:
    docs = helm.render({"extender": {"tls": {"enabled": True}}}, "fabricsched-system")
    configmap = one(docs, "ConfigMap", "-scheduler-config")
    tls = schedconfig.ExtenderTLS("/etc/fabricsched-tls/ca.crt", "/etc/fabricsched-tls/tls.crt",
                                  "/etc/fabricsched-tls/tls.key")
    expected = schedconfig.render(schedconfig.SchedulerConfigOptions(
        kubeconfig="", extender_url="https://127.0.0.1:8888", lease_namespace="fabricsched-system", tls=tls))
    assert configmap["data"]["kube-scheduler-config.yaml"] == expected
    secret = one(docs, "Secret", "-extender-tls")
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key", "client.crt", "client.key"}
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    keys = {name: {i["key"] for i in volumes[name]["secret"]["items"]}
            for name in ("scheduler-extender-tls", "fabricsched-extender-tls")}
    assert keys == {"scheduler-extender-tls": {"ca.crt", "client.crt", "client.key"},
                    "fabricsched-extender-tls": {"ca.crt", "tls.crt", "tls.key"}}
    fabric = {c["name"]: c for c in pod["containers"]}["fabricsched"]
    assert "--extender-client-ca=/etc/fabricsched-tls/ca.crt" in fabric["args"]


def _scheduler_image(helm: Helm, values: Mapping[str, Any], kube_version: str) -> str:
    deployment = one(helm.render(values, "fabricsched-system", kube_version), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    return str({c["name"]: c for c in pod["containers"]}["kube-scheduler"]["image"])


@pytest.mark.parametrize(("cluster", "tag"), [
    ("v1.37.2", "v1.37.2"), ("v1.36.3-eks-113cf36", "v1.36.3"), ("v1.35.1+k3s1", "v1.35.1"),
    ("1.34.4-gke.1000", "v1.34.4"),
], ids=["plain release", "EKS suffix", "k3s build metadata", "GKE, no leading v"])
def test_scheduler_image_defaults_to_the_clusters_own_version(helm: Helm, cluster: str, tag: str) -> None:
    assert _scheduler_image(helm, {}, cluster) == f"registry.k8s.io/kube-scheduler:{tag}"


def test_an_explicit_scheduler_tag_wins_over_the_cluster_version(helm: Helm) -> None:
    values = {"scheduler": {"image": {"repository": "mirror.example/kube-scheduler", "tag": "v1.37.1"}}}
    assert _scheduler_image(helm, values, "v1.36.3-eks-1") == "mirror.example/kube-scheduler:v1.37.1"


@pytest.mark.parametrize(("values", "names"), [
    ({}, ("nvidia.com/gpu",)),
    ({"topology": {"gpuResource": "amd.com/gpu"}}, ("amd.com/gpu",)),
    ({"scheduler": {"gpuResources": ["nvidia.com/gpu", "amd.com/gpu"]}}, ("nvidia.com/gpu", "amd.com/gpu")),
    ({"scheduler": {"gpuResources": ["nvidia.com/gpu"]},
      "topology": {"create": True, "gpuResource": "amd.com/gpu"}}, ("nvidia.com/gpu", "amd.com/gpu")),
    ({"scheduler": {"gpuResources": ["amd.com/gpu"]},
      "topology": {"create": True, "gpuResource": "amd.com/gpu"}}, ("amd.com/gpu",)),
], ids=["default", "the topology's resource", "a list", "the created topology's resource is added",
        "no repeats"])
def test_managed_resources_follow_the_gpu_resources_as_cluster_up_renders_them(
        helm: Helm, values: dict[str, Any], names: tuple[str, ...]) -> None:
    rendered = one(helm.render(values, "fabricsched-system"), "ConfigMap", "-scheduler-config")
    expected = schedconfig.render(schedconfig.SchedulerConfigOptions(
        kubeconfig="", extender_url="http://127.0.0.1:8888", lease_namespace="fabricsched-system",
        gpu_resources=names))
    assert rendered["data"]["kube-scheduler-config.yaml"] == expected
    (extender,) = yaml.safe_load(expected)["extenders"]
    assert [r["name"] for r in extender["managedResources"]] == list(names)


def test_a_gpu_resource_that_is_not_a_resource_name_is_refused(helm: Helm) -> None:
    result = helm.template({"scheduler": {"gpuResources": ['nvidia.com/gpu"},{"x']}}, "fabricsched-system",
                           check=False)
    assert result.returncode != 0 and "gpuResources" in result.stderr


def test_scheduler_config_names_the_lease_the_role_grants(helm: Helm) -> None:
    docs = helm.render({}, "fabricsched-system")
    config = yaml.safe_load(one(docs, "ConfigMap")["data"]["kube-scheduler-config.yaml"])
    election = config["leaderElection"]
    assert election["resourceName"] == LEASE_NAME != "kube-scheduler"
    assert election["resourceNamespace"] == "fabricsched-system"
    role = one(docs, "Role", "-leader-election")
    named = [rule for rule in role["rules"] if rule.get("resourceNames")]
    assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                      "resourceNames": [LEASE_NAME, "fabricsched"], "verbs": ["get", "update"]}]
    assert [p["schedulerName"] for p in config["profiles"]] == [schedconfig.SCHEDULER_NAME]


def test_rbac_has_no_wildcards_and_no_secrets(helm: Helm) -> None:
    docs = helm.render({}, "fabricsched-system")
    rules = [rule for doc in of_kind(docs, "ClusterRole") + of_kind(docs, "Role") for rule in doc["rules"]]
    assert rules
    for rule in rules:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], rule
        assert "secrets" not in rule["resources"], rule
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
    roles = {ref["roleRef"]["name"] for ref in of_kind(docs, "ClusterRoleBinding")}
    assert "cluster-admin" not in roles and "system:kube-scheduler" not in roles


@pytest.mark.parametrize("preset", ["topograph", "nvidia", "aws", "gke", "nvlink", "topograph-nvlink"])
def test_preset_creates_a_valid_topology_with_its_label_set(helm: Helm, preset: str) -> None:
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    values = chart_values["topology"]["presets"][preset]
    topology = one(helm.render({"topology": {"create": True, "preset": preset}}, "ns"), "FabricTopology")
    assert topology["apiVersion"] == api.API_VERSION
    assert "namespace" not in topology["metadata"], "FabricTopology is cluster-scoped"
    spec = api.FabricTopologySpec.model_validate(topology["spec"])
    assert [t.node_label for t in spec.tiers] == [t["nodeLabel"] for t in values["tiers"]]
    assert spec.node_selector.to_wire() == api.LabelSelector.model_validate(values["nodeSelector"]).to_wire()


def test_custom_tiers_override_the_preset(helm: Helm) -> None:
    values = VALUE_SETS["custom tiers, health and a cordoned leaf"]
    topology = one(helm.render(values, "ns"), "FabricTopology")
    spec = api.FabricTopologySpec.model_validate(topology["spec"])
    assert [t.node_label for t in spec.tiers] == ["example.com/su", "example.com/spine"]
    assert spec.node_selector == api.LabelSelector()
    assert spec.rails == 2 and spec.rail_devices == ["mlx5_0", "mlx5_1"]
    assert spec.health.recover_after_seconds == 60
    assert [(link.domain, link.state) for link in spec.links] == [("su07", api.LinkState.DEGRADED)]
    assert topology["metadata"]["annotations"]["fabricsched.io/preset"] == "custom"


def test_service_monitor_scrapes_the_metrics_service(helm: Helm) -> None:
    docs = helm.render(VALUE_SETS["a ServiceMonitor, extra args and no authentication reader"], "monitoring")
    monitor, service = one(docs, "ServiceMonitor"), one(docs, "Service", "-metrics")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
    assert not [rb for rb in of_kind(docs, "RoleBinding") if rb["metadata"]["namespace"] == "kube-system"]


def _fabricsched_args(docs: Sequence[dict[str, Any]]) -> list[str]:
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    return list({c["name"]: c for c in pod["containers"]}["fabricsched"]["args"])


def test_restart_placement_is_passed_to_fabricsched_run(helm: Helm) -> None:
    # The chart's default is the product's (previous); fresh restores the old behaviour.
    assert "--restart-placement=previous" in _fabricsched_args(helm.render({}, "fabricsched-system"))
    fresh = helm.render({"fabricsched": {"restartPlacement": "fresh"}}, "fabricsched-system")
    assert "--restart-placement=fresh" in _fabricsched_args(fresh)


def test_the_webhook_is_the_one_cluster_up_registers_but_through_its_service(helm: Helm) -> None:
    docs = helm.render({}, "fabricsched-system")
    configuration = one(docs, "MutatingWebhookConfiguration")
    [webhook] = configuration["webhooks"]
    client_config = webhook.pop("clientConfig")
    expected = admission.webhook({})
    expected.pop("clientConfig")
    assert webhook == expected
    service = one(docs, "Service", "-webhook")
    expected_service = {"name": service["metadata"]["name"], "namespace": "fabricsched-system",
                        "path": admission.PATH, "port": 443}
    assert client_config["service"] == expected_service
    assert service["spec"]["ports"] == [{"name": "webhook", "port": 443, "targetPort": "webhook",
                                         "protocol": "TCP"}]
    args = _fabricsched_args(docs)
    assert "--webhook-address=0.0.0.0:8443" in args
    assert "--webhook-gpu-resource=nvidia.com/gpu" in args


def test_the_generated_certificate_names_the_service_and_chains_to_the_ca_bundle(helm: Helm) -> None:
    docs = helm.render({}, "fabricsched-system")
    secret = one(docs, "Secret", "-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    ca_bundle = one(docs, "MutatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["caBundle"]
    assert secret["data"]["ca.crt"] == ca_bundle
    ca = x509.load_pem_x509_certificate(base64.b64decode(ca_bundle))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "chart-test-fabricsched-webhook.fabricsched-system.svc" in names.get_values_for_type(x509.DNSName)
    deployment = one(docs, "Deployment")["spec"]["template"]["spec"]
    volume = {v["name"]: v for v in deployment["volumes"]}["webhook-tls"]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]


def test_the_webhook_counts_the_gpu_resources_the_extender_manages(helm: Helm) -> None:
    values = {"scheduler": {"gpuResources": ["nvidia.com/gpu"]},
              "topology": {"create": True, "gpuResource": "amd.com/gpu"}}
    args = _fabricsched_args(helm.render(values, "fabricsched-system"))
    assert [a for a in args if a.startswith("--webhook-gpu-resource=")] == [
        "--webhook-gpu-resource=nvidia.com/gpu", "--webhook-gpu-resource=amd.com/gpu"]


def test_webhook_disabled_renders_no_webhook_and_no_flags(helm: Helm) -> None:
    docs = helm.render({"webhook": {"enabled": False}}, "fabricsched-system")
    assert not of_kind(docs, "MutatingWebhookConfiguration") and not of_kind(docs, "Secret")
    assert [d["metadata"]["name"] for d in of_kind(docs, "Service")] == ["chart-test-fabricsched-metrics"]
    assert not [a for a in _fabricsched_args(docs) if a.startswith("--webhook")]


def test_a_certificate_made_elsewhere_is_mounted_and_trusted(helm: Helm) -> None:
    values = {"webhook": {"tls": {"secretName": "fabricsched-webhook-cert", "caBundle": "Q0EK"}}}
    docs = helm.render(values, "fabricsched-system")
    assert not of_kind(docs, "Secret")
    assert one(docs, "MutatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["caBundle"] == "Q0EK"
    volumes = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-tls"]["secret"]["secretName"] == "fabricsched-webhook-cert"
    refused = helm.template({"webhook": {"tls": {"secretName": "x"}}}, "fabricsched-system", check=False)
    assert refused.returncode != 0 and "webhook.tls.caBundle" in refused.stderr


# --- the real API server ---------------------------------------------------------------------

SERVICE_MONITOR_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names:
    {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [selector, endpoints]
            properties:
              selector: {type: object, x-kubernetes-preserve-unknown-fields: true}
              namespaceSelector: {type: object, x-kubernetes-preserve-unknown-fields: true}
              endpoints:
                type: array
                items: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""


@pytest.fixture(scope="module")
def restricted_namespace(kubectl: Kubectl) -> Iterator[str]:
    """A namespace that warns about any pod template breaking the `restricted` Pod Security profile."""
    name = f"chart-dry-run-{uuid.uuid4().hex[:6]}"
    kubectl.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }}}])
    yield name
    kubectl.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def service_monitor_crd(kubectl: Kubectl) -> Iterator[None]:
    """A minimal ServiceMonitor CRD (the shape prometheus-operator serves), unless one is installed."""
    present = kubectl.run("get", "crd", "servicemonitors.monitoring.coreos.com", check=False).returncode == 0
    if not present:
        kubectl.run("apply", "-f", "-", stdin=SERVICE_MONITOR_CRD)
        kubectl.run("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/servicemonitors.monitoring.coreos.com")
    yield
    if not present:
        kubectl.run("delete", "crd", "servicemonitors.monitoring.coreos.com", "--wait=false", check=False)


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=list(VALUE_SETS))
def test_api_server_accepts_every_rendered_object_with(
    helm: Helm, kubectl: Kubectl, restricted_namespace: str, service_monitor_crd: None,
    values: dict[str, Any],
) -> None:
    docs = helm.render(values, restricted_namespace)
    result = kubectl.apply(docs, "--dry-run=server")
    applied = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(applied) == len(docs), result.stdout
    assert "PodSecurity" not in result.stderr, result.stderr


def test_the_generated_webhook_certificate_survives_an_upgrade(helm: Helm, kubectl: Kubectl) -> None:
    """A real `helm install` then `helm upgrade`: the chart reads its Secret back (`lookup`), so
    the certificate and the configuration's caBundle stay; a fresh render would make new ones."""
    release, namespace = "upgrade-check", f"chart-upgrade-{uuid.uuid4().hex[:6]}"
    common = ("--namespace", namespace, "--kubeconfig", str(kubectl.kubeconfig))

    def certificate() -> tuple[str, str]:
        secret = kubectl.run("get", "secret", f"{release}-fabricsched-webhook-tls", "-n", namespace,
                             "-o", "jsonpath={.data.tls\\.crt}").stdout
        bundle = kubectl.run("get", "mutatingwebhookconfiguration", f"{release}-fabricsched",
                             "-o", "jsonpath={.webhooks[0].clientConfig.caBundle}").stdout
        return secret, bundle

    try:
        helm.run("install", release, str(CHART), "--create-namespace", "--skip-crds", *common)
        installed = certificate()
        assert all(installed), installed
        helm.run("upgrade", release, str(CHART), "--set", "webhook.timeoutSeconds=3", *common)
        assert certificate() == installed
        assert kubectl.run("get", "mutatingwebhookconfiguration", f"{release}-fabricsched", "-o",
                           "jsonpath={.webhooks[0].timeoutSeconds}").stdout == "3"
    finally:
        helm.run("uninstall", release, *common, check=False)
        kubectl.run("delete", "namespace", namespace, "--wait=false", check=False)


# --- the rendered RBAC, applied for real -------------------------------------------------------------


@pytest.fixture(scope="module")
def release(helm: Helm, kubectl: Kubectl) -> Iterator[str]:
    """The chart's service account, RBAC and ConfigMap applied for real in a fresh namespace.

    The Deployment and Service are left out: this control plane runs no kubelet.
    """
    namespace = f"chart-rbac-{uuid.uuid4().hex[:6]}"
    kubectl.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}])
    # Nor the webhook configuration: it would send pods of labelled namespaces to a Service
    # without endpoints (harmless, it fails open, but no business of this test).
    docs = [d for d in helm.render({}, namespace)
            if d["kind"] not in ("Deployment", "Service", "MutatingWebhookConfiguration")]
    kubectl.apply(docs)
    yield namespace
    for doc in docs:
        if "namespace" not in doc["metadata"] or doc["metadata"]["namespace"] == "kube-system":
            kubectl.run("delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found",
                        "-n", doc["metadata"].get("namespace", "default"), check=False)
    kubectl.run("delete", "namespace", namespace, "--wait=false", check=False)


def _can_i(kubectl: Kubectl, namespace: str, *args: str) -> bool:
    result = kubectl.run("auth", "can-i", *args, f"--as=system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}",
                         check=False)
    answer = result.stdout.strip()
    assert answer in ("yes", "no"), result.stderr
    return answer == "yes"


ALLOWED = {
    "list nodes": ("list", "nodes"),
    "watch pods in any namespace": ("watch", "pods", "--all-namespaces"),
    "list jobs in any namespace": ("list", "jobs.batch", "--all-namespaces"),
    "get podgroups": ("get", "podgroups.scheduling.k8s.io", "-n", "train"),
    "patch fabrictopologies/status": ("patch", "fabrictopologies.fabricsched.io", "--subresource=status"),
    "create fabricplacements": ("create", "fabricplacements.fabricsched.io", "-n", "train"),
    "patch fabricplacements/status": ("patch", "fabricplacements.fabricsched.io", "--subresource=status",
                                       "-n", "train"),
    "create events": ("create", "events", "-n", "train"),
    "bind pods": ("create", "pods", "--subresource=binding", "-n", "train"),
    "patch pod status": ("patch", "pods", "--subresource=status", "-n", "train"),
    "update its own lease": ("update", "leases.coordination.k8s.io/fabricsched-scheduler", "-n", "{ns}"),
    "update fabricsched's own lease": ("update", "leases.coordination.k8s.io/fabricsched", "-n", "{ns}"),
    "create a lease in its namespace": ("create", "leases.coordination.k8s.io", "-n", "{ns}"),
    "bind persistent volumes": ("update", "persistentvolumes"),
    "read the authentication configmap": ("get", "configmaps/extension-apiserver-authentication",
                                          "-n", "kube-system"),
    "watch resourceslices (source dra)": ("watch", "resourceslices.resource.k8s.io"),
    "watch poddisruptionbudgets in any namespace (preemption)": ("watch", "poddisruptionbudgets.policy",
                                                                 "--all-namespaces"),
    "watch namespaces (preemption's opt-out)": ("watch", "namespaces"),
    "evict pods (preemption)": ("create", "pods", "--subresource=eviction", "-n", "train"),
    "list devicetaintrules (source dra)": ("list", "devicetaintrules.resource.k8s.io"),
}
DENIED = {
    "get secrets": ("get", "secrets", "-n", "{ns}"),
    "list secrets anywhere": ("list", "secrets", "--all-namespaces"),
    "delete nodes": ("delete", "nodes"),
    "patch nodes": ("patch", "nodes"),
    "create pods in kube-system": ("create", "pods", "-n", "kube-system"),
    "delete pods (preemption is off)": ("delete", "pods", "-n", "train"),
    "update the default scheduler's lease": ("update", "leases.coordination.k8s.io/kube-scheduler",
                                             "-n", "kube-system"),
    "create leases in kube-system": ("create", "leases.coordination.k8s.io", "-n", "kube-system"),
    "escalate cluster roles": ("escalate", "clusterroles.rbac.authorization.k8s.io"),
    "bind cluster roles": ("bind", "clusterroles.rbac.authorization.k8s.io"),
    "create role bindings": ("create", "rolebindings.rbac.authorization.k8s.io", "-n", "{ns}"),
    "impersonate users": ("impersonate", "users"),
    "create fabrictopologies": ("create", "fabrictopologies.fabricsched.io"),
    "patch fabrictopologies (only their status)": ("patch", "fabrictopologies.fabricsched.io"),
    "update fabrictopologies/status (it patches)": ("update", "fabrictopologies.fabricsched.io",
                                                    "--subresource=status"),
    "patch fabricplacements (it replaces them)": ("patch", "fabricplacements.fabricsched.io", "-n", "train"),
    "update jobs": ("update", "jobs.batch", "-n", "train"),
    "create devicetaintrules (dra is read only)": ("create", "devicetaintrules.resource.k8s.io"),
    "delete podgroups": ("delete", "podgroups.scheduling.k8s.io", "-n", "train"),
    "read other configmaps in kube-system": ("get", "configmaps/kube-proxy", "-n", "kube-system"),
}


@pytest.mark.parametrize("args", ALLOWED.values(), ids=[f"the service account can {k}" for k in ALLOWED])
def test_service_account_can(kubectl: Kubectl, release: str, args: tuple[str, ...]) -> None:
    assert _can_i(kubectl, release, *(a.format(ns=release) for a in args))


@pytest.mark.parametrize("args", DENIED.values(), ids=[f"the service account cannot {k}" for k in DENIED])
def test_service_account_cannot(kubectl: Kubectl, release: str, args: tuple[str, ...]) -> None:
    assert not _can_i(kubectl, release, *(a.format(ns=release) for a in args))


WORKLOAD_GRANTS = [
    (group, resource, verb, verb in ("get", "list", "watch"))
    for group, resource in (("jobset.x-k8s.io", "jobsets"), ("kubeflow.org", "pytorchjobs"),
                            ("kubeflow.org", "mpijobs"))
    for verb in ("get", "list", "watch", "update", "delete")
]


@pytest.mark.parametrize(("group", "resource", "verb", "allowed"), WORKLOAD_GRANTS)
def test_service_account_reads_the_workload_kinds_only(
    kubectl: Kubectl, release: str, group: str, resource: str, verb: str, allowed: bool,
) -> None:
    # A SubjectAccessReview, not `kubectl auth can-i`: these CRDs are not installed here, and
    # without discovery kubectl sends "mpijobs.kubeflow.org" as a core-group resource name.
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
        "user": f"system:serviceaccount:{release}:{SERVICE_ACCOUNT}",
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{release}", "system:authenticated"],
        "resourceAttributes": {"namespace": "train", "verb": verb, "group": group, "resource": resource}}}
    answer = json.loads(kubectl.run("create", "-o", "json", "-f", "-", stdin=json.dumps(review)).stdout)
    assert answer["status"].get("allowed", False) is allowed, answer["status"]


Grant = tuple[str, str, str, str]
"""(apiGroup, resource, verb, resourceName or "")."""

# What the chart's scheduler ClusterRole deliberately leaves out of system:kube-scheduler.
NOT_GRANTED: set[tuple[str, str, str]] = {
    ("coordination.k8s.io", "leases", "create"),  # the namespaced Role creates our lease
    ("", "pods", "delete"),  # preemption is disabled in the profile
}
NOT_GRANTED_RESOURCES = {("coordination.k8s.io", "leasecandidates"), ("extensions", "replicasets")}


def _grants(rules: Sequence[Mapping[str, Any]]) -> set[Grant]:
    return {
        (group, resource, verb, name)
        for rule in rules for group in rule.get("apiGroups", []) for resource in rule.get("resources", [])
        for verb in rule["verbs"] for name in (rule.get("resourceNames") or [""])
    }


def test_scheduler_role_is_system_kube_scheduler_minus_the_documented_exclusions(
    kubectl: Kubectl, release: str,
) -> None:
    live = yaml.safe_load(kubectl.run("get", "clusterrole", "system:kube-scheduler", "-o", "yaml").stdout)
    ours = yaml.safe_load(kubectl.run("get", "clusterrole", f"{RELEASE}-fabricsched-scheduler", "-o",
                                      "yaml").stdout)
    expected = {
        grant for grant in _grants(live["rules"])
        if grant[3] != "kube-scheduler"  # the default scheduler's own lease
        and grant[:3] not in NOT_GRANTED and grant[:2] not in NOT_GRANTED_RESOURCES
    }
    granted = _grants(ours["rules"])
    # The chart follows the pinned release's role; an older release's role may lack some of it
    # (1.36 has no device taint rules), and nothing may be missing on any release.
    beyond = granted - expected if binaries.kubernetes_version() == binaries.KUBERNETES_VERSION else set()
    assert expected <= granted and not beyond, (
        f"missing: {sorted(expected - granted)}; beyond system:kube-scheduler: {sorted(beyond)}"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _impersonating_kubeconfig(admin: Path, namespace: str, target: Path) -> Path:
    """The admin kubeconfig acting as the chart's service account (client-go honours `as`)."""
    config = yaml.safe_load(admin.read_text(encoding="utf-8"))
    for user in config["users"]:
        user["user"]["as"] = f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}"
        user["user"]["as-groups"] = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                                     "system:authenticated"]
    target.write_text(yaml.safe_dump(config), encoding="utf-8")
    return target


def _healthz(port: int) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the scheduler serves a self-signed certificate
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context, timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def test_kube_scheduler_runs_the_rendered_config_as_the_service_account(
    tools: binaries.Binaries, kubectl: Kubectl, release: str, helm: Helm, tmp_path: Path,
) -> None:
    rendered = one(helm.render({}, release), "ConfigMap")["data"]["kube-scheduler-config.yaml"]
    config = yaml.safe_load(rendered)
    # The one value that differs outside a pod: where the credentials come from.
    assert config["clientConnection"]["kubeconfig"] == ""
    config["clientConnection"]["kubeconfig"] = str(
        _impersonating_kubeconfig(kubectl.kubeconfig, release, tmp_path / "kubeconfig"))
    config_file = tmp_path / "kube-scheduler-config.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    port, log = _free_port(), tmp_path / "kube-scheduler.log"

    with log.open("w") as out:
        process = subprocess.Popen(
            [str(tools.kube_scheduler), f"--config={config_file}", f"--secure-port={port}",
             "--bind-address=127.0.0.1", "--v=2"], stdout=out, stderr=subprocess.STDOUT)
    lease_name = f"{release}/{LEASE_NAME}"

    def running() -> bool:
        assert process.poll() is None, f"kube-scheduler exited:\n{log.read_text()[-3000:]}"
        return True

    def leased() -> str | None:
        running()
        lease = kubectl.run("get", "lease", LEASE_NAME, "-n", release, "-o",
                            "jsonpath={.spec.holderIdentity}", check=False)
        holder = lease.stdout.strip() if lease.returncode == 0 else ""
        return holder if holder and _healthz(port) else None

    try:
        holder = wait_for(f"kube-scheduler holding the lease {lease_name} and healthy", leased, timeout=60,
                          interval=0.5)
        assert holder, f"kube-scheduler took no lease {lease_name}:\n{log.read_text()[-3000:]}"
        # Every informer lists once more after taking the lease, the scheduler up all along.
        holds_for("kube-scheduler running", running, 2.0, interval=0.5)
        assert process.poll() is None, f"kube-scheduler exited:\n{log.read_text()[-3000:]}"
        assert _healthz(port)
    finally:
        stop_process(process)
    forbidden = [line for line in log.read_text().splitlines() if "forbidden" in line]
    assert not forbidden, "the scheduler lacks rights:\n" + "\n".join(forbidden[:10])


def test_operator_runs_as_the_service_account(kubectl: Kubectl, release: str, tmp_path: Path) -> None:
    """`fabricsched run` with the chart's rights: ready, writes a topology's status, never refused."""
    topology = f"chart-rbac-{uuid.uuid4().hex[:6]}"
    kubectl.apply([{"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": topology},
                    "spec": {"nodeSelector": {"matchLabels": {"fabricsched.io/test": topology}},
                             "tiers": [{"name": "leaf", "nodeLabel": "fabricsched.io/test-leaf"}]}}])
    health, log = _free_port(), tmp_path / "fabricsched.log"
    kubeconfig = _impersonating_kubeconfig(kubectl.kubeconfig, release, tmp_path / "kubeconfig")
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "fabricsched.cli", "run", f"--kubeconfig={kubeconfig}",
             f"--health-address=127.0.0.1:{health}", f"--extender-address=127.0.0.1:{_free_port()}",
             f"--events-namespace={release}", f"--namespace-for-leases={release}", "--leader-elect",
             "--verbose"],
            stdout=out, stderr=subprocess.STDOUT)
    def written() -> str:
        assert process.poll() is None, f"fabricsched run exited:\n{log.read_text()[-3000:]}"
        status = kubectl.run("get", api.PLURAL, topology, "-o", "jsonpath={.status.conditions}", check=False)
        return status.stdout.strip()

    try:
        conditions = wait_for(f"a status written to {topology}", written, timeout=60, interval=0.5)
        assert process.poll() is None, f"fabricsched run exited:\n{log.read_text()[-3000:]}"
        assert conditions, f"no status written to {topology}:\n{log.read_text()[-3000:]}"
        with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=5) as response:
            assert response.status == 200
    finally:
        stop_process(process)
        kubectl.run("delete", api.PLURAL, topology, "--ignore-not-found", check=False)
    refused = [line for line in log.read_text().splitlines() if "forbidden" in line.lower()]
    assert not refused, "the operator lacks rights:\n" + "\n".join(refused[:10])


# The script once patched with a JSON Patch `add` to /status/capacity/nvidia.com~1gpu: fine on a
# kind node, whose kubelet reports capacity, but a Node made by hand has no status.capacity map to
# add into, and the API server answered 422 ("The request is invalid"). Both shapes are tested.
KIND_GPU_NODES = {
    "a node with no status yet (made by hand, no kubelet)": {},
    "a node whose kubelet already reports capacity": {
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
    },
}


@pytest.mark.parametrize("status", KIND_GPU_NODES.values(),
                         ids=[f"kind-gpu.sh gives GPUs to {k}" for k in KIND_GPU_NODES])
def test_kind_gpu_script_gives_a_node_gpu_capacity(
    tools: binaries.Binaries, kubectl: Kubectl, status: dict[str, Any],
) -> None:
    name = f"chart-gpu-{uuid.uuid4().hex[:6]}"
    # A tainted node no other test selects: no pod lands on it while it exists.
    kubectl.apply([{"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "labels": {"fabricsched.io/test": name}},
        "spec": {"taints": [{"key": "fabricsched.io/test", "value": name, "effect": "NoSchedule"}]},
        **({"status": status} if status else {})}])
    try:
        if status:  # a Node's status on create is kept; make sure this one really has capacity first
            before = yaml.safe_load(kubectl.run("get", "node", name, "-o", "yaml").stdout)["status"]
            assert before["capacity"]["cpu"] == "4"
        env = {**os.environ, "KUBECTL": str(tools.kubectl), "KUBECONFIG": str(kubectl.kubeconfig)}
        result = subprocess.run(
            ["bash", str(REPO / "hack" / "kind-gpu.sh"), "6", f"fabricsched.io/test={name}"],
            capture_output=True, text=True, env=env, timeout=120, check=False)
        assert result.returncode == 0, result.stderr
        after = yaml.safe_load(kubectl.run("get", "node", name, "-o", "yaml").stdout)["status"]
        assert after["capacity"]["nvidia.com/gpu"] == "6"
        assert after["allocatable"]["nvidia.com/gpu"] == "6"
        for key, value in status.get("capacity", {}).items():  # the merge keeps what was there
            assert after["capacity"][key] == value
    finally:
        kubectl.run("delete", "node", name, "--ignore-not-found", check=False)


def test_kind_gpu_script_refuses_a_selector_matching_no_node(
    tools: binaries.Binaries, kubectl: Kubectl,
) -> None:
    env = {**os.environ, "KUBECTL": str(tools.kubectl), "KUBECONFIG": str(kubectl.kubeconfig)}
    result = subprocess.run(["bash", str(REPO / "hack" / "kind-gpu.sh"), "4", "fabricsched.io/test=nobody"],
                            capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode != 0
    assert "no node matches" in result.stderr

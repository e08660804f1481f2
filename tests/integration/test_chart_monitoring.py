"""The chart's monitoring objects with the real helm (and RBAC on the real API server): the
ServiceMonitor's two endpoints (fabricsched's metrics and the kube-scheduler's secure port),
the ClusterRole a scraper needs for the scheduler's /metrics, and the optional Grafana
dashboard ConfigMap."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from chartkit import CHART, Helm, Kubectl, of_kind, one

MONITOR = {"metrics": {"serviceMonitor": {"enabled": True}}}


def _endpoints(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["port"]: e for e in one(docs, "ServiceMonitor")["spec"]["endpoints"]}


def test_the_service_monitor_scrapes_the_schedulers_secure_port_with_a_token(helm: Helm) -> None:
    docs = helm.render(MONITOR, "monitoring")
    endpoints = _endpoints(docs)
    assert endpoints["metrics"]["scheme"] == "http"
    scheduler = endpoints["scheduler-metrics"]
    assert (scheduler["scheme"], scheduler["path"]) == ("https", "/metrics")
    assert scheduler["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert scheduler["tlsConfig"] == {"insecureSkipVerify": True}
    service = one(docs, "Service", "-metrics")
    port = next(p for p in service["spec"]["ports"] if p["name"] == "scheduler-metrics")
    container = next(c for c in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
                     if c["name"] == "kube-scheduler")
    secure = next(p for p in container["ports"] if p["name"] == port["targetPort"])
    assert port["port"] == secure["containerPort"] == 10259
    assert f"--secure-port={secure['containerPort']}" in container["args"]
    reader = one(docs, "ClusterRole", "-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    bindings = of_kind(docs, "ClusterRoleBinding")
    assert not [b for b in bindings if b["metadata"]["name"].endswith("-metrics-reader")]


def test_a_token_secret_and_a_scraper_service_account_are_used_when_given(helm: Helm) -> None:
    scheduler = {"tokenSecret": {"name": "prom-token", "key": "jwt"},
                 "scraperServiceAccount": {"name": "prometheus-k8s", "namespace": "monitoring"},
                 # null drops the default insecureSkipVerify (Helm merges maps).
                 "tlsConfig": {"insecureSkipVerify": None,
                               "ca": {"secret": {"name": "sched-ca", "key": "ca.crt"}}}}
    values = {"metrics": {"serviceMonitor": {"enabled": True, "scheduler": scheduler}}}
    docs = helm.render(values, "fabricsched")
    endpoint = _endpoints(docs)["scheduler-metrics"]
    assert "bearerTokenFile" not in endpoint
    credentials = {"name": "prom-token", "key": "jwt"}
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": credentials}
    assert endpoint["tlsConfig"] == {"ca": {"secret": {"name": "sched-ca", "key": "ca.crt"}}}
    binding = one(docs, "ClusterRoleBinding", "-metrics-reader")
    assert binding["roleRef"]["name"] == one(docs, "ClusterRole", "-metrics-reader")["metadata"]["name"]
    subject = {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}
    assert binding["subjects"] == [subject]


def test_the_scheduler_endpoint_can_be_switched_off(helm: Helm) -> None:
    values = {"metrics": {"serviceMonitor": {"enabled": True, "scheduler": {"enabled": False}}}}
    docs = helm.render(values, "monitoring")
    assert list(_endpoints(docs)) == ["metrics"]
    assert [p["name"] for p in one(docs, "Service", "-metrics")["spec"]["ports"]] == ["metrics"]
    assert not [r for r in of_kind(docs, "ClusterRole") if r["metadata"]["name"].endswith("-metrics-reader")]


def test_without_a_service_monitor_nothing_of_it_is_rendered(helm: Helm) -> None:
    docs = helm.render({}, "fabricsched-system")
    assert not of_kind(docs, "ServiceMonitor")
    assert [p["name"] for p in one(docs, "Service", "-metrics")["spec"]["ports"]] == ["metrics"]
    assert not [d for d in docs if d["metadata"]["name"].endswith(("-metrics-reader", "-dashboard"))]


def test_the_grafana_dashboard_configmap_carries_the_sidecar_label_and_the_shipped_json(helm: Helm) -> None:
    docs = helm.render({"metrics": {"grafanaDashboard": {"enabled": True}}}, "fabricsched-system")
    configmap = one(docs, "ConfigMap", "-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["namespace"] == "fabricsched-system"
    shipped = json.loads((CHART / "dashboards" / "fabricsched.json").read_text())
    assert json.loads(configmap["data"]["fabricsched.json"]) == shipped


def test_the_dashboards_label_and_namespace_are_configurable(helm: Helm) -> None:
    values = {"metrics": {"grafanaDashboard": {
        "enabled": True, "labels": {"grafana_dashboard": "fabric"}, "namespace": "grafana",
        "annotations": {"grafana_folder": "Scheduling"}}}}
    configmap = one(helm.render(values, "fabricsched-system"), "ConfigMap", "-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "fabric"
    assert configmap["metadata"]["namespace"] == "grafana"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "Scheduling"}


@pytest.fixture
def scraper(helm: Helm, kubectl: Kubectl) -> Iterator[str]:
    """A ServiceAccount with only the rendered metrics-reader ClusterRole and its binding, applied."""
    namespace = f"scraper-{uuid.uuid4().hex[:6]}"
    kubectl.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                   {"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "prometheus", "namespace": namespace}}])
    values = {"metrics": {"serviceMonitor": {"enabled": True, "scheduler": {
        "scraperServiceAccount": {"name": "prometheus", "namespace": namespace}}}}}
    rbac = [d for d in helm.render(values, namespace) if d["metadata"]["name"].endswith("-metrics-reader")]
    assert sorted(d["kind"] for d in rbac) == ["ClusterRole", "ClusterRoleBinding"]
    kubectl.apply(rbac)
    yield namespace
    for doc in rbac:
        kubectl.run("delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found", check=False)
    kubectl.run("delete", "namespace", namespace, "--wait=false", check=False)


def test_the_rendered_rbac_lets_the_scraper_get_metrics_and_nothing_else(
    kubectl: Kubectl, scraper: str
) -> None:
    def can(*args: str) -> str:
        as_user = f"--as=system:serviceaccount:{scraper}:prometheus"
        return kubectl.run("auth", "can-i", *args, as_user, check=False).stdout.strip()

    assert can("get", "/metrics") == "yes"
    assert can("get", "/healthz/etcd") == "no"
    assert can("list", "pods", "-A") == "no"

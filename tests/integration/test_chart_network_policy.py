"""The chart's NetworkPolicy and the webhook's client-certificate option, rendered by the real
helm: rendered by default, page and metrics from the monitoring namespace selector, the webhook
from ``webhook.allowedCIDRs`` (any source when empty, with a NOTES warning)."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterkit import find_binaries_or_skip

from fabricsched.cluster import binaries

pytestmark = pytest.mark.integration

CHART = Path(__file__).resolve().parents[2] / "charts" / "fabricsched"


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Any:
    found = find_binaries_or_skip("the chart's tests")
    if found.helm is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true and helm is not built", pytrace=False)
        pytest.skip("helm is not built; run `make tools`")
    home = tmp_path_factory.mktemp("helm")

    def template(values: Mapping[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
        values_file = home / f"values-{uuid.uuid4().hex[:8]}.yaml"
        values_file.write_text(yaml.safe_dump(dict(values)), encoding="utf-8")
        env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
               "HELM_DATA_HOME": str(home / "data")}
        return subprocess.run([str(found.helm), "template", "fabricsched", str(CHART), "--namespace",
                               "fabricsched-system", "--kube-version", binaries.kubernetes_version(),
                               "--values", str(values_file), *extra],
                              capture_output=True, text=True, env=env, timeout=120, check=False)
    return template


def render(helm: Any, values: Mapping[str, Any]) -> list[dict[str, Any]]:
    result = helm(values)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def kinds(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [deployment] = kinds(docs, "Deployment")
    [found] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "fabricsched"]
    return found


def test_by_default_monitoring_reaches_metrics_and_any_source_the_webhook_with_a_warning(helm: Any) -> None:
    docs = render(helm, {})
    [policy] = kinds(docs, "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "fabricsched"
    monitoring, webhook = policy["spec"]["ingress"]
    assert monitoring["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}}]
    assert [p["port"] for p in monitoring["ports"]] == ["metrics", "scheduler"]
    assert webhook == {"ports": [{"port": "webhook", "protocol": "TCP"}]}  # no from: any source
    ports = {p["name"] for p in container(docs)["ports"]}
    assert {"metrics", "webhook"} <= ports  # the named ports the policy uses exist
    assert not any("--webhook-client-ca" in a for a in container(docs)["args"])


def test_allowed_cidrs_the_page_service_and_a_client_ca(helm: Any) -> None:
    docs = render(helm, {
        "webhook": {"allowedCIDRs": ["10.0.0.10/32", "fd00::1/128"], "clientCASecret": "apiserver-client-ca"},
        "dashboard": {"service": {"enabled": True}},
        "networkPolicy": {"monitoringNamespace": "ignored", "monitoringNamespaceSelector": {
            "matchLabels": {"team": "obs"}}},
    })
    [policy] = kinds(docs, "NetworkPolicy")
    monitoring, webhook = policy["spec"]["ingress"]
    assert monitoring["from"][0]["namespaceSelector"] == {"matchLabels": {"team": "obs"}}
    assert [p["port"] for p in monitoring["ports"]] == ["metrics", "scheduler", "dashboard"]
    assert webhook["from"] == [{"ipBlock": {"cidr": "10.0.0.10/32"}}, {"ipBlock": {"cidr": "fd00::1/128"}}]
    fabricsched = container(docs)
    assert "--webhook-client-ca=/etc/fabricsched/webhook-client-ca/ca.crt" in fabricsched["args"]
    assert {"name": "webhook-client-ca", "mountPath": "/etc/fabricsched/webhook-client-ca",
            "readOnly": True} in fabricsched["volumeMounts"]
    [deployment] = kinds(docs, "Deployment")
    assert {"name": "webhook-client-ca", "secret": {"secretName": "apiserver-client-ca"}} in \
        deployment["spec"]["template"]["spec"]["volumes"]


def test_another_monitoring_namespace(helm: Any) -> None:
    [policy] = kinds(render(helm, {"networkPolicy": {"monitoringNamespace": "prometheus"}}), "NetworkPolicy")
    assert policy["spec"]["ingress"][0]["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "prometheus"}}}]


def test_off_no_policy_and_without_the_webhook_no_webhook_rule(helm: Any) -> None:
    assert not kinds(render(helm, {"networkPolicy": {"enabled": False}}), "NetworkPolicy")
    [policy] = kinds(render(helm, {"webhook": {"enabled": False}}), "NetworkPolicy")
    assert len(policy["spec"]["ingress"]) == 1


@pytest.mark.parametrize("values", [
    {"webhook": {"allowedCIDRs": ["everyone"]}},
    {"webhook": {"clientCASecret": "Not_A_Name"}},
    {"networkPolicy": {"podSelector": {}}},
], ids=["a CIDR that is not one", "a bad Secret name", "an unknown key"])
def test_bad_values_are_refused(helm: Any, values: dict[str, Any]) -> None:
    assert helm(values).returncode != 0

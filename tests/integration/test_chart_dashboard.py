"""The chart's fabric page: on the pod's loopback by default (no Service, no declared port), on
the pod IP with its own Service when asked, off when disabled; rendered by the real helm."""

from __future__ import annotations

from typing import Any

import pytest
from chartkit import Helm, one


def fabricsched_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    found: dict[str, Any] = next(c for c in pod["containers"] if c["name"] == "fabricsched")
    return found


def test_by_default_the_page_listens_on_the_pods_loopback_with_no_service(helm: Helm) -> None:
    docs = helm.render({}, "fabricsched-system")
    container = fabricsched_container(docs)
    assert "--dashboard-address=127.0.0.1:8082" in container["args"]
    assert "dashboard" not in [p["name"] for p in container["ports"]]
    assert not [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-dashboard")]


def test_the_service_exposes_the_page_on_its_port(helm: Helm) -> None:
    docs = helm.render({"dashboard": {"port": 9090, "service": {"enabled": True}}}, "fabricsched-system")
    container = fabricsched_container(docs)
    assert "--dashboard-address=0.0.0.0:9090" in container["args"]
    assert {"name": "dashboard", "containerPort": 9090, "protocol": "TCP"} in container["ports"]
    service = one(docs, "Service", "-dashboard")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "dashboard", "port": 9090, "targetPort": "dashboard",
                                         "protocol": "TCP"}]
    assert service["spec"]["selector"] == one(docs, "Deployment")["spec"]["selector"]["matchLabels"]


def test_disabled_the_page_is_off(helm: Helm) -> None:
    docs = helm.render({"dashboard": {"enabled": False, "service": {"enabled": True}}}, "fabricsched-system")
    assert "--dashboard-address=" in fabricsched_container(docs)["args"]
    assert not [d for d in docs if d["metadata"]["name"].endswith("-dashboard")]


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        pytest.param({"dashboard": {"port": 8081}}, "dashboard.port",
                     id="the page may not take the health port"),
        pytest.param({"dashboard": {"port": 8888}}, "port", id="the page may not take the extender's 8888"),
        pytest.param({"dashboard": {"service": {"type": "Ingress"}}}, "type", id="an unknown Service type"),
        pytest.param({"dashboard": {"login": True}}, "login", id="an unknown key"),
    ],
)
def test_bad_dashboard_values_are_refused(helm: Helm, values: dict[str, Any], complaint: str) -> None:
    result = helm.template(values, "fabricsched-system", check=False)
    assert result.returncode != 0, f"helm accepted {values}"
    assert complaint in result.stderr

"""Every panel of the shipped Grafana dashboard answers with data from a real Prometheus.

A real Prometheus (the distribution's binary) scrapes a real ``fabricsched run`` on the local
control plane (``harness.fabric_cluster``) every second. The test places a gang, degrades
a host under it and keeps a second topology's Prometheus unreachable (an allowed URL where
nothing listens: its queries fail), then runs each panel's query, the dashboard's template
variables replaced by their "All" value and ``$__rate_interval`` by one minute, and asserts a
non-empty result with a number in it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness import TOPOLOGY, Fabric, fabric_cluster
from prometheus_harness import PrometheusServer, find_prometheus_or_skip, free_port
from waiting import wait_for

DASHBOARD = Path(__file__).resolve().parents[2] / "charts" / "fabricsched" / "dashboards" / "fabricsched.json"
RATE_WINDOW = "1m"
"""What ``$__rate_interval`` becomes: long enough to hold the gang's plan and filter calls."""


@dataclass(frozen=True)
class Panel:
    title: str
    expr: str


def panel_queries(dashboard: dict[str, Any]) -> list[Panel]:
    """Every target's query, with the dashboard's variables replaced as Grafana does for "All"."""
    values = {
        v["name"]: v.get("allValue") or ".*"
        for v in dashboard["templating"]["list"]
        if v["type"] == "query"
    }
    values |= {"__rate_interval": RATE_WINDOW, "__interval": "15s", "__range": "5m"}

    def substitute(expr: str) -> str:
        def one(found: re.Match[str]) -> str:
            name = found.group(1) or found.group(2)
            if name not in values:
                raise AssertionError(f"panel query uses an unknown variable ${name}: {expr}")
            return str(values[name])

        return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)

    panels = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            panels.append(Panel(f"{panel['title']} [{target['refId']}]", substitute(target["expr"])))
    return panels


def test_the_dashboard_has_a_panel_for_every_user_metric() -> None:
    exprs = " ".join(p.expr for p in panel_queries(json.loads(DASHBOARD.read_text())))
    for metric in (
        "fabricsched_gangs{", "fabricsched_gangs_on_degraded_path",
        "fabricsched_gang_placement_wait_seconds_bucket", "fabricsched_gang_comm_slowdown_bucket",
        "fabricsched_domain_gpus", "fabricsched_reservation_expiries_total",
        "fabricsched_telemetry_query_failures_total", "fabricsched_extender_request_seconds_bucket",
        "process_resident_memory_bytes", "process_cpu_seconds_total", "fabricsched_build_info",
    ):
        assert metric in exprs, metric


@dataclass
class Stage:
    fabric: Fabric
    prometheus: PrometheusServer
    namespace: str


def _unreachable_topology(url: str) -> dict[str, Any]:
    """A FabricTopology over no node whose Prometheus never answers (its queries count as failures)."""
    return {
        "apiVersion": "fabricsched.io/v1alpha1",
        "kind": "FabricTopology",
        "metadata": {"name": "unreachable"},
        "spec": {
            "nodeSelector": {"matchLabels": {"fabricsched.io/test-no-node": "true"}},
            "tiers": [{"name": "leaf", "nodeLabel": "fabricsched.io/test-leaf"}],
            "health": {"prometheus": {"url": url, "intervalSeconds": 2, "timeoutSeconds": 1}},
        },
    }


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    binary = find_prometheus_or_skip()
    root = tmp_path_factory.mktemp("dashboard")
    dead = f"http://127.0.0.1:{free_port()}"
    with fabric_cluster(root, [f"--prometheus-allow-url={dead}"]) as fabric:
        fabric.api.call("POST", "/apis/fabricsched.io/v1alpha1/fabrictopologies", _unreachable_topology(dead))
        (root / "prometheus").mkdir()
        job = {"job_name": "fabricsched",
               "static_configs": [{"targets": [f"127.0.0.1:{fabric.operator.health_port}"]}]}
        prometheus = PrometheusServer(binary, root / "prometheus", None, scrape_configs=[job]).start()
        try:
            wait_for("Prometheus scraped fabricsched twice", lambda: _scraped(prometheus, 2), timeout=30)
            namespace = fabric.namespace()
            # A plan and its filter calls inside the rate window: the quantile panels have numbers.
            fabric.job(namespace, "six", pods=6)
            placed = fabric.placed(namespace, "six", 6)
            # The extender's latency series appear with its first call: a second gang's calls
            # come after Prometheus holds them, so their rate() sees the increase.
            wait_for("Prometheus holds the extender's latency series", lambda: prometheus.query(
                'count_over_time(fabricsched_extender_request_seconds_count{verb="filter"}[1m]) >= 2'),
                timeout=30)
            fabric.job(namespace, "two", pods=2)
            fabric.placed(namespace, "two", 2)
            fabric.label_health(placed[0], "degraded")
            wait_for("six on a degraded path", lambda: (fabric.placement(namespace, "six") or {})
                     .get("status", {}).get("degradedPath"), timeout=10)
            wait_for("Prometheus scraped the degraded path",
                     lambda: prometheus.query("fabricsched_gangs_on_degraded_path > 0"), timeout=30)
            yield Stage(fabric, prometheus, namespace)
        finally:
            prometheus.stop()


def _scraped(prometheus: PrometheusServer, samples: int) -> bool:
    found = prometheus.query('count_over_time(up{job="fabricsched"}[1m])')
    return bool(found) and float(found[0]["value"][1]) >= samples


def _has_number(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(r["value"][1])) for r in result)


def test_every_panel_query_returns_data_from_a_real_prometheus(stage: Stage) -> None:
    panels = panel_queries(json.loads(DASHBOARD.read_text()))
    assert len(panels) >= 20

    empty: list[str] = []

    def all_answer() -> bool:
        empty[:] = [p.title for p in panels if not _has_number(stage.prometheus.query(p.expr))]
        return not empty

    try:
        wait_for("every panel with data", all_answer, timeout=45, interval=1.0)
    except pytest.fail.Exception:
        pytest.fail(f"panels without data: {empty}", pytrace=False)
    by_title = {p.title: stage.prometheus.query(p.expr) for p in panels}
    assert float(by_title["Gangs on a degraded path [A]"][0]["value"][1]) == 1
    failing = {r["metric"]["topology"] for r in by_title["Telemetry query failures [A]"]}
    assert failing == {"unreachable"}
    phases = {r["metric"]["phase"]: float(r["value"][1]) for r in by_title["Gangs by phase [A]"]}
    assert phases.get("Bound") == 2
    used = [r for r in by_title["Domain GPUs [A]"] if r["metric"]["state"] == "used"]
    assert used and float(used[0]["value"][1]) >= 48
    assert TOPOLOGY in {r["metric"]["topology"] for r in stage.prometheus.query("fabricsched_domain_gpus")}

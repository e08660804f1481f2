"""``fabricsched diagnose`` against the session control plane and a real Prometheus holding the six
scenarios' history (``diagnose_stage``): each names the right cause first, the recovered one
says so, and without a Prometheus the path and the recent changes are still reported."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterkit import Cluster, NodeFactory, install_crds
from diagnose_stage import Placed, backfill, diagnose, find_promtool_or_skip, now, place_job, windows
from prometheus_harness import PrometheusServer, find_prometheus_or_skip

from fabricsched.diagnose import timefmt

EXPECTED = {
    "congested-uplink": ("fabric", "leaf {leaf} uplinks"),
    "link-errors-then-down": ("fabric", "{first} mlx5_1 link"),
    "gpu-thermal": ("gpu", "{second} GPU 3"),
    "storage-saturated": ("storage", "storage of 4 of the job's 4 hosts"),
    "application": ("application", "the job's own code or data"),
    "fabric-recovered": ("fabric", "leaf {leaf} uplinks"),
}


@pytest.fixture
def placed(cluster: Cluster, node_factory: NodeFactory, namespace: str) -> Iterator[Placed]:
    install_crds(cluster.plane)
    stage = place_job(cluster, node_factory, namespace)
    yield stage
    cluster.api.request("DELETE", f"/apis/fabricsched.io/v1alpha1/fabrictopologies/{stage.topology}")


def test_each_scenario_names_its_cause_first(cluster: Cluster, placed: Placed, tmp_path: Path) -> None:
    binary, promtool = find_prometheus_or_skip(), find_promtool_or_skip()
    spans = windows(now())
    backfill(promtool, tmp_path, placed, spans)
    server = PrometheusServer(binary, tmp_path, None).start()
    try:
        names = {"leaf": placed.hosts[-1][1], "first": placed.hosts[0][0], "second": placed.hosts[1][0]}
        seen = {}
        for scenario, (start, end) in spans.items():
            result = diagnose(
                f"{placed.namespace}/{placed.job}",
                "--from",
                _iso(start),
                "--to",
                _iso(end),
                "--prometheus",
                server.url,
                "-o",
                "json",
                kubeconfig=cluster.kubeconfig,
            )
            assert result.returncode == 0, result.stderr
            report = json.loads(result.stdout)
            top = report["causes"][0]
            seen[scenario] = (top["category"], top["element"], report["recovered"])
        expected = {s: (c, e.format(**names)) for s, (c, e) in EXPECTED.items()}
        assert {s: v[:2] for s, v in seen.items()} == expected
        assert seen["fabric-recovered"][2] is True
        assert seen["congested-uplink"][2] is False
    finally:
        server.stop()


def test_without_prometheus_the_path_and_changes_are_reported(cluster: Cluster, placed: Placed) -> None:
    cordoned = placed.hosts[2][0]
    cluster.kubectl("cordon", cordoned)
    result = diagnose(f"{placed.namespace}/{placed.job}", "--since", "30m", kubeconfig=cluster.kubeconfig)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "1. The job and its path" in text and all(node in text for node, _ in placed.hosts)
    assert f"node {cordoned} cordoned or uncordoned by kubectl" in text
    assert "telemetry not measured" in text and "no Prometheus" in text
    assert "no Prometheus" in result.stderr  # the log line, on stderr, never in the report's stream
    data = json.loads(
        diagnose(f"{placed.namespace}/{placed.job}", "-o", "json", kubeconfig=cluster.kubeconfig).stdout
    )
    assert data["causes"][0]["category"] == "application" and data["notMeasured"]


def test_a_prometheus_that_is_down_gives_a_partial_report(cluster: Cluster, placed: Placed) -> None:
    result = diagnose(
        f"{placed.namespace}/{placed.job}",
        "--prometheus",
        "http://127.0.0.1:9",
        "-o",
        "json",
        kubeconfig=cluster.kubeconfig,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["job"]["ranks"] and all("Prometheus" in n["why"] for n in data["notMeasured"])


def _iso(t: float) -> str:
    return str(timefmt.rfc3339(t))

"""``fabricsched diagnose`` and the fabric page's diagnosis against the shared harness (the local
control plane, the fabricsched kube-scheduler, ``fabricsched run`` with its page) on the demo
fabric: the demo's ``train-6`` placed by fabricsched, then a real Prometheus holding the six
scenarios' history for its real hosts (``diagnose_stage``). Each scenario names the right cause
first, the recovered one says so; without a Prometheus the path and the recent changes are
still reported, by the command and by the page."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from diagnose_stage import (
    Placed,
    backfill,
    diagnose,
    find_promtool_or_skip,
    kubectl,
    now,
    page_diagnosis,
    place_train_6,
    windows,
)
from harness import Fabric, fabric_cluster
from prometheus_harness import PrometheusServer, find_prometheus_or_skip

from fabricsched.diagnose import timefmt

pytestmark = pytest.mark.integration

EXPECTED = {
    "congested-uplink": ("fabric", "leaf {leaf} uplinks"),
    "link-errors-then-down": ("fabric", "{first} mlx5_1 link"),
    "gpu-thermal": ("gpu", "{second} GPU 3"),
    "storage-saturated": ("storage", "storage of {ranks} of the job's {ranks} hosts"),
    "application": ("application", "the job's own code or data"),
    "fabric-recovered": ("fabric", "leaf {leaf} uplinks"),
}


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    with fabric_cluster(tmp_path_factory.mktemp("diagnose-cluster"), demo=True, dashboard=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def placed(fabric: Fabric) -> Placed:
    return place_train_6(fabric)


def test_each_scenario_names_its_cause_first(fabric: Fabric, placed: Placed, tmp_path: Path) -> None:
    binary, promtool = find_prometheus_or_skip(), find_promtool_or_skip()
    spans = windows(now())
    backfill(promtool, tmp_path, placed, spans)
    server = PrometheusServer(binary, tmp_path, None).start()
    try:
        names = {
            "leaf": placed.hosts[-1][1],
            "first": placed.hosts[0][0],
            "second": placed.hosts[1][0],
            "ranks": len(placed.hosts),
        }
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
                kubeconfig=fabric.plane.kubeconfig,
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


def test_without_prometheus_the_path_and_changes_are_reported(fabric: Fabric, placed: Placed) -> None:
    target = f"{placed.namespace}/{placed.job}"
    result = diagnose(target, "--since", "30m", kubeconfig=fabric.plane.kubeconfig)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "1. The job and its path" in text and all(node in text for node, _ in placed.hosts)
    assert "telemetry not measured" in text and "no Prometheus" in text
    assert "no Prometheus" in result.stderr  # the log line, on stderr, never in the report's stream
    data = json.loads(diagnose(target, "-o", "json", kubeconfig=fabric.plane.kubeconfig).stdout)
    assert data["job"]["phase"] == "Bound" and len(data["job"]["ranks"]) == len(placed.hosts)
    assert data["causes"][0]["category"] == "application" and data["notMeasured"]


def test_the_page_diagnoses_a_placed_gang_and_says_what_was_not_measured(
    fabric: Fabric, placed: Placed
) -> None:
    cordoned = placed.hosts[2][0]
    kubectl(fabric, "cordon", cordoned)
    try:
        status, body = page_diagnosis(fabric, f"{placed.namespace}/{placed.job}", "30m")
        assert status == 200, body
        assert body["job"]["placement"] == placed.job and body["job"]["phase"] == "Bound"
        assert [r["node"] for r in body["job"]["ranks"]] == [node for node, _ in placed.hosts]
        assert body["prometheus"] is None and body["notMeasured"]
        assert any("telemetry not measured" in n for n in body["notes"])
        assert any(c["what"] == f"node {cordoned} cordoned or uncordoned by kubectl" for c in body["changes"])
        again, _ = page_diagnosis(fabric, f"{placed.namespace}/{placed.job}", "15m")
        assert again == 429  # the same gang moments later, over another window
        cached, same = page_diagnosis(fabric, f"{placed.namespace}/{placed.job}", "30m")
        assert cached == 200 and same == body
        assert page_diagnosis(fabric, f"{placed.namespace}/nothing")[0] == 404
    finally:
        kubectl(fabric, "uncordon", cordoned)


def test_a_prometheus_that_is_down_gives_a_partial_report(fabric: Fabric, placed: Placed) -> None:
    result = diagnose(
        f"{placed.namespace}/{placed.job}",
        "--prometheus",
        "http://127.0.0.1:9",
        "-o",
        "json",
        kubeconfig=fabric.plane.kubeconfig,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["job"]["ranks"] and all("Prometheus" in n["why"] for n in data["notMeasured"])


def _iso(t: float) -> str:
    return str(timefmt.rfc3339(t))

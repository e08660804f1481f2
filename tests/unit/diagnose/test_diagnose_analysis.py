"""The analysis on the scenarios' history: the right cause first, scores, not measured, recovered."""

from __future__ import annotations

import json

import pytest
from diagnose_inputs import END, gang, inputs, window

from fabricsched.diagnose import model, render, report
from fabricsched.explain import paths


@pytest.mark.parametrize(
    ("scenario", "category", "element"),
    [
        pytest.param(
            "congested-uplink", "fabric", "leaf l02 uplinks", id="a congested leaf uplink names the leaf"
        ),
        pytest.param(
            "link-errors-then-down",
            "fabric",
            "gpu-001 mlx5_1 link",
            id="symbol errors then a downed port name the host's link",
        ),
        pytest.param("gpu-thermal", "gpu", "gpu-002 GPU 3", id="one throttling GPU is named"),
        pytest.param(
            "storage-saturated",
            "storage",
            "storage of 4 of the job's 4 hosts",
            id="busy disks on every host name the shared storage",
        ),
        pytest.param(
            "application", "application", "the job's own code or data", id="nothing moved: the application"
        ),
        pytest.param(
            "fabric-recovered", "fabric", "leaf l02 uplinks", id="a recovered congestion is still named"
        ),
    ],
)
def test_each_scenario_names_its_cause_first(scenario: str, category: str, element: str) -> None:
    built = report.build(inputs(scenario))
    top = built.causes[0]
    assert (top.category, top.element) == (category, element)
    assert all(a.score >= b.score for a, b in zip(built.causes, built.causes[1:], strict=False))
    assert 0.0 <= top.score <= 1.0 and top.evidence


def test_the_recovered_scenario_says_when_and_the_others_are_not_recovered() -> None:
    recovered = report.build(inputs("fabric-recovered"))
    assert recovered.recovered is True and recovered.causes[0].recovered is True
    assert recovered.recovered_at is not None and recovered.window.start < recovered.recovered_at < END
    assert report.build(inputs("congested-uplink")).recovered is False


def test_evidence_dates_the_slowdown_and_names_the_slowest_rank() -> None:
    thermal = report.build(inputs("gpu-thermal")).causes[0]
    assert any("the slowest rank" in e for e in thermal.evidence)
    assert any("step time rose 1.8x" in e for e in thermal.evidence)


def test_missing_exporters_are_not_measured_never_healthy() -> None:
    gpu_signals = [
        "gpu-thermal",
        "gpu-hw-slowdown",
        "gpu-power-cap",
        "gpu-sm-clock",
        "gpu-power",
        "gpu-temperature",
        "gpu-xid",
        "gpu-engine-active",
        "gpu-nvlink",
    ]
    built = report.build(inputs("gpu-thermal", without=gpu_signals))
    assert set(gpu_signals) <= set(built.not_measured)
    assert built.causes[0].category == "application"
    assert any("not measured at all: gpu" in e for e in built.causes[0].evidence)


def test_without_prometheus_everything_is_not_measured_and_the_path_is_reported() -> None:
    job = model.DiagnosedJob("train", "wide", gang())
    built = report.build(model.DiagnosisInputs(job=job, window=window()))
    data = report.as_data(built)
    assert data["causes"][0]["category"] == "application"
    assert "telemetry was not measured: no Prometheus" in data["causes"][0]["evidence"]
    assert len(data["notMeasured"]) == len(built.not_measured) > 20
    assert [r["node"] for r in data["job"]["ranks"]] == ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
    assert "1. The job and its path" in render.render(built, "text")


def test_an_unhealthy_path_element_from_the_operator_is_evidence() -> None:
    degraded = paths.UnhealthyElement(
        kind="domain",
        name="leaf/l02",
        rail=None,
        state="degraded",
        capacity=0.5,
        since="2023-11-14T22:00:00Z",
        recovering_since=None,
        sources=(),
        why="uplinks of leaf l02: 2 of the gang's 4 hosts inside",
    )
    flat = inputs("application")
    built = report.build(
        model.DiagnosisInputs(
            job=model.DiagnosedJob("train", "wide", gang(unhealthy=[degraded])),
            window=flat.window,
            telemetry=flat.telemetry,
        )
    )
    top = built.causes[0]
    assert (top.category, top.element) == ("fabric", "leaf l02 uplinks")


def test_json_is_the_issue_shape() -> None:
    data = json.loads(render.render(report.build(inputs("congested-uplink")), "json"))
    assert {"job", "window", "causes", "recovered"} <= set(data)
    cause = data["causes"][0]
    assert set(cause) >= {"category", "element", "score", "since", "evidence"}
    assert cause["since"].endswith("Z")

"""Untrusted inputs of a diagnosis: the step-time annotation, node labels, durations, answers."""

from __future__ import annotations

import pytest

from fabricsched.diagnose import appmetric, nodes, timefmt
from fabricsched.telemetry import prometheus


def test_the_annotation_takes_a_name_and_plain_matchers_and_injects_the_pods() -> None:
    metric = appmetric.from_annotations({appmetric.STEP_TIME: 'train_step_seconds{phase="train"}'})
    assert metric is not None and not metric.higher_is_better
    selector = nodes.pod_selector("train", ["wide-0", "wide-1"])
    assert selector is not None
    assert metric.query("train", selector) == (
        'train_step_seconds{namespace="train",pod=~"(wide\\\\-0|wide\\\\-1)",phase="train"}'
    )


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('up{job="a"} or vector(1)', id="free PromQL"),
        pytest.param('x{namespace="other"}', id="a namespace matcher"),
        pytest.param('x{pod=~".*"}', id="a regex matcher"),
        pytest.param("sum(x)", id="a function"),
        pytest.param('x{a="b"', id="unclosed"),
        pytest.param("x" * 600, id="too long"),
    ],
)
def test_the_annotation_refuses_anything_else(text: str) -> None:
    with pytest.raises(ValueError):
        appmetric.from_annotations({appmetric.STEP_TIME: text})


def test_node_labels_map_series_to_the_jobs_hosts_only() -> None:
    order = nodes.DEFAULT_LABELS
    hosts = {"gpu-001"}
    assert nodes.node_of({"instance": "gpu-001:9100"}, order, hosts, {}) == "gpu-001"
    assert nodes.node_of({"Hostname": "gpu-001"}, order, hosts, {}) == "gpu-001"
    assert nodes.node_of({"instance": "gpu-0011:9100"}, order, hosts, {}) is None
    assert nodes.node_of({"pod": "wide-0"}, order, hosts, {"wide-0": "gpu-001"}) == "gpu-001"
    custom = nodes.NodeLabel.parse("host=([^.]+)\\..*")
    assert custom.node_of({"host": "gpu-001.cluster.local"}) == "gpu-001"
    with pytest.raises(ValueError):
        nodes.NodeLabel.parse("bad-label")


def test_selectors_put_only_valid_node_names_into_promql() -> None:
    found = nodes.selectors(nodes.DEFAULT_LABELS, ["gpu-001", 'x"}or{a="b', "gpu.2"])
    assert found[0] == '{node=~"(gpu\\\\-001|gpu\\\\.2)"}'
    assert all("or{" not in s for s in found)
    assert nodes.selectors(nodes.DEFAULT_LABELS, ['"']) == []


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("1h30m", 5400), ("2d", 172800)])
def test_durations(text: str, seconds: int) -> None:
    assert timefmt.duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1", "1h 2m", "-5m", "40d", "5x"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        timefmt.duration(text)


def test_a_range_answer_is_parsed_and_garbage_is_an_error() -> None:
    body = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": {"instance": "gpu-001:9100"}, "values": [[1.0, "2"], [2.0, "NaN"]]}],
        },
    }
    (series,) = prometheus.parse_range_response(body)
    assert series.labels == {"instance": "gpu-001:9100"} and series.points[0] == (1.0, 2.0)
    for garbage in (
        None,
        {"status": "success", "data": {"resultType": "vector", "result": []}},
        {"status": "success", "data": {"resultType": "matrix", "result": [{"values": 3}]}},
        {"status": "error", "errorType": "bad_data", "error": "parse error"},
    ):
        with pytest.raises(prometheus.TelemetryError):
            prometheus.parse_range_response(garbage)


def test_a_hostile_device_label_is_cleaned() -> None:
    (series,) = nodes.series_of(
        [({"instance": "gpu-001:9100", "device": "\x1b[2Jmlx5_0" + "x" * 200}, [])],
        "device",
        nodes.DEFAULT_LABELS,
        {"gpu-001"},
        {},
    )
    assert "\x1b" not in series.detail and len(series.detail) <= 64

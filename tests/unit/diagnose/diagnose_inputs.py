"""Builders for the diagnosis tests: a 4-host job over two leaves, and a scenario's OpenMetrics
read back into ``model.Measured`` the way Prometheus would answer (counters as rates over a
minute), so the pure analysis is tested on the same history the integration test backfills."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from fabricsched.diagnose import model, nodes, queries, scenarios, signals
from fabricsched.explain import report as explain_report

HOSTS = (("gpu-001", "l01"), ("gpu-002", "l01"), ("gpu-003", "l02"), ("gpu-004", "l02"))
PODS = {host: ("train", f"wide-{rank}") for rank, (host, _) in enumerate(HOSTS)}
END = 1_700_000_000.0
MINUTES = 30
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\} (\S+) (\S+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"')


def gang(
    hosts: Sequence[tuple[str, str]] = HOSTS, unhealthy: Sequence[explain_report.paths.UnhealthyElement] = ()
) -> explain_report.Gang:
    return explain_report.Gang(
        placement="wide",
        gang="wide",
        namespace="train",
        topology="ib",
        size=len(hosts),
        gpus_per_pod=8,
        tier="leaf",
        tier_policy="preferred",
        constraints=(),
        phase="Bound",
        why="",
        reasons=(),
        conditions=(),
        expires_at=None,
        bound_ranks=len(hosts),
        degraded_path=False,
        slowdown_now=1.0,
        slowdown_at_placement=1.0,
        tiers=("leaf", "spine"),
        domains={"leaf": tuple(sorted({leaf for _, leaf in hosts})), "spine": ("s1",)},
        ranks=tuple(
            explain_report.Rank(i, h, {"leaf": leaf, "spine": "s1"}, True)
            for i, (h, leaf) in enumerate(hosts)
        ),
        unhealthy=tuple(unhealthy),
        unhealthy_count=len(unhealthy),
        path_source="status",
    )


def window() -> model.Window:
    return queries.window_of(END - MINUTES * 60, END)


def _parse(text: str) -> dict[tuple[str, str], list[tuple[float, float]]]:
    out: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            out[(match.group(1), match.group(2))].append((float(match.group(4)), float(match.group(3))))
    return out


def _read(signal: signals.Signal, points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if signal.read == "gauge":
        return points
    lag = 4  # one minute of 15 s samples, as rate(...[60s]) reads it
    scale = signal.per if signal.read == "rate" else 60.0
    return [
        (points[i][0], (points[i][1] - points[i - lag][1]) / (points[i][0] - points[i - lag][0]) * scale)
        for i in range(lag, len(points))
    ]


def inputs(scenario: str, without: Sequence[str] = ()) -> model.DiagnosisInputs:
    """The scenario's history as the diagnosis' inputs; ``without``: signals left unmeasured."""
    data = _parse(scenarios.generate(scenario, scenarios.ScenarioLayout(HOSTS, PODS), END, MINUTES))
    pod_nodes = {pod: host for host, (_, pod) in PODS.items()}
    measured = []
    for signal in signals.SIGNALS:
        names = signal.metric.split("|")
        raw = [
            (dict(_LABEL.findall(labels)), _read(signal, points))
            for (name, labels), points in data.items()
            if name in names and signal.key not in without
        ]
        found = nodes.series_of(raw, signal.detail, nodes.DEFAULT_LABELS, {h for h, _ in HOSTS}, pod_nodes)
        measured.append(model.Measured(signal.key, tuple(found)))
    steps = [
        model.Series(
            pod_nodes[dict(_LABEL.findall(labels))["pod"]], dict(_LABEL.findall(labels))["pod"], tuple(points)
        )
        for (name, labels), points in data.items()
        if name == scenarios.STEP_METRIC
    ]
    return model.DiagnosisInputs(
        job=model.DiagnosedJob("train", "wide", gang()),
        window=window(),
        telemetry=tuple(measured),
        application=model.Measured("application", tuple(steps)),
    )

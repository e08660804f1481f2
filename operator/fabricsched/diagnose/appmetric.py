"""The job's own step time (or throughput), named by an annotation, never free PromQL (pure).

The workload (or its pods) carries ``fabricsched.io/step-time-metric`` (seconds per step: higher
is slower) or ``fabricsched.io/throughput-metric`` (samples or tokens per second: lower is
slower): a metric name and optional label matchers, ``train_step_seconds{job="llm",phase="train"}``.
fabricsched adds the ``namespace`` and ``pod`` matchers itself, so the annotation can only narrow
the job's own series; anything that is not a name and plain ``label="value"`` matchers is refused.
The series date the slowdown: its start, how much slower, whether it recovered, the slowest rank.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fabricsched.diagnose import findings, model

STEP_TIME = "fabricsched.io/step-time-metric"
THROUGHPUT = "fabricsched.io/throughput-metric"
MAX_TEXT = 512
MAX_MATCHERS = 8
RESERVED = ("namespace", "pod", "__name__")
SLOWER = 1.3
"""Step time this much above its start of window counts as slower."""
RECOVERED = 1.15
SUSTAINED_POINTS = 2
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,199}")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]{0,127})\s*=\s*"([^"\\\x00-\x1f]{0,200})"\s*')


@dataclass(frozen=True)
class AppMetric:
    name: str
    matchers: tuple[tuple[str, str], ...]
    higher_is_better: bool
    text: str

    def query(self, namespace: str, pod_selector: str) -> str:
        """The series of the job's pods: ``pod_selector`` is ``nodes.pod_selector``'s."""
        own = "".join(f',{k}="{v}"' for k, v in self.matchers)
        return f"{self.name}{pod_selector[:-1]}{own}}}"


def from_annotations(annotations: Mapping[str, object]) -> AppMetric | None:
    """The annotation, parsed; ValueError naming what is wrong; None when there is none."""
    for key, higher in ((STEP_TIME, False), (THROUGHPUT, True)):
        value = annotations.get(key)
        if isinstance(value, str) and value.strip():
            return parse(value.strip(), higher)
    return None


def parse(text: str, higher_is_better: bool) -> AppMetric:
    if len(text) > MAX_TEXT:
        raise ValueError(f"longer than {MAX_TEXT} characters")
    name, brace, rest = text.partition("{")
    if not _NAME.fullmatch(name.strip()):
        raise ValueError(f"{name[:64]!r} is not a metric name")
    matchers: list[tuple[str, str]] = []
    if brace:
        if not rest.endswith("}"):
            raise ValueError("the label matchers must end with }")
        body = rest[:-1].strip().rstrip(",")
        for part in body.split(",") if body else []:
            match = _MATCHER.fullmatch(part)
            if match is None:
                raise ValueError(f'{part.strip()[:64]!r} is not a label="value" matcher')
            if match.group(1) in RESERVED:
                raise ValueError(f"{match.group(1)} is set by fabricsched")
            matchers.append((match.group(1), match.group(2)))
        if len(matchers) > MAX_MATCHERS:
            raise ValueError(f"more than {MAX_MATCHERS} matchers")
    return AppMetric(name.strip(), tuple(matchers), higher_is_better, text)


def slowdown(measured: model.Measured | None, higher_is_better: bool) -> model.Slowdown | None:
    """When the job became slower, by how much, whether it recovered; None when not measured."""
    if measured is None or not measured.measured:
        return None
    # The job is as fast as its slowest rank: the worst pod at each point.
    worst: dict[float, float] = {}
    for series in measured.series:
        for t, v in series.points:
            cost = 1.0 / v if higher_is_better and v > 0 else v
            worst[t] = max(worst.get(t, cost), cost)
    points = sorted(worst.items())
    if len(points) < 2 * SUSTAINED_POINTS:
        return None
    baseline = findings.baseline_of(points)
    if not baseline > 0:
        return None
    slow = [p[1] > SLOWER * baseline for p in points]
    since = _first_sustained(points, slow)
    ratio = max(
        1.0,
        statistics.median([v for (_, v), s in zip(points, slow, strict=True) if s] or [baseline]) / baseline,
    )
    recovered_at = None
    if since is not None:
        after = [t for t, v in points if t > since and v <= RECOVERED * baseline]
        tail_ok = all(v <= RECOVERED * baseline for _, v in points[-SUSTAINED_POINTS:])
        recovered_at = after[0] if after and tail_ok else None
    return model.Slowdown(
        ratio=round(ratio, 2),
        since=since,
        recovered_at=recovered_at,
        slowest=_slowest(measured.series, higher_is_better),
    )


def _first_sustained(points: Sequence[tuple[float, float]], slow: Sequence[bool]) -> float | None:
    for i in range(len(points) - SUSTAINED_POINTS + 1):
        if all(slow[i : i + SUSTAINED_POINTS]):
            return points[i][0]
    return None


def _slowest(series: Sequence[model.Series], higher_is_better: bool) -> str | None:
    """The node of the rank slowest over the second half of the window (when it stands out)."""
    late = {}
    for one in series:
        half = one.points[len(one.points) // 2 :]
        values = [(1.0 / v if higher_is_better and v > 0 else v) for _, v in half]
        if values:
            late[one.node] = statistics.median(values)
    if len(late) < 2:
        return None
    ordered = sorted(late.items(), key=lambda kv: -kv[1])
    others = statistics.median([v for _, v in ordered[1:]])
    return ordered[0][0] if others > 0 and ordered[0][1] > 1.1 * others else None

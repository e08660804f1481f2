"""Series -> findings: which of the job's elements were abnormal, when, and for how long (pure).

Each point of each series is judged by its signal (``signals.Signal.judge``). Peer judges
compare a point with the median of the job's *other* elements at the same time and with the
element's own start of window, so a counter whose unit is hardware-defined (PortXmitWait ticks)
or a clock that differs by model is judged relatively. A finding needs at least
``MIN_ABNORMAL_POINTS`` abnormal points, so one odd scrape moves nothing; it has recovered when
its last ``RECOVERED_POINTS`` points are all normal.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from fabricsched.diagnose import model, signals

MIN_ABNORMAL_POINTS = 2
RECOVERED_POINTS = 3
BASELINE_SHARE = 0.15
"""The first 15 % of the window is the element's own 'before'."""


def judge(signal: signals.Signal, measured: model.Measured) -> list[model.Symptom]:
    series = [s for s in measured.series if s.points]
    by_time = [{_key(t): v for t, v in s.points} for s in series]
    found = []
    for index, one in enumerate(series):
        others = [s for s in series if s is not one]
        peers = [m for i, m in enumerate(by_time) if i != index]
        baseline = baseline_of(one.points)
        flags = [_abnormal(signal, t, v, peers, baseline) for t, v in one.points]
        finding = _finding(signal, one, flags, others)
        if finding is not None:
            found.append(finding)
    return found


def _finding(
    signal: signals.Signal, one: model.Series, flags: Sequence[bool], others: Sequence[model.Series]
) -> model.Symptom | None:
    bad = [p for p, flag in zip(one.points, flags, strict=True) if flag]
    if len(bad) < MIN_ABNORMAL_POINTS:
        return None
    tail = flags[-RECOVERED_POINTS:]
    values = [v for _, v in bad if math.isfinite(v)]
    peak = (min(values) if signal.judge in ("below", "peer-below") else max(values)) if values else math.nan
    return model.Symptom(
        signal=signal.key,
        node=one.node,
        detail=one.detail,
        fraction=len(bad) / len(one.points),
        since=bad[0][0],
        until=bad[-1][0],
        peak=peak,
        typical=_median([v for s in others for _, v in s.points]),
        recovered=len(tail) == RECOVERED_POINTS and not any(tail),
    )


def _abnormal(
    signal: signals.Signal, t: float, value: float, peers: Sequence[Mapping[int, float]], baseline: float
) -> bool:
    if not math.isfinite(value):
        return False
    if signal.judge == "above":
        return value > signal.limit
    if signal.judge == "below":
        return value < signal.limit
    if signal.judge == "bits":
        return value >= 0 and (int(value) & int(signal.limit)) != 0
    reference = _reference(t, peers, baseline)
    if reference is None:
        return False
    if signal.judge == "peer-above":
        return value > signal.floor and value > signal.limit * max(reference, signal.floor)
    return value < signal.limit * reference


def _reference(t: float, peers: Sequence[Mapping[int, float]], baseline: float) -> float | None:
    """'Normal' for this element at ``t``: the other elements' median then, else (alone) its own
    start of window."""
    at = _key(t)
    values = [v for m in peers if (v := m.get(at)) is not None and math.isfinite(v)]
    if values:
        return _median(values)
    return baseline if math.isfinite(baseline) else None


def _key(t: float) -> int:
    # Range query points sit on the step grid: milliseconds line them up across series.
    return round(t * 1000)


def baseline_of(points: Sequence[tuple[float, float]]) -> float:
    head = max(1, int(len(points) * BASELINE_SHARE))
    return _median([v for _, v in points[:head]])


def _median(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def mean(points: Sequence[tuple[float, float]]) -> float:
    finite = [v for _, v in points if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan

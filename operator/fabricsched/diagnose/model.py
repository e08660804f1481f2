"""The typed inputs of a diagnosis and the report it gives (pure data, no I/O).

``DiagnosisInputs`` is everything ``report.build`` needs: the job's facts from the cluster, the window,
the recent changes, and one ``Measured`` per signal (its series per node, or why it was not
measured). Times are Unix seconds (UTC).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from fabricsched.explain import report as explain_report

Category = Literal["fabric", "gpu", "host", "storage", "scheduling", "application"]
CATEGORIES: tuple[Category, ...] = ("fabric", "gpu", "host", "storage", "scheduling", "application")


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    step_s: float
    """Resolution of the range queries (the window cut into at most ``queries.MAX_POINTS``)."""


@dataclass(frozen=True)
class Series:
    """One measured element of one signal: a node, and the device or GPU on it (if any)."""

    node: str
    detail: str
    """The device (mlx5_0, nvme0n1), ``GPU 3``, or "" for a whole-host series."""
    points: tuple[tuple[float, float], ...]
    """(time, value), oldest first, the signal's own unit."""


@dataclass(frozen=True)
class Measured:
    """What Prometheus said about one signal over the window."""

    signal: str
    """``signals.Signal.key``."""
    series: tuple[Series, ...] = ()
    error: str | None = None
    """Why there is no answer (Prometheus down, refused, garbage); None when it answered."""
    cut: int = 0
    """Series dropped past ``queries.MAX_SERIES``."""

    @property
    def measured(self) -> bool:
        return self.error is None and bool(self.series)


@dataclass(frozen=True)
class Pod:
    name: str
    node: str | None
    rank: int | None
    restarts: int
    created: float | None
    scheduled: float | None
    """When the pod's PodScheduled condition turned True."""
    last_restart: float | None
    """When a container last ended and was restarted (its lastState.terminated.finishedAt)."""


@dataclass(frozen=True)
class Change:
    """Something that changed on or around the job's path in the window."""

    time: float
    kind: str
    """topology, node, health, restart, event."""
    what: str


@dataclass(frozen=True)
class DiagnosedJob:
    namespace: str
    name: str
    gang: explain_report.Gang | None
    """The gang's plan as ``explain`` reads it (ranks, domains, slowdown, unhealthy path)."""
    pods: tuple[Pod, ...] = ()
    placement_created: float | None = None
    bound_at: float | None = None
    """When the gang's last rank was bound (its Bound condition), if known."""
    app_metric: str | None = None
    """The step-time (or throughput) annotation as written, for the report."""


@dataclass(frozen=True)
class DiagnosisInputs:
    job: DiagnosedJob
    window: Window
    changes: tuple[Change, ...] = ()
    telemetry: tuple[Measured, ...] = ()
    """One per signal asked; a signal absent here was not asked (no Prometheus)."""
    application: Measured | None = None
    """The job's own step-time series, one per pod (``Series.node`` is the pod's node)."""
    application_higher_is_better: bool = False
    """True for a throughput metric, False for a step time."""
    notes: tuple[str, ...] = ()
    prometheus: str | None = None
    """The Prometheus asked, or None when there was none to ask."""


@dataclass(frozen=True)
class Symptom:
    """One element whose signal was abnormal for part of the window."""

    signal: str
    node: str
    detail: str
    fraction: float
    """Share of the window's points that were abnormal."""
    since: float
    until: float
    """The last abnormal point."""
    peak: float
    typical: float
    """The job's other elements' median of this signal (what 'normal' was)."""
    recovered: bool
    """The abnormal stretch ended before the window's end."""


@dataclass(frozen=True)
class Cause:
    category: Category
    element: str
    score: float
    since: float | None
    evidence: tuple[str, ...]
    recovered: bool | None = None
    recovered_at: float | None = None


@dataclass(frozen=True)
class Slowdown:
    """The job's own step time (or throughput) over the window."""

    ratio: float
    """How much slower at its worst stretch than at the window's start (1.0: not slower)."""
    since: float | None
    recovered_at: float | None
    slowest: str | None
    """The node of the slowest rank."""


@dataclass(frozen=True)
class Comparison:
    """One signal, the job's hosts side by side: the mean over the window per node."""

    signal: str
    values: Mapping[str, float]
    standouts: tuple[str, ...]


@dataclass(frozen=True)
class Report:
    job: DiagnosedJob
    window: Window
    causes: tuple[Cause, ...]
    comparisons: tuple[Comparison, ...]
    findings: tuple[Symptom, ...]
    changes: tuple[Change, ...]
    not_measured: Mapping[str, str]
    """Signal key -> why (no series for the job's hosts, collector off, Prometheus error)."""
    slowdown: Slowdown | None
    recovered: bool | None
    recovered_at: float | None
    prometheus: str | None
    notes: tuple[str, ...] = field(default=())

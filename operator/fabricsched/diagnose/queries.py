"""The job's telemetry from Prometheus over the window, bounded in series, points and time.

One range query per signal (signals sharing a metric share the query), each restricted to the
job's hosts (``nodes.selectors``; GPU signals also to its pods), at most ``MAX_POINTS`` points
per series (the step grows with the window), at most ``MAX_SERIES`` series kept per signal,
``QUERY_TIMEOUT_S`` per query, ``CONCURRENCY`` at a time, and the whole gathering within the
caller's deadline. Every failure (not allowed, unreachable, refused, slow, garbage) becomes that
signal's ``Measured.error``: a partial report, never a hang or a traceback.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fabricsched.diagnose import appmetric, model, nodes, signals
from fabricsched.telemetry import access, prometheus

MAX_POINTS = 240
MAX_SERIES = 256
QUERY_TIMEOUT_S = 15.0
CONCURRENCY = 4
MIN_RATE_RANGE_S = 60


def window_of(start: float, end: float) -> model.Window:
    """The window with its step: at most ``MAX_POINTS`` points, whole seconds."""
    return model.Window(start, end, float(max(1, math.ceil((end - start) / MAX_POINTS))))


@dataclass(frozen=True)
class Target:
    """What to ask about: the job's hosts and pods, how series name hosts."""

    namespace: str
    hosts: Sequence[str]
    pod_nodes: Mapping[str, str]
    """The job's pods -> their nodes."""
    labels: Sequence[nodes.NodeLabel] = nodes.DEFAULT_LABELS


async def gather(
    client: prometheus.PrometheusClient,
    endpoint: access.Endpoint,
    target: Target,
    window: model.Window,
    app: appmetric.AppMetric | None,
    deadline_s: float,
) -> tuple[tuple[model.Measured, ...], model.Measured | None]:
    """Every signal's ``Measured`` and the step-time series (None without the annotation)."""
    selectors = nodes.selectors(target.labels, target.hosts)
    pods = nodes.pod_selector(target.namespace, target.pod_nodes)
    span = prometheus.RangeSpan(window.start, window.end, window.step_s)
    range_s = max(MIN_RATE_RANGE_S, int(2 * window.step_s))
    gate = asyncio.Semaphore(CONCURRENCY)
    asked: dict[str, asyncio.Task[list[prometheus.RangeSeries]]] = {}

    def ask(promql: str) -> asyncio.Task[list[prometheus.RangeSeries]]:
        if promql not in asked:
            asked[promql] = asyncio.ensure_future(_one(client, endpoint, promql, span, gate))
        return asked[promql]

    plans: list[tuple[signals.Signal, str]] = []
    for signal in signals.SIGNALS:
        chosen = [*selectors, *([pods] if signal.gpu and pods else [])]
        if chosen:
            plans.append((signal, " or ".join(signal.expression(s, range_s) for s in chosen)))
    app_query = app.query(target.namespace, pods) if app is not None and pods else None
    tasks = [ask(q) for _, q in plans] + ([ask(app_query)] if app_query else [])
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=deadline_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    hosts = set(target.hosts)
    measured = tuple(_measured(s.key, asked[q], s.detail, target, hosts) for s, q in plans)
    if not plans:
        measured = tuple(
            model.Measured(s.key, error="the job has no host to ask about") for s in signals.SIGNALS
        )
    app_measured = (
        _measured("application", asked[app_query], "pod", target, hosts, by_pod=True) if app_query else None
    )
    return measured, app_measured


async def _one(
    client: prometheus.PrometheusClient,
    endpoint: access.Endpoint,
    promql: str,
    span: prometheus.RangeSpan,
    gate: asyncio.Semaphore,
) -> list[prometheus.RangeSeries]:
    async with gate:
        return await client.query_range(endpoint, promql, span, QUERY_TIMEOUT_S)


def _measured(
    key: str,
    task: asyncio.Task[list[prometheus.RangeSeries]],
    detail: str | None,
    target: Target,
    hosts: set[str],
    by_pod: bool = False,
) -> model.Measured:
    if task.cancelled():
        return model.Measured(key, error="not answered within the diagnosis' time budget")
    error = task.exception()
    if isinstance(error, prometheus.TelemetryError):
        return model.Measured(key, error=f"Prometheus: {error.message}")
    if error is not None:
        return model.Measured(
            key, error=f"Prometheus: {type(error).__name__}: {access.clean(str(error), 200)}"
        )
    raw = task.result()
    if by_pod:
        mapped = [
            model.Series(target.pod_nodes[pod], pod, r.points)
            for r in raw
            if (pod := r.labels.get("pod", "")) in target.pod_nodes
        ]
    else:
        mapped = nodes.series_of(
            ((r.labels, r.points) for r in raw), detail, target.labels, hosts, target.pod_nodes
        )
    return model.Measured(key, tuple(mapped[:MAX_SERIES]), cut=max(0, len(mapped) - MAX_SERIES))

"""The kinds the cluster state follows, each through ``fabricsched.listwatch``: one pass over each
initial listing, then the watch (see ``listwatch`` for why not kopf's handlers). kopf still owns
the process's lifetime and watches the other kinds. This module adds what is the operator's own:
its metrics of every object applied.
"""

from __future__ import annotations

from typing import Any

from fabricsched.controller import metrics as metrics_module


class MetricsObserver:
    """``listwatch.Observer`` on the operator's metrics."""

    def __init__(self, registry: metrics_module.Metrics) -> None:
        self.metrics = registry
        self._applied: dict[str, tuple[Any, Any]] = {}
        """Kind -> its (applied counter, apply-time histogram): ``labels`` looks a child up
        under a lock, once per object of a listing otherwise (60,000 at a 5,000-node DRA start).
        Bounded: the kinds are the process's own (``handlers.kinds``), never a name from outside."""

    def applied(self, kind: str, seconds: float) -> None:
        children = self._applied.get(kind)
        if children is None:
            children = self._applied[kind] = (self.metrics.watch_events.labels(kind, "applied"),
                                              self.metrics.apply_seconds.labels(kind))
        children[0].inc()
        children[1].observe(seconds)

    def deleted(self, kind: str) -> None:
        self.metrics.watch_events.labels(kind, "deleted").inc()

    def failed(self, kind: str) -> None:
        self.metrics.handler_errors.labels(kind).inc()

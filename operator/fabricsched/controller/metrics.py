"""Prometheus metrics of the operator, in a registry of its own (no global default registry).

Sizes of the in-memory state are read when scraped (a collector), so the handlers pay nothing
for them; counters are bumped where the work happens. The extender may register its own
metrics in ``Metrics.registry`` so one /metrics serves the whole process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import prometheus_client
from prometheus_client import core as prom_core
from prometheus_client import registry as prom_registry

import fabricsched

SizeReader = Callable[[], Mapping[str, int]]


class _StateSizes(prom_registry.Collector):
    def __init__(self, read: SizeReader, read_degraded: Callable[[], Mapping[str, int]]) -> None:
        self._read = read
        self._read_degraded = read_degraded

    def collect(self) -> Iterator[prom_core.Metric]:
        sizes = prom_core.GaugeMetricFamily(
            "fabricsched_state_objects", "Objects held in the operator's in-memory state.", labels=["kind"]
        )
        for kind, count in sorted(self._read().items()):
            sizes.add_metric([kind], count)
        yield sizes
        degraded = prom_core.GaugeMetricFamily(
            "fabricsched_degraded_elements",
            "Fabric elements that are not healthy (or wait out a recovery), per FabricTopology.",
            labels=["topology"],
        )
        for topology, count in sorted(self._read_degraded().items()):
            degraded.add_metric([topology], count)
        yield degraded


class Metrics:
    """The operator's metrics; ``watch_state`` attaches the state-size collector."""

    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        self.watch_events = prometheus_client.Counter(
            "fabricsched_watch_events_total",
            "Watch events applied to the in-memory state.",
            ["kind", "type"],
            registry=self.registry,
        )
        self.handler_errors = prometheus_client.Counter(
            "fabricsched_handler_errors_total",
            "Watch events that failed to apply (logged; the object is retried on its next event).",
            ["kind"],
            registry=self.registry,
        )
        self.apply_seconds = prometheus_client.Histogram(
            "fabricsched_apply_seconds",
            "Time to apply one watched object to the in-memory state.",
            ["kind"],
            buckets=(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05),
            registry=self.registry,
        )
        self.reconciles = prometheus_client.Counter(
            "fabricsched_status_reconciles_total",
            "FabricTopology status recomputations.",
            ["topology"],
            registry=self.registry,
        )
        self.status_writes = prometheus_client.Counter(
            "fabricsched_status_writes_total",
            "FabricTopology status PATCHes, by outcome (written, failed).",
            ["topology", "outcome"],
            registry=self.registry,
        )
        self.health_changes = prometheus_client.Counter(
            "fabricsched_health_changes_total",
            "Effective health changes of fabric elements (after hysteresis).",
            ["topology", "element_kind", "change"],
            registry=self.registry,
        )
        self.events_posted = prometheus_client.Counter(
            "fabricsched_events_posted_total",
            "Kubernetes Events written, by outcome (posted, failed, dropped).",
            ["outcome"],
            registry=self.registry,
        )
        self.telemetry_failures = prometheus_client.Counter(
            "fabricsched_telemetry_query_failures_total",
            "Prometheus health-rule queries that failed, by kind (unreachable, http, auth, timeout, ...).",
            ["topology", "kind"],
            registry=self.registry,
        )
        self.optin_missed = prometheus_client.Counter(
            "fabricsched_optin_missed_total",
            "GPU pods of namespaces labelled fabricsched.io/scheduling=enabled created without "
            "schedulerName fabricsched: the opt-in webhook was not reached (controller.optin). No "
            "namespace label (one series whatever the number of namespaces): the Events name them.",
            registry=self.registry,
        )
        self.build_info = prometheus_client.Info(
            "fabricsched_build", "The running fabricsched's version.", registry=self.registry
        )
        self.build_info.info({"version": fabricsched.__version__})
        # The standard process_* and python_* metrics, in this registry too.
        prometheus_client.ProcessCollector(registry=self.registry)
        prometheus_client.PlatformCollector(registry=self.registry)
        prometheus_client.GCCollector(registry=self.registry)
        self._watching = False

    def watch_state(self, read_sizes: SizeReader, read_degraded: Callable[[], Mapping[str, int]]) -> None:
        """Expose state sizes and degraded counts, read at scrape time."""
        if not self._watching:
            self.registry.register(_StateSizes(read_sizes, read_degraded))
            self._watching = True

    def exposition(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)

"""The extender's metrics for users: gangs by phase, waits, slowdowns, GPUs per domain.

Counts that the book already knows (gangs by phase, on a degraded path, GPUs per domain,
reservation expiries) are read at scrape time by a collector, so the filter loop pays nothing
for them; the two histograms are observed once per plan (``observe_plan``).
"""

from __future__ import annotations

from collections.abc import Iterator

import prometheus_client
from prometheus_client import core as prom_core
from prometheus_client import registry as prom_registry

from fabricsched.api.placement import PlacementPhase
from fabricsched.extender.book import pending, reservations
from fabricsched.ports import views
from fabricsched.topology import gpus

WAIT_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
SLOWDOWN_BUCKETS = (1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0)


class _BookCollector(prom_registry.Collector):
    def __init__(self, state: views.StateView, book: reservations.Book, board: pending.PendingBoard) -> None:
        self._state = state
        self._book = book
        self._board = board

    def collect(self) -> Iterator[prom_core.Metric]:
        entries = self._book.entries()
        gangs = prom_core.GaugeMetricFamily(
            "fabricsched_gangs", "Gangs known to the extender, by FabricPlacement phase.", labels=["phase"]
        )
        counts = dict.fromkeys((p.value for p in PlacementPhase if p != PlacementPhase.RELEASED), 0)
        for entry in entries:
            counts[entry.phase.value] += 1
        counts[PlacementPhase.PENDING.value] = self._board.waiting
        for phase, count in counts.items():
            gangs.add_metric([phase], count)
        yield gangs
        yield prom_core.GaugeMetricFamily(
            "fabricsched_gangs_on_degraded_path",
            "Planned gangs whose path crosses a degraded or down element now.",
            value=sum(1 for e in entries if e.degraded_path),
        )
        yield prom_core.CounterMetricFamily(
            "fabricsched_reservation_expiries",
            "Plans whose unbound ranks were let go after the reservation TTL.",
            value=self._book.expiries,
        )
        yield self._domain_gpus()

    def _domain_gpus(self) -> prom_core.Metric:
        family = prom_core.GaugeMetricFamily(
            "fabricsched_domain_gpus",
            "GPUs below every domain: free, reserved for unbound ranks of plans, used by pods.",
            labels=["topology", "tier", "domain", "state"],
        )
        for topology in sorted(self._state.topologies):
            snapshot = self._state.snapshot(topology)
            if snapshot is None:
                continue
            fab, free = snapshot.fabric, snapshot.free_gpus
            # The one "free minus reserved" rule (``topology.gpus.free_after``).
            left = gpus.free_after(free, self._book.reserved_in(topology))
            for domain in fab.domains.values():
                used = available = 0
                for host in domain.hosts:
                    idle = min(fab.hosts[host].gpus, max(0, free.get(host, 0)))
                    used += fab.hosts[host].gpus - idle
                    available += min(idle, left.get(host, 0))
                tier = fab.tiers[domain.tier].name
                labels = [topology, tier, domain.name]
                reserved = domain.gpus - used - available
                family.add_metric([*labels, "free"], available)
                family.add_metric([*labels, "reserved"], reserved)
                family.add_metric([*labels, "used"], used)
        return family


class ExtenderMetrics:
    """Registers the collector and the per-plan histograms in ``registry``."""

    def __init__(
        self,
        registry: prometheus_client.CollectorRegistry,
    ) -> None:
        self.wait = prometheus_client.Histogram(
            "fabricsched_gang_placement_wait_seconds",
            "From a gang's first pod's creation to its plan.",
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.slowdown = prometheus_client.Histogram(
            "fabricsched_gang_comm_slowdown",
            "The engine's predicted communication slowdown of a gang when planned (1 is ideal).",
            buckets=SLOWDOWN_BUCKETS,
            registry=registry,
        )
        self.preemptions = prometheus_client.Counter(
            "fabricsched_preemptions",
            "Workloads (whole gangs or lone pods) evicted to make room for a higher-priority gang.",
            registry=registry,
        )
        self.preempted_gpu_seconds = prometheus_client.Counter(
            "fabricsched_preempted_gpu_seconds",
            "Progress the evicted workloads lost: their GPUs x their running time, in GPU-seconds.",
            registry=registry,
        )

    @staticmethod
    def watch_book(
        registry: prometheus_client.CollectorRegistry, state: views.StateView, book: reservations.Book,
        board: pending.PendingBoard,
    ) -> None:
        """Gauges of the book and the waiting gangs, read at every scrape."""
        registry.register(_BookCollector(state, book, board))

    def observe_round(self, victims: int, progress_lost_gpu_s: float) -> None:
        """One preemption round: the workloads it evicted and the progress they lost."""
        self.preemptions.inc(victims)
        self.preempted_gpu_seconds.inc(max(0.0, progress_lost_gpu_s))

    def observe_plan(self, entry: reservations.Entry, waited_s: float) -> None:
        self.wait.observe(max(0.0, waited_s))
        self.slowdown.observe(entry.comm_slowdown)

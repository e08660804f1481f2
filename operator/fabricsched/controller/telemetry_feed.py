"""Plugs ``fabricsched.telemetry`` into the operator: one poller per FabricTopology that sets
``spec.health.prometheus``, feeding the state's health tracker (source ``prometheus``).

Started by ``running.serve`` next to the status reporter. Pollers start once the initial
listings are in (a restored status must be read before the first round) and follow topology
changes; the ``TelemetryUnavailable`` condition is computed here for ``status.compute``, and
each change of availability is posted as an Event on the FabricTopology.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable, Sequence

from fabricsched import ids
from fabricsched.api import conditions
from fabricsched.api import topology as api
from fabricsched.controller import runtime, state
from fabricsched.ports import changes, notices
from fabricsched.telemetry import poller, prometheus
from fabricsched.topology import health

logger = logging.getLogger(__name__)

CONDITION = "TelemetryUnavailable"


class TopologySink:
    """``poller.Sink`` of one topology, over the shared state."""

    def __init__(self, rt: runtime.Runtime, name: ids.TopologyName) -> None:
        self._rt = rt
        self._name = name

    def spec(self) -> api.FabricTopologySpec | None:
        tf = self._rt.state.topologies.get(self._name)
        return tf.spec if tf is not None else None

    def known(self) -> Collection[health.ElementId] | None:
        snap = self._rt.state.snapshot(self._name)
        if snap is None:
            return None
        fab = snap.fabric
        found: set[health.ElementId] = {health.ElementId.node(h) for h in fab.hosts}
        found.update(health.ElementId.domain(fab.tiers[d.tier].name, d.name) for d in fab.domains.values())
        return found

    def held(self) -> Iterable[health.Observation]:
        tf = self._rt.state.topologies.get(self._name)
        if tf is None:
            return []
        return [o for r in tf.health().values() for o in r.sources if o.source == "prometheus"]

    def feed(self, observations: list[health.Observation]) -> None:
        self._rt.state.feed_telemetry(self._name, observations)

    def report(self, availability: poller.Availability) -> None:
        self._rt.state.set_telemetry(self._name, availability)
        obj = self._rt.state.objects.get(self._name)
        ref = notices.ObjectRef(api.API_VERSION, api.KIND, self._name, obj.uid if obj else "")
        if availability.available:
            notice = notices.Notice("Normal", "TelemetryAvailable", "Prometheus answers every telemetry rule")
        else:
            notice = notices.Notice("Warning", "TelemetryUnavailable",
                                   f"{availability.reason}: {availability.problem}; last known health kept")
        logger.info("%s: %s", self._name, notice.message)
        self._rt.recorder.record(ref, notice, self._rt.clock())


def condition(availability: poller.Availability, previous: Sequence[api.Condition], now: float,
              generation: int | None) -> api.Condition:
    """``TelemetryUnavailable``: True while a rule's query fails or Prometheus is away."""
    status: conditions.Status = "False" if availability.available else "True"
    message = availability.problem or "every telemetry rule was evaluated"
    return conditions.transition(previous, CONDITION, status, availability.reason, message, now, generation)


def _wanted(cluster: state.ClusterState) -> set[str]:
    return {n for n, tf in cluster.topologies.items() if tf.spec.health.prometheus is not None}


async def run(rt: runtime.Runtime, client: prometheus.PrometheusClient | None = None,
              poll_s: float = 0.5) -> None:
    """Keep one poller per topology with ``spec.health.prometheus`` until cancelled."""
    client = client or prometheus.PrometheusClient(rt.options.prometheus)

    async def one(name: str) -> None:
        tname = ids.TopologyName(name)
        try:
            failures = rt.metrics.telemetry_failures
            await poller.TopologyPoller(
                name, TopologySink(rt, tname), client, rt.clock,
                on_failed=lambda kind: failures.labels(name, kind).inc(),
            ).run()
        finally:
            _stopped(rt.state, tname)

    supervisor = poller.Supervisor(one)
    unsubscribe: Callable[[], None] | None = None
    try:
        while not rt.state.synced:
            await asyncio.sleep(poll_s)

        def on_change(change: changes.Change) -> None:
            if isinstance(change, changes.TopologyChanged):
                supervisor.sync(_wanted(rt.state))

        unsubscribe = rt.state.subscribe(on_change)
        supervisor.sync(_wanted(rt.state))
        while True:
            # Pollers end on their own when their spec loses `prometheus`; this also restarts
            # one that failed.
            await asyncio.sleep(max(poll_s, 5.0))
            supervisor.sync(_wanted(rt.state))
    finally:
        if unsubscribe is not None:
            unsubscribe()
        await supervisor.close()
        await client.close()


def _stopped(cluster: state.ClusterState, name: ids.TopologyName) -> None:
    """A poller ended: if its topology no longer asks for telemetry, drop its findings and its
    condition (an operator shutting down keeps them: the next one resumes from status)."""
    tf = cluster.topologies.get(name)
    if tf is not None and tf.spec.health.prometheus is None:
        cluster.feed_telemetry(name, [])
        cluster.set_telemetry(name, None)

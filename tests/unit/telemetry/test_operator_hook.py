"""The operator side of telemetry: findings into the state, the TelemetryUnavailable condition
in status, and the Events a change of availability posts (``controller.telemetry_feed``)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import builders
from fabricsched import ids
from fabricsched.controller import events, metrics, runtime, state, status, telemetry_feed
from fabricsched.ports import changes
from fabricsched.telemetry import poller
from fabricsched.topology import fabric, health
from timing import Clock

IB = ids.TopologyName("ib")
H1 = health.ElementId.node("h1")


def topology_body(prometheus: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeSelector": {"matchLabels": {"gpu": "yes"}},
        "tiers": [{"name": "leaf", "nodeLabel": builders.TOPOGRAPH.format(0)},
                  {"name": "spine", "nodeLabel": builders.TOPOGRAPH.format(1)}],
        "health": {"recoverAfterSeconds": 5},
    }
    if prometheus is not None:
        spec["health"]["prometheus"] = prometheus
    return {"metadata": {"name": "ib", "generation": 1, "uid": "uid-ib"}, "spec": spec}


Posted = list[Mapping[str, Any]]


def make_runtime(prometheus: dict[str, Any] | None = None) -> tuple[runtime.Runtime, Posted]:
    clock = Clock()
    cluster = state.ClusterState(clock)
    cluster.apply_topology("ib", topology_body(prometheus or {"url": "http://prom:9090"}))
    for name, leaf in (("h1", "l1"), ("h2", "l2")):
        node = builders.make_node(name).leaf(leaf).spine("s1").gpus(8).label("gpu", "yes")
        cluster.apply_node(node.build())
    cluster.mark_synced()
    posted: Posted = []
    recorder = events.EventRecorder(lambda ns, body: posted.append(body))
    options = runtime.OperatorOptions(kubeconfig=Path())
    return runtime.Runtime(options, cluster, None, recorder, metrics.Metrics(), clock), posted


def finding(value: float = 7.0) -> health.Observation:
    return health.Observation(H1, fabric.HealthState.DEGRADED, None, "prometheus",
                              f"prometheus rule errors: {value:g} > 0", rule="errors", value=value)


def compute(rt: runtime.Runtime) -> dict[str, Any]:
    cluster = rt.state
    return status.build(status.gather(cluster.objects[IB], cluster.topologies.get(IB), cluster.snapshot(IB),
                                      rt.clock()))


def conditions(rt: runtime.Runtime) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in compute(rt)["conditions"]}


def test_fed_findings_degrade_the_host_in_the_snapshot_and_tell_subscribers() -> None:
    rt, _ = make_runtime()
    seen: list[changes.Change] = []
    rt.state.subscribe(seen.append)
    rt.state.feed_telemetry(IB, [finding()])
    snap = rt.state.snapshot(IB)
    assert snap is not None and snap.fabric.hosts[ids.NodeName("h1")].state is fabric.HealthState.DEGRADED
    [change] = [c for c in seen if isinstance(c, changes.HealthChanged)]
    assert change.change.element == H1 and change.change.sources[0].rule == "errors"
    [row] = compute(rt)["degraded"]
    assert row["sources"] == [{"source": "prometheus", "reason": "prometheus rule errors: 7 > 0",
                               "rule": "errors", "value": 7.0}]


def test_the_condition_appears_with_telemetry_and_keeps_its_transition_time() -> None:
    rt, _ = make_runtime()
    assert "TelemetryUnavailable" not in conditions(rt), "no condition before the first round"
    generation = rt.state.generation
    away = poller.Availability("rule errors: connection refused", "PrometheusUnreachable")
    rt.state.set_telemetry(IB, away)
    assert rt.state.generation > generation, "the reporter must see a new status to write"
    cond = conditions(rt)["TelemetryUnavailable"]
    assert (cond["status"], cond["reason"]) == ("True", "PrometheusUnreachable")
    assert cond["message"] == "rule errors: connection refused"
    stored = compute(rt)
    rt.state.apply_topology("ib", {**topology_body({"url": "http://prom:9090"}), "status": stored})
    rt.clock.now += 60  # type: ignore[attr-defined]
    rt.state.set_telemetry(IB, poller.Availability("rule errors: timed out", "PrometheusUnreachable"))
    again = conditions(rt)["TelemetryUnavailable"]
    assert again["lastTransitionTime"] == cond["lastTransitionTime"]
    rt.state.set_telemetry(IB, poller.OK)
    assert conditions(rt)["TelemetryUnavailable"]["status"] == "False"


def test_the_sink_posts_an_event_per_change_of_availability_and_knows_the_fabric() -> None:
    rt, posted = make_runtime()
    sink = telemetry_feed.TopologySink(rt, IB)

    async def main() -> None:
        task = asyncio.create_task(rt.recorder.run())
        sink.report(poller.Availability("rule errors: connection refused", "PrometheusUnreachable"))
        sink.report(poller.OK)
        await asyncio.sleep(0.2)
        task.cancel()

    asyncio.run(main())
    assert [(e["type"], e["reason"]) for e in posted] == [("Warning", "TelemetryUnavailable"),
                                                          ("Normal", "TelemetryAvailable")]
    assert "connection refused" in posted[0]["message"] and "last known health kept" in posted[0]["message"]
    known = sink.known()
    assert known is not None and H1 in known and health.ElementId.domain("leaf", "l2") in known
    sink.feed([finding(3.0)])
    assert [o.value for o in sink.held()] == [3.0]


def test_removing_prometheus_from_the_spec_drops_its_findings_and_condition() -> None:
    rt, _ = make_runtime()
    rt.state.feed_telemetry(IB, [finding()])
    rt.state.set_telemetry(IB, poller.OK)
    rt.state.apply_topology("ib", {**topology_body(None), "metadata": {"name": "ib", "generation": 2,
                                                                       "uid": "uid-ib"}})
    telemetry_feed._stopped(rt.state, IB)
    assert "TelemetryUnavailable" not in conditions(rt)
    record = rt.state.topologies[IB].health()[H1]
    assert record.recovering_since is not None, "the finding goes through the recovery wait"

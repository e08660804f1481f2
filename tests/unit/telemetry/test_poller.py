"""One topology's rounds: rules -> damper -> tracker, failures, backoff, rails, the supervisor.

The Prometheus side is a stand-in ``poller.QueryClient`` (the HTTP client has its own tests); the health
side is the real ``HealthTracker`` and ``FabricIndex``, so capacities are the ones status shows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable
from typing import Any

import pytest
from telemetry_builders import make_spec

import builders
from fabricsched.api import topology as api
from fabricsched.telemetry import access, poller, prometheus, rules
from fabricsched.topology import fabric, health, index

H = fabric.HealthState
ERRORS = {"name": "errors", "query": "errors", "threshold": 0}
DEVICES = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]


class FakePrometheus:
    """Answers each query from ``series[promql]`` (a list of (labels, value)); ``down`` refuses all,
    ``refused`` answers 401. Endpoints come from the real client under a policy allowing the
    builders' ``http://prom:9090``."""

    def __init__(self, allow: tuple[str, ...] = ("http://prom:9090",)) -> None:
        self.series: dict[str, list[tuple[dict[str, str], float]]] = {}
        self.down = False
        self.refused = False
        self.broken: set[str] = set()
        self.asked: list[str] = []
        self.forgotten = 0
        self._real = prometheus.PrometheusClient(access.AccessPolicy.parse(allow))

    def endpoint(self, prom: api.PrometheusHealthSpec) -> access.Endpoint:
        return self._real.endpoint(prom)

    def forget_credentials(self) -> None:
        self.forgotten += 1

    async def query(self, endpoint: access.Endpoint, promql: str, timeout_s: float) -> list[rules.Sample]:
        self.asked.append(promql)
        url = endpoint.url
        if self.down:
            raise prometheus.TelemetryError("unreachable", f"{url}: connection refused")
        if self.refused:
            raise prometheus.TelemetryError("auth", f"{url}/api/v1/query: HTTP 401 Unauthorized")
        if promql in self.broken:
            raise prometheus.TelemetryError("query", "bad_data: parse error")
        return [rules.Sample(labels, value) for labels, value in self.series.get(promql, [])]


class FakeSink:
    """The operator side: a real tracker and fabric index, and a log of availability reports."""

    def __init__(self, spec: api.FabricTopologySpec, hosts: dict[str, str] | None = None) -> None:
        self.current: api.FabricTopologySpec | None = spec
        self.tracker = health.HealthTracker(spec.health.recover_after_seconds, spec.health.degraded_capacity)
        self.index = index.FabricIndex(spec)
        for name, leaf in (hosts or {"h1": "l1", "h2": "l1"}).items():
            self.index.set_node(builders.make_node(name).leaf(leaf).spine("s1").gpus(8).info())
        self.reports: list[poller.Availability] = []
        self.feeds = 0
        self.now = 0.0

    def spec(self) -> api.FabricTopologySpec | None:
        return self.current

    def known(self) -> Collection[health.ElementId] | None:
        fab = self.index.snapshot().fabric
        found = {health.ElementId.node(h) for h in fab.hosts}
        found |= {health.ElementId.domain(fab.tiers[d.tier].name, d.name) for d in fab.domains.values()}
        return found

    def held(self) -> Iterable[health.Observation]:
        return [o for r in self.tracker.effective().values() for o in r.sources if o.source == "prometheus"]

    def feed(self, observations: list[health.Observation]) -> None:
        self.feeds += 1
        for change in self.tracker.update(self.now, "prometheus", observations):
            self.index.set_health(change.element, self.tracker.get(change.element))

    def report(self, availability: poller.Availability) -> None:
        self.reports.append(availability)

    def host(self, name: str) -> tuple[H, float]:
        h = self.index.snapshot().fabric.hosts[name]  # type: ignore[index]
        return h.state, h.health

    def leaf(self, name: str) -> tuple[H, float]:
        d = self.index.snapshot().fabric.domains[(0, name)]  # type: ignore[index]
        return d.state, d.uplink_health


def make_poller(sink: FakeSink, prom: FakePrometheus) -> poller.TopologyPoller:
    return poller.TopologyPoller("ib", sink, prom, clock=lambda: sink.now)


def rounds(p: poller.TopologyPoller, sink: FakeSink, count: int, step: float = 30.0) -> list[float | None]:
    delays = []
    for _ in range(count):
        delays.append(asyncio.run(p.evaluate_once()))
        sink.now += step
    return delays


def spec(*rules_: dict[str, Any], **kw: Any) -> api.FabricTopologySpec:
    return make_spec(list(rules_), defaultRules={"enabled": False}, intervalSeconds=30, **kw)


def test_a_host_degrades_after_two_firing_rounds_and_recovers_after_the_hysteresis() -> None:
    sink, prom = FakeSink(spec({**ERRORS, "targetRegex": "([^:]+)(:[0-9]+)?"})), FakePrometheus()
    p = make_poller(sink, prom)
    prom.series["errors"] = [({"instance": "h1:9100"}, 7.0), ({"instance": "h2:9100"}, 0.0)]
    rounds(p, sink, 1)
    assert sink.host("h1") == (H.HEALTHY, 1.0)
    rounds(p, sink, 1)
    assert sink.host("h1") == (H.DEGRADED, 0.5) and sink.host("h2") == (H.HEALTHY, 1.0)
    [source] = sink.tracker.get(health.ElementId.node("h1")).sources  # type: ignore[union-attr]
    assert (source.source, source.rule, source.value) == ("prometheus", "errors", 7.0)
    prom.series["errors"] = [({"instance": "h1:9100"}, 0.0)]
    rounds(p, sink, 2)  # released by the rule at t=60; recoverAfterSeconds is 60
    assert sink.host("h1")[0] is H.DEGRADED
    rounds(p, sink, 1)
    assert sink.host("h1") == (H.HEALTHY, 1.0)
    assert sink.reports == [poller.OK]


def test_samples_naming_no_host_of_the_fabric_are_ignored() -> None:
    sink, prom = FakeSink(spec(ERRORS)), FakePrometheus()
    prom.series["errors"] = [({"instance": "10.0.0.7:9100"}, 7.0)]
    rounds(make_poller(sink, prom), sink, 3)
    assert sink.tracker.effective() == {}


def test_one_rail_of_four_down_leaves_the_host_three_quarters() -> None:
    sink = FakeSink(spec({"name": "port", "query": "state", "comparison": "!=", "threshold": 4,
                          "state": "down", "railLabel": "device"}, rails=4, rail_devices=DEVICES))
    prom = FakePrometheus()
    prom.series["state"] = [({"instance": "h1", "device": d}, 1.0 if d == "mlx5_2" else 4.0) for d in DEVICES]
    rounds(make_poller(sink, prom), sink, 2)
    assert sink.host("h1") == (H.DEGRADED, 0.75)
    assert set(sink.tracker.effective()) == {health.ElementId.node("h1", 2)}


def test_a_rail_leaf_with_degraded_uplinks_lowers_that_rail_of_its_scalable_unit() -> None:
    rule = {"name": "uplinks", "query": "up_fraction", "target": "domain", "targetLabel": "su",
            "tier": "leaf", "comparison": "<", "threshold": 1, "capacityFromValue": True, "railLabel": "rail"}
    sink, prom = FakeSink(spec(rule, rails=4, rail_devices=DEVICES)), FakePrometheus()
    prom.series["up_fraction"] = [({"su": "l1", "rail": "1"}, 0.5), ({"su": "l1", "rail": "0"}, 1.0)]
    rounds(make_poller(sink, prom), sink, 2)
    state, capacity = sink.leaf("l1")
    assert state is H.DEGRADED and capacity == pytest.approx((3 + 0.5) / 4)
    assert sink.host("h1") == (H.HEALTHY, 1.0)


def test_an_unreachable_prometheus_keeps_the_last_health_reports_once_and_backs_off() -> None:
    sink, prom = FakeSink(spec(ERRORS)), FakePrometheus()
    p = make_poller(sink, prom)
    prom.series["errors"] = [({"instance": "h1"}, 7.0)]
    rounds(p, sink, 2)
    feeds = sink.feeds
    prom.down = True
    delays = rounds(p, sink, 4, step=1000.0)  # long enough for any recovery wait to pass
    assert delays == [30.0, 60.0, 120.0, 240.0]
    assert sink.feeds == feeds, "nothing is fed while Prometheus is away"
    assert sink.host("h1") == (H.DEGRADED, 0.5)
    assert [r.reason for r in sink.reports] == ["QueriesSucceeded", "PrometheusUnreachable"]
    assert "connection refused" in (sink.reports[-1].problem or "")
    prom.down = False
    assert rounds(p, sink, 1) == [30.0]
    assert sink.reports[-1] == poller.OK
    assert sink.host("h1") == (H.DEGRADED, 0.5), "the finding survived the outage"


def test_a_failing_query_keeps_its_rule_findings_while_other_rules_go_on() -> None:
    other = {"name": "other", "query": "other", "threshold": 0}
    sink, prom = FakeSink(spec(ERRORS, other)), FakePrometheus()
    p = make_poller(sink, prom)
    prom.series["errors"] = [({"instance": "h1"}, 7.0)]
    prom.series["other"] = [({"instance": "h2"}, 7.0)]
    rounds(p, sink, 2)
    prom.broken.add("errors")
    prom.series["other"] = []
    assert rounds(p, sink, 5) == [30.0] * 5, "a bad query is no reason to back off"
    assert sink.host("h1")[0] is H.DEGRADED
    assert sink.host("h2")[0] is H.HEALTHY
    assert sink.reports[-1].reason == "QueryFailed"
    assert sink.reports[-1].problem == "rule errors: bad_data: parse error"


def test_a_domain_rule_naming_an_undeclared_tier_is_reported_and_skipped() -> None:
    rule = {"name": "core-uplinks", "query": "x", "target": "domain", "targetLabel": "c", "tier": "core"}
    sink, prom = FakeSink(spec(rule)), FakePrometheus()
    rounds(make_poller(sink, prom), sink, 1)
    assert prom.asked == []
    assert sink.reports[-1].reason == "InvalidRule"
    assert "tier core is not one of spec.tiers" in (sink.reports[-1].problem or "")


def test_held_findings_restored_from_status_stay_until_a_good_reading() -> None:
    sink, prom = FakeSink(spec(ERRORS)), FakePrometheus()
    h1 = health.ElementId.node("h1")
    restored = health.Observation(h1, H.DEGRADED, 0.5, "prometheus", "prometheus rule errors: 7 > 0",
                                  rule="errors", value=7.0)
    sink.tracker.restore([health.ElementHealth(h1, H.DEGRADED, 0.5, 0.0, None, (restored,))])
    prom.series["errors"] = [({"instance": "h1"}, 9.0)]
    rounds(make_poller(sink, prom), sink, 1)
    record = sink.tracker.get(h1)
    assert record is not None and record.recovering_since is None
    assert [o.value for o in record.sources] == [9.0]


def test_the_poller_stops_when_the_topology_loses_its_prometheus_spec() -> None:
    sink, prom = FakeSink(spec(ERRORS)), FakePrometheus()
    p = make_poller(sink, prom)
    sink.current = make_spec([])
    sink.current = api.FabricTopologySpec.model_validate({"tiers": [{"name": "leaf", "nodeLabel": "t0"}]})
    assert asyncio.run(p.evaluate_once()) is None
    sink.current = None
    assert asyncio.run(p.evaluate_once()) is None


def test_the_supervisor_runs_one_poller_per_wanted_topology() -> None:
    started: list[str] = []

    async def main() -> None:
        async def start(name: str) -> None:
            started.append(name)
            await asyncio.sleep(3600)

        sup = poller.Supervisor(start)
        sup.sync({"a", "b"})
        await asyncio.sleep(0)
        assert sup.running == {"a", "b"}
        assert sup.sync({"b"}) == ["a"]
        sup.sync({"b"})
        await asyncio.sleep(0)
        assert sup.running == {"b"} and sorted(started) == ["a", "b"]
        await sup.close()
        assert sup.running == set()

    asyncio.run(main())


def test_a_url_the_operator_does_not_allow_is_never_asked_and_the_last_health_stays() -> None:
    sink, prom = FakeSink(spec(ERRORS)), FakePrometheus()
    p = make_poller(sink, prom)
    prom.series["errors"] = [({"instance": "h1"}, 7.0)]
    rounds(p, sink, 2)
    asked, feeds = len(prom.asked), sink.feeds
    sink.current = make_spec([ERRORS], defaultRules={"enabled": False}, intervalSeconds=30,
                             url="http://10.0.0.1:10250")
    assert rounds(p, sink, 3, step=1000.0) == [30.0] * 3
    assert len(prom.asked) == asked and sink.feeds == feeds, "no request, nothing fed"
    assert sink.host("h1") == (H.DEGRADED, 0.5)
    assert sink.reports[-1].reason == "PrometheusNotAllowed"
    assert "http://10.0.0.1:10250 is not allowed" in (sink.reports[-1].problem or "")


def test_a_missing_token_file_is_reported_and_nothing_is_asked() -> None:
    sink = FakeSink(make_spec([ERRORS], defaultRules={"enabled": False},
                              access={"bearerTokenFile": "/etc/fabricsched/prometheus/no-such-token"}))
    prom = FakePrometheus()
    rounds(make_poller(sink, prom), sink, 1)
    assert prom.asked == []
    assert sink.reports[-1].reason == "CredentialsUnavailable"
    assert "no-such-token does not exist" in (sink.reports[-1].problem or "")


def test_refused_credentials_say_401_once_for_every_rule_and_are_read_afresh() -> None:
    other = {"name": "other", "query": "other", "threshold": 0}
    sink, prom = FakeSink(spec(ERRORS, other)), FakePrometheus()
    p = make_poller(sink, prom)
    prom.refused = True
    assert rounds(p, sink, 2) == [30.0, 60.0]
    report = sink.reports[-1]
    assert report.reason == "PrometheusUnauthorized"
    assert report.problem == "rules errors, other: http://prom:9090/api/v1/query: HTTP 401 Unauthorized"
    assert prom.forgotten == 2
    prom.refused = False
    rounds(p, sink, 1)
    assert sink.reports[-1] == poller.OK


def test_the_problem_message_is_bounded() -> None:
    problems = [(f"rule-{i}", f"error {i} " + "x" * 500) for i in range(64)]
    assert len(poller.describe(problems)) <= poller.MAX_PROBLEM_CHARS

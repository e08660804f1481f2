"""Status computation and the reporter loop: what is written, when, and what is not."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from controller_harness import RECOVER_S, Harness, gpu_node, topology_body

import builders
from fabricsched import ids
from fabricsched.controller import events, metrics, reporter, status
from fabricsched.ports import errors
from fabricsched.topology import health

IB = ids.TopologyName("ib")


def compute(h: Harness, name: str = "ib",
            reserved: Mapping[ids.NodeName, int] | None = None) -> dict[str, Any]:
    tname = ids.TopologyName(name)
    return status.build(status.gather(h.state.objects[tname], h.state.topologies.get(tname),
                                      h.state.snapshot(tname), h.clock(), reserved))


def test_status_counts_nodes_gpus_and_domain_rows(synced: Harness) -> None:
    synced.state.apply_pod(builders.make_pod("p", "train").gpus(8).on("l2-h1").build())
    out = compute(synced)
    assert (out["observedGeneration"], out["nodes"], out["gpus"]) == (1, 4, {"total": 32, "free": 24})
    rows = {(r["tier"], r["name"]): r for r in out["domains"]}
    assert rows[("leaf", "l2")]["gpus"] == {"total": 16, "free": 8}
    assert rows[("leaf", "l1")]["parent"] == "s1"
    assert rows[("spine", "s1")]["nodes"] == 4 and "parent" not in rows[("spine", "s1")]
    conditions = {c["type"]: c["status"] for c in out["conditions"]}
    assert conditions == {"Ready": "True", "Degraded": "False"}


def test_reservations_count_as_taken(synced: Harness) -> None:
    out = compute(synced, reserved={ids.NodeName("l1-h0"): 8})
    assert out["gpus"]["free"] == 24


def test_degraded_node_is_listed_with_its_source(synced: Harness) -> None:
    synced.state.apply_node(gpu_node("l1-h1").condition("FabricLinkDegraded", True, "symbol errors on mlx5_2")
                            .build())
    out = compute(synced)
    assert out["degradedCount"] == 1
    (record,) = out["degraded"]
    assert (record["kind"], record["node"], record["state"], record["capacity"]) == (
        "node", "l1-h1", "degraded", 0.5)
    assert record["sources"] == [{"source": "condition",
                                  "reason": "FabricLinkDegraded: symbol errors on mlx5_2"}]
    assert {c["type"]: c["status"] for c in out["conditions"]}["Degraded"] == "True"


def test_condition_transition_time_is_kept_while_status_is_unchanged(synced: Harness) -> None:
    first = compute(synced)
    synced.state.apply_topology("ib", topology_body(status=first))
    synced.clock.advance(100)
    again = compute(synced)
    assert again["conditions"] == first["conditions"]
    synced.state.apply_node(gpu_node("l1-h1").condition("FabricLinkDegraded", True).build())
    degraded = {c["type"]: c for c in compute(synced)["conditions"]}["Degraded"]
    before = {c["type"]: c for c in first["conditions"]}["Degraded"]
    assert degraded["lastTransitionTime"] != before["lastTransitionTime"]


def test_invalid_spec_reports_ready_false_with_the_reason(harness: Harness) -> None:
    harness.state.apply_topology("bad", topology_body("bad", generation=4, tiers=[]))
    out = compute(harness, "bad")
    ready = {c["type"]: c for c in out["conditions"]}["Ready"]
    assert (out["observedGeneration"], ready["status"], ready["reason"]) == (4, "False", "InvalidSpec")
    assert "tiers" in ready["message"]


class FakeApi:
    """The status subresource of every FabricTopology, in memory; fails on demand."""

    def __init__(self) -> None:
        self.stored: dict[str, Mapping[str, Any]] = {}
        self.writes = 0
        self.fail: Exception | None = None

    def write(self, name: str, body: Mapping[str, Any]) -> None:
        if self.fail is not None:
            raise self.fail
        self.writes += 1
        self.stored[name] = body


def make_reporter(h: Harness, api: FakeApi) -> reporter.StatusReporter:
    return reporter.StatusReporter(h.state, api.write, h.clock, metrics.Metrics(), interval_s=1.0)


def test_reporter_writes_once_then_only_on_change(synced: Harness) -> None:
    api = FakeApi()
    rep = make_reporter(synced, api)
    assert asyncio.run(rep.report_once()) == 1
    assert asyncio.run(rep.report_once()) == 0
    synced.state.apply_pod(builders.make_pod("p", "train").gpus(8).on("l1-h0").build())
    synced.clock.advance(1.0)
    assert asyncio.run(rep.report_once()) == 1
    assert api.stored["ib"]["gpus"] == {"total": 32, "free": 24}


def test_a_capacity_change_waits_an_interval_a_health_change_does_not(synced: Harness) -> None:
    api = FakeApi()
    rep = make_reporter(synced, api)
    assert asyncio.run(rep.report_once()) == 1
    synced.state.apply_pod(builders.make_pod("p", "train").gpus(8).on("l1-h0").build())
    synced.clock.advance(0.5)
    assert asyncio.run(rep.report_once()) == 0  # the free count alone moved: not yet
    assert api.stored["ib"]["gpus"]["free"] == 32
    synced.state.apply_node(gpu_node("l1-h1").condition("FabricLinkDegraded", True).build())
    assert asyncio.run(rep.report_once()) == 1  # health: at once, with the counts as they are
    assert api.stored["ib"]["gpus"]["free"] == 24
    assert api.stored["ib"]["degradedCount"] == 1
    synced.state.apply_pod(builders.make_pod("q", "train").gpus(8).on("l2-h0").build())
    synced.clock.advance(0.9)
    assert asyncio.run(rep.report_once()) == 0
    synced.clock.advance(0.1)
    assert asyncio.run(rep.report_once()) == 1
    assert api.stored["ib"]["gpus"]["free"] == 16


class FakeGangs:
    """``views.GangsOnPath``: the gangs each element touches, set by the test."""

    def __init__(self) -> None:
        self.version = 0
        self.on: dict[str, list[str]] = {}

    def affected(self, topology: ids.TopologyName, element: health.ElementId) -> tuple[list[str], int]:
        names = self.on.get(element.name, [])
        return names, len(names)


def test_a_new_gang_moves_status_at_once_only_when_it_touches_an_unhealthy_element(synced: Harness) -> None:
    api, gangs = FakeApi(), FakeGangs()
    rep = reporter.StatusReporter(synced.state, api.write, synced.clock, metrics.Metrics(), interval_s=1.0,
                                  gangs=gangs)
    synced.state.apply_node(gpu_node("l1-h1").condition("FabricLinkDegraded", True).build())
    assert asyncio.run(rep.report_once()) == 1
    # A plan on healthy hosts: the path index moves and GPUs are taken, but no degraded row
    # changes, so it is a capacity change and waits its interval.
    gangs.version += 1
    synced.state.apply_pod(builders.make_pod("p", "train").gpus(8).on("l2-h0").build())
    synced.clock.advance(0.5)
    assert asyncio.run(rep.report_once()) == 0
    gangs.version += 1
    gangs.on["l1-h1"] = ["train/six"]
    assert asyncio.run(rep.report_once()) == 1
    (row,) = api.stored["ib"]["degraded"]
    assert row["affectedGangs"] == ["train/six"] and api.stored["ib"]["gpus"]["free"] == 24


def test_capacity_changes_of_a_large_status_wait_longer(synced: Harness) -> None:
    rep = make_reporter(synced, FakeApi())
    # One interval up to 64 domain rows, one more per 64, at most ten: a 10,000-node fabric of
    # 16-host leaves has 665 rows.
    assert [rep.capacity_interval(rows) for rows in (0, 10, 64, 65, 340, 665, 5000)] == [
        1.0, 1.0, 1.0, 2.0, 6.0, 10.0, 10.0]


def test_reporter_writes_nothing_when_the_stored_status_is_already_right(synced: Harness) -> None:
    stored = compute(synced)
    synced.state.apply_topology("ib", topology_body(status=stored))
    api = FakeApi()
    assert asyncio.run(make_reporter(synced, api).report_once()) == 0
    assert api.writes == 0


def test_reporter_waits_for_the_initial_listings(harness: Harness) -> None:
    harness.state.apply_topology("ib", topology_body())
    api = FakeApi()
    assert asyncio.run(make_reporter(harness, api).report_once()) == 0
    harness.state.mark_synced()
    assert asyncio.run(make_reporter(harness, api).report_once()) == 1


def test_failed_write_is_retried_on_the_next_pass(synced: Harness) -> None:
    api = FakeApi()
    rep = make_reporter(synced, api)
    api.fail = errors.Unavailable("apiserver away")
    assert asyncio.run(rep.report_once()) == 0
    api.fail = None
    assert asyncio.run(rep.report_once()) == 1


def test_deleted_object_is_not_an_error(synced: Harness) -> None:
    api = FakeApi()
    api.fail = errors.NotFound("404 Not Found", 404)
    assert asyncio.run(make_reporter(synced, api).report_once()) == 0


def test_reporter_pass_applies_due_recoveries(synced: Harness) -> None:
    api = FakeApi()
    rep = make_reporter(synced, api)
    synced.state.apply_node(gpu_node("l1-h1").condition("FabricLinkDegraded", True).build())
    synced.state.apply_node(gpu_node("l1-h1").condition("FabricLinkDegraded", False).build())
    asyncio.run(rep.report_once())
    assert api.stored["ib"]["degradedCount"] == 1
    assert api.stored["ib"]["degraded"][0]["recoveringSince"]
    synced.clock.advance(RECOVER_S)
    asyncio.run(rep.report_once())
    assert api.stored["ib"]["degradedCount"] == 0


@pytest.mark.parametrize(("condition", "reason", "kind", "text"), [
    (True, "FabricDegraded", "Warning",
     "node l1-h1 fabric link degraded (capacity 0.50): FabricLinkDegraded: symbol errors on mlx5_2"),
    (False, "FabricRecovering", "Normal", "node l1-h1 fabric link looks healthy"),
], ids=["a degrading node posts a Warning naming the evidence",
        "a clearing node posts that it is recovering"])
def test_health_changes_become_events_on_the_topology(synced: Harness, condition: bool, reason: str,
                                                      kind: str, text: str) -> None:
    posted: list[tuple[str, Mapping[str, Any]]] = []

    async def run() -> None:
        recorder = events.EventRecorder(lambda ns, body: posted.append((ns, body)))
        reporter.forward_health(synced.state, recorder, metrics.Metrics(), synced.clock)
        degraded = gpu_node("l1-h1").condition("FabricLinkDegraded", True, "symbol errors on mlx5_2")
        synced.state.apply_node(degraded.build())
        if not condition:
            synced.state.apply_node(gpu_node("l1-h1").condition("FabricLinkDegraded", False).build())
        await recorder.drain(timeout_s=5)

    asyncio.run(run())
    namespace, body = posted[-1]
    assert namespace == "default"
    assert body["involvedObject"] == {"apiVersion": "fabricsched.io/v1alpha1", "kind": "FabricTopology",
                                      "name": "ib", "uid": "uid-ib"}
    assert (body["reason"], body["type"]) == (reason, kind)
    assert str(body["message"]).startswith(text)


class Part:
    """A ``views.Readiness`` the test switches."""

    def __init__(self) -> None:
        self.reason: str | None = "restoring"

    def not_ready(self) -> str | None:
        return self.reason


def test_the_first_status_pass_waits_for_the_other_parts_and_ready_waits_for_it(harness: Harness) -> None:
    # The first pass builds every status at once: done before /readyz, not under the first requests.
    harness.state.apply_topology("ib", topology_body())
    api = FakeApi()
    extender = Part()
    rep = reporter.StatusReporter(harness.state, api.write, harness.clock, metrics.Metrics(),
                                  interval_s=1.0, after=[extender])

    async def scenario() -> list[tuple[str | None, int]]:
        task = asyncio.create_task(rep.run())
        seen = []
        for step in ("listing", "restoring", "ready"):
            if step == "restoring":
                harness.state.mark_synced()
            if step == "ready":
                extender.reason = None
            await asyncio.sleep(0.5)
            seen.append((rep.not_ready(), api.writes))
        task.cancel()
        return seen

    waiting = "the first FabricTopology status pass is not done"
    assert asyncio.run(scenario()) == [(waiting, 0), (waiting, 0), (None, 1)]


def test_the_first_status_pass_does_not_wait_for_the_other_parts_forever(synced: Harness) -> None:
    # A restore retrying while the API server is away must not keep status unwritten.
    api = FakeApi()
    rep = reporter.StatusReporter(synced.state, api.write, synced.clock, metrics.Metrics(),
                                  interval_s=1.0, after=[Part()])

    async def scenario() -> list[int]:
        task = asyncio.create_task(rep.run())
        await asyncio.sleep(0.3)
        before = api.writes
        synced.clock.advance(reporter.FIRST_PASS_WAIT_S)
        await asyncio.sleep(0.5)
        task.cancel()
        return [before, api.writes]

    assert asyncio.run(scenario()) == [0, 1]

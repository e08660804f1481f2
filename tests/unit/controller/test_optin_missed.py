"""GPU pods of opted-in namespaces created without the scheduler name (``controller.optin``):
which pods count, once each, the rate-limited Events, the status condition, the bounds."""

from __future__ import annotations

import asyncio
from typing import Any

from controller_harness import Harness

import builders
from fabricsched.api import rfc3339
from fabricsched.controller import metrics, optin, reporter
from fabricsched.ports import notices

LABEL = {"fabricsched.io/scheduling": "enabled"}


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def created_pod(h: Harness, name: str, ns: str = "team-a", scheduler: str = "default-scheduler",
                gpus: int = 8, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    body = builders.make_pod(name, ns).gpus(gpus, resource).scheduler(scheduler).build()
    body["metadata"]["creationTimestamp"] = rfc3339.format_epoch(h.clock())
    return body


class Recorded:
    def __init__(self) -> None:
        self.events: list[tuple[notices.ObjectRef, notices.Notice]] = []

    def record(self, ref: notices.ObjectRef, notice: notices.Notice, now: float) -> None:
        self.events.append((ref, notice))


def opted_in(h: Harness, name: str = "team-a") -> None:
    h.state.optin.namespace_changed(namespace(name, LABEL), deleted=False)
    h.clock.advance(optin.GRACE_S + 1)


def test_a_gpu_pod_with_the_default_scheduler_in_an_opted_in_namespace_counts_once(synced: Harness) -> None:
    opted_in(synced)
    body = created_pod(synced, "p0")
    synced.state.apply_pod(body)
    body["status"]["phase"] = "Running"  # later events of the same pod count nothing
    synced.state.apply_pod(body)
    synced.state.apply_pod(body)
    assert synced.state.optin.total == 1
    assert synced.state.optin.last is not None and synced.state.optin.last.name == "p0"


def test_what_does_not_count(synced: Harness) -> None:
    opted_in(synced)
    synced.state.apply_pod(created_pod(synced, "named", scheduler="fabricsched"))
    synced.state.apply_pod(created_pod(synced, "volcano", scheduler="volcano"))
    synced.state.apply_pod(created_pod(synced, "other-resource", resource="example.com/fpga"))
    synced.state.apply_pod(created_pod(synced, "elsewhere", ns="team-b"))
    assert synced.state.optin.total == 0


def test_pods_created_before_the_opt_in_or_within_the_grace_do_not_count(synced: Harness) -> None:
    early = created_pod(synced, "early")
    synced.clock.advance(10)
    synced.state.optin.namespace_changed(namespace("team-a", LABEL), deleted=False)
    synced.state.apply_pod(early)  # seen after the label, created before it
    synced.state.apply_pod(created_pod(synced, "at-once"))
    assert synced.state.optin.total == 0
    synced.clock.advance(optin.GRACE_S)
    synced.state.apply_pod(created_pod(synced, "later"))
    assert synced.state.optin.total == 1


def test_nothing_counts_before_the_initial_listings_are_in(harness: Harness) -> None:
    opted_in(harness)
    harness.state.apply_pod(created_pod(harness, "listed"))
    harness.state.mark_synced()
    harness.state.apply_pod(created_pod(harness, "listed"))
    assert harness.state.optin.total == 0


def test_opting_out_or_deleting_the_namespace_stops_the_count(synced: Harness) -> None:
    opted_in(synced)
    synced.state.optin.namespace_changed(namespace("team-a"), deleted=False)
    synced.state.apply_pod(created_pod(synced, "after-opt-out"))
    opted_in(synced, "team-b")
    synced.state.optin.namespace_changed(namespace("team-b", LABEL), deleted=True)
    synced.state.apply_pod(created_pod(synced, "gone", ns="team-b"))
    synced.state.optin.namespace_changed({"metadata": "not a mapping"}, deleted=False)
    assert synced.state.optin.total == 0


def test_a_recreated_pod_counts_again_a_relisted_one_does_not(synced: Harness) -> None:
    opted_in(synced)
    body = created_pod(synced, "p0")
    synced.state.apply_pod(body)
    synced.state.delete_pod("team-a", "p0")
    synced.state.apply_pod(body)  # the same UID seen anew (a relisting after a missed delete)
    body["metadata"]["uid"] = "uid-new"
    synced.state.apply_pod(body)
    assert synced.state.optin.total == 2


def test_events_are_rate_limited_per_namespace_and_in_all(synced: Harness) -> None:
    recorder = Recorded()
    counted = []
    optin.forward(synced.state.optin, recorder, lambda: counted.append(1))
    opted_in(synced)
    for i in range(50):
        synced.state.apply_pod(created_pod(synced, f"p{i}"))
    assert len(counted) == 50 and len(recorder.events) == 1
    ref, notice = recorder.events[0]
    assert (ref.kind, ref.namespace, ref.name, notice.type, notice.reason) == (
        "Pod", "team-a", "p0", "Warning", "OptInMissed")
    synced.clock.advance(optin.EVENT_INTERVAL_S)
    synced.state.apply_pod(created_pod(synced, "p50"))
    assert len(recorder.events) == 2 and "51 such pods" in recorder.events[1][1].message
    # Many namespaces at once: at most EVENTS_PER_INTERVAL Events a minute in all.
    synced.clock.advance(optin.EVENT_INTERVAL_S)
    for n in range(3 * optin.EVENTS_PER_INTERVAL):
        synced.state.optin.namespace_changed(namespace(f"ns-{n}", LABEL), deleted=False)
    synced.clock.advance(optin.GRACE_S)
    for n in range(3 * optin.EVENTS_PER_INTERVAL):
        synced.state.apply_pod(created_pod(synced, "p", ns=f"ns-{n}"))
    assert len(recorder.events) == 2 + optin.EVENTS_PER_INTERVAL


def test_memory_is_bounded(synced: Harness) -> None:
    watch = synced.state.optin
    for n in range(optin.MAX_RECORDS + 100):
        watch.namespace_changed(namespace(f"ns-{n}", LABEL), deleted=False)
    synced.clock.advance(optin.GRACE_S)
    for n in range(optin.MAX_RECORDS + 100):
        synced.state.apply_pod(created_pod(synced, "p", ns=f"ns-{n}"))
    assert watch.total == optin.MAX_RECORDS + 100
    assert len(watch._records) == optin.MAX_RECORDS
    summary = watch.summary()
    assert summary is not None and len(summary.namespaces) == optin.SHOWN_NAMESPACES
    assert summary.namespaces[0] == (f"ns-{optin.MAX_RECORDS + 99}", 1)


def test_the_status_condition_appears_and_turns_false_after_the_window(synced: Harness) -> None:
    api: dict[str, Any] = {}
    rep = reporter.StatusReporter(synced.state, api.__setitem__, synced.clock, metrics.Metrics())
    asyncio.run(rep.report_once())
    assert not any(c["type"] == "OptInMissed" for c in api["ib"]["conditions"])
    opted_in(synced)
    synced.state.apply_pod(created_pod(synced, "p0"))
    assert asyncio.run(rep.report_once()) == 1
    cond = next(c for c in api["ib"]["conditions"] if c["type"] == "OptInMissed")
    assert cond["status"] == "True" and cond["reason"] == "PodsMissedWebhook"
    assert "1 GPU pod of opted-in namespaces" in cond["message"] and "team-a/p0" in cond["message"]
    synced.clock.advance(optin.WINDOW_S + 1)
    assert asyncio.run(rep.report_once()) == 1
    cond = next(c for c in api["ib"]["conditions"] if c["type"] == "OptInMissed")
    assert cond["status"] == "False" and cond["message"].startswith("none in the last hour")


def test_a_condition_stored_by_an_earlier_process_is_kept_then_ages(synced: Harness) -> None:
    now = synced.clock()
    stored = optin.condition(optin.Summary(1, optin.Miss("a", "p", "u", now, 1), (("a", 1),)), [], now, 1)
    assert stored is not None
    assert optin.condition(None, [stored], now + 60, 1) == stored
    aged = optin.condition(None, [stored], now + optin.WINDOW_S + 1, 1)
    assert aged is not None and aged.status == "False"
    assert optin.condition(None, [], now, 1) is None

"""A gang's diagnosis on the page: cached per gang and window, one computation per key at a
time, rate-limited per gang and overall (429/503 with Retry-After), failures and slow answers
turned into statuses; the query parsed strictly and the gang looked up among the page's."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

import pytest
from aiohttp import test_utils
from dashboard_builders import demo_facts, gang_on

from fabricsched.dashboard import diagnosis, ondemand, server, view
from fabricsched.dashboard.query import BadQuery


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Computer:
    """Counts calls; answers 200 with the key, or raises/blocks when told."""

    def __init__(self) -> None:
        self.calls: list[Hashable] = []
        self.gate: asyncio.Event | None = None
        self.fail = False

    async def __call__(self, key: Hashable) -> ondemand.Reply:
        self.calls.append(key)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise RuntimeError("boom")
        return ondemand.Reply(200, {"key": str(key)})


def _demand(limits: ondemand.Limits, clock: Clock) -> tuple[ondemand.OnDemand[Hashable], Computer]:
    computer = Computer()
    return ondemand.OnDemand(computer, limits, clock), computer


def test_a_fresh_answer_is_cached_and_recomputed_after_its_ttl() -> None:
    async def run() -> None:
        clock = Clock()
        demand, computer = _demand(ondemand.Limits(ttl_s=30, group_interval_s=10), clock)
        assert (await demand.get(("a", 3600), "a")).status == 200
        clock.now += 20
        cached = await demand.get(("a", 3600), "a")
        assert cached.status == 200 and cached.age_s == 20 and len(computer.calls) == 1
        clock.now += 11
        assert (await demand.get(("a", 3600), "a")).age_s == 0
        assert len(computer.calls) == 2

    asyncio.run(run())


def test_one_gang_is_computed_at_most_once_per_interval_whatever_the_window() -> None:
    async def run() -> None:
        clock = Clock()
        demand, computer = _demand(ondemand.Limits(group_interval_s=10), clock)
        await demand.get(("a", 3600), "a")
        clock.now += 4
        other_window = await demand.get(("a", 900), "a")
        assert other_window.status == 429 and other_window.retry_after_s == 6
        assert (await demand.get(("b", 3600), "b")).status == 200  # another gang is not held back
        clock.now += 6
        assert (await demand.get(("a", 900), "a")).status == 200
        assert len(computer.calls) == 3

    asyncio.run(run())


def test_concurrent_requests_share_one_computation_and_the_slots_are_bounded() -> None:
    async def run() -> None:
        clock = Clock()
        demand, computer = _demand(ondemand.Limits(max_running=2, group_interval_s=0), clock)
        computer.gate = asyncio.Event()
        first = [asyncio.create_task(demand.get(("a", 60), "a")) for _ in range(5)]
        second = asyncio.create_task(demand.get(("b", 60), "b"))
        await asyncio.sleep(0)
        busy = await demand.get(("c", 60), "c")
        assert busy.status == 503 and busy.retry_after_s is not None
        computer.gate.set()
        answers = await asyncio.gather(*first, second)
        assert [a.status for a in answers] == [200] * 6
        assert sorted(map(str, computer.calls)) == ["('a', 60)", "('b', 60)"]

    asyncio.run(run())


def test_the_overall_rate_is_a_bucket_refilled_over_a_minute() -> None:
    async def run() -> None:
        clock = Clock()
        demand, _ = _demand(ondemand.Limits(per_minute=3, group_interval_s=0, ttl_s=0), clock)
        assert [(await demand.get(k, k)).status for k in "abc"] == [200, 200, 200]
        over = await demand.get("d", "d")
        assert over.status == 429 and over.retry_after_s == pytest.approx(20)
        clock.now += 20
        assert (await demand.get("d", "d")).status == 200

    asyncio.run(run())


def test_a_failure_or_a_slow_answer_is_a_status_and_is_cached_too() -> None:
    async def run() -> None:
        clock = Clock()
        demand, computer = _demand(ondemand.Limits(timeout_s=0.05, group_interval_s=0), clock)
        computer.fail = True
        failed = await demand.get("a", "a")
        assert failed.status == 500 and "RuntimeError" in failed.body["error"]
        assert (await demand.get("a", "a")).status == 500 and len(computer.calls) == 1
        computer.fail, computer.gate = False, asyncio.Event()
        slow = await demand.get("b", "b")
        assert slow.status == 504

    asyncio.run(run())


def test_the_cache_is_bounded_least_recently_asked_first() -> None:
    async def run() -> None:
        clock = Clock()
        demand, computer = _demand(ondemand.Limits(max_entries=2, group_interval_s=0, per_minute=100), clock)
        for key in ["a", "b", "a", "c", "a", "b"]:
            await demand.get(key, key)
        assert computer.calls == ["a", "b", "c", "b"]

    asyncio.run(run())


def test_the_query_is_parsed_strictly() -> None:
    assert diagnosis.parse("gang=ns/job", [("gang", "ns/job")]) == ("ns/job", 3600)
    assert diagnosis.parse("", [("gang", "ns/job"), ("since", "15m")]) == ("ns/job", 900)
    for pairs in (
        [],
        [("gang", "a"), ("gang", "b")],
        [("other", "x")],
        [("gang", "a"), ("since", "1y")],
        [("gang", "a"), ("since", "10s")],
        [("gang", "a"), ("since", "30d")],
        [("gang", "a\x00")],
        [("gang", "a" * 700)],
    ):
        with pytest.raises(BadQuery):
            diagnosis.parse("", pairs)


def test_only_a_gang_the_page_shows_is_diagnosed_by_its_placement() -> None:
    facts = demo_facts()
    placed = gang_on(facts, ["gpu-001"], name="llama_70b")
    placed = view.GangFacts(**{**placed.__dict__, "placement": "llama-70b-0123abcd"})
    waiting = view.PendingFacts("ns/wait@u1", "ns", "wait", None, "NoFit", "too big")
    snap = view.PageSnapshot([facts], [placed], [waiting])
    asked = diagnosis.find(snap, f"{placed.namespace}/llama_70b", 900)
    assert asked is not None and (asked.name, asked.since_s) == ("llama-70b-0123abcd", 900)
    assert diagnosis.find(snap, placed.key, 60) is not None
    found = diagnosis.find(snap, "ns/wait", 60)
    assert found is not None and found.name == "wait"
    assert diagnosis.find(snap, "ns/other", 60) is None


def test_the_endpoint_answers_with_statuses_and_retry_after() -> None:
    facts = demo_facts()
    gang = gang_on(facts, ["gpu-001"])
    source = view.PageSnapshot([facts], [gang])

    class Source:
        def version(self) -> Hashable:
            return 1

        def snapshot(self) -> view.PageSnapshot:
            return source

    asked: list[diagnosis.GangAsked] = []

    async def diagnose(key: diagnosis.GangAsked) -> ondemand.Reply:
        asked.append(key)
        return ondemand.Reply(200, {"causes": [], "notMeasured": [{"signal": "x"}]})

    async def run() -> None:
        app = server.make_app(Source(), min_rebuild_s=0, diagnose=diagnose)
        async with test_utils.TestClient(test_utils.TestServer(app)) as client:
            name = f"{gang.namespace}/{gang.name}"
            ok = await client.get("/api/diagnose", params={"gang": name})
            assert ok.status == 200 and (await ok.json())["notMeasured"]
            again = await client.get("/api/diagnose", params={"gang": name, "since": "15m"})
            assert again.status == 429 and int(again.headers["Retry-After"]) >= 1
            assert (await client.get("/api/diagnose", params={"gang": "x/none"})).status == 404
            assert (await client.get("/api/diagnose", params={"since": "1h"})).status == 400
        off = server.make_app(Source(), min_rebuild_s=0)
        async with test_utils.TestClient(test_utils.TestServer(off)) as client:
            answer: Any = await client.get("/api/diagnose", params={"gang": name})
            assert answer.status == 404

    asyncio.run(run())
    assert [(a.namespace, a.name, a.since_s) for a in asked] == [(gang.namespace, gang.name, 3600)]

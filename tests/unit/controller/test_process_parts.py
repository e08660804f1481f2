"""The process around the state: Event recorder, health server."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from fabricsched.controller import events, health_server, metrics, runtime, state
from fabricsched.ports import errors, notices
from timing import Clock

REF = notices.ObjectRef("fabricsched.io/v1alpha1", "FabricTopology", "ib", "uid-ib")


def test_recorder_drops_the_same_event_within_the_dedupe_window() -> None:
    posted: list[Mapping[str, Any]] = []
    outcomes: list[str] = []

    async def run() -> None:
        recorder = events.EventRecorder(lambda _, body: posted.append(body), outcome=outcomes.append,
                                        dedupe_s=30)
        notice = notices.Notice("Warning", "FabricDegraded", "node a fabric link degraded")
        recorder.record(REF, notice, 100.0)
        recorder.record(REF, notice, 110.0)
        recorder.record(REF, notice, 131.0)
        await recorder.drain(timeout_s=5)

    asyncio.run(run())
    assert len(posted) == 2
    assert outcomes.count("deduplicated") == 1


def test_recorder_counts_failed_posts_and_keeps_going() -> None:
    outcomes: list[str] = []

    def post(_: str, body: Mapping[str, Any]) -> None:
        if body["reason"] == "Bad":
            raise errors.Forbidden("403 Forbidden", 403)

    async def run() -> None:
        recorder = events.EventRecorder(post, outcome=outcomes.append)
        recorder.record(REF, notices.Notice("Normal", "Bad", "x"), 1.0)
        recorder.record(REF, notices.Notice("Normal", "Good", "y"), 1.0)
        task = asyncio.create_task(recorder.run())
        while len(outcomes) < 2:
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(run())
    assert outcomes == ["failed", "posted"]


def test_full_queue_drops_events_instead_of_blocking() -> None:
    outcomes: list[str] = []

    async def run() -> None:
        recorder = events.EventRecorder(lambda *_: None, capacity=1, outcome=outcomes.append)
        recorder.record(REF, notices.Notice("Normal", "A", "a"), 1.0)
        recorder.record(REF, notices.Notice("Normal", "B", "b"), 1.0)

    asyncio.run(run())
    assert outcomes == ["dropped"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_health_endpoints_answer_and_readiness_follows_the_sync(tmp_path: Path) -> None:
    clock = Clock()
    cluster = state.ClusterState(clock)
    registry = metrics.Metrics()
    registry.watch_state(lambda: {"nodes": len(cluster.nodes)}, lambda: {})
    address = f"127.0.0.1:{free_port()}"
    options = runtime.OperatorOptions(kubeconfig=tmp_path / "kubeconfig", health_address=address)
    rt = runtime.Runtime(options, cluster, None, events.EventRecorder(lambda *_: None), registry, clock)

    async def run() -> list[tuple[str, int, str]]:
        runner = await health_server.start(rt)
        seen = []
        try:
            async with aiohttp.ClientSession() as session:
                for path in ("/healthz", "/readyz"):
                    async with session.get(f"http://{address}{path}") as r:
                        seen.append((path, r.status, await r.text()))
                cluster.mark_synced()
                for path in ("/readyz", "/metrics"):
                    async with session.get(f"http://{address}{path}") as r:
                        seen.append((path, r.status, await r.text()))
        finally:
            await runner.cleanup()
        return seen

    seen = asyncio.run(run())
    assert [(p, s) for p, s, _ in seen] == [("/healthz", 200), ("/readyz", 503), ("/readyz", 200),
                                           ("/metrics", 200)]
    assert 'fabricsched_state_objects{kind="nodes"} 0.0' in seen[-1][2]


def test_a_failed_companion_stops_the_process_unless_it_is_optional() -> None:
    from fabricsched.controller import running  # kopf-heavy: only this test needs it

    async def fails() -> None:
        raise OSError("address already in use: 127.0.0.1:8888")

    async def run(optional: bool) -> tuple[list[str], bool]:
        stopping = asyncio.Event()
        failures: list[str] = []
        await running._guarded("extender", fails, None if optional else failures, stopping)
        return failures, stopping.is_set()

    failures, stopped = asyncio.run(run(optional=False))
    assert stopped
    assert failures == ["extender: OSError: address already in use: 127.0.0.1:8888"]
    assert asyncio.run(run(optional=True)) == ([], False)

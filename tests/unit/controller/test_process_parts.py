"""The process around the state: Event recorder, health server, command-line options."""

from __future__ import annotations

import argparse
import asyncio
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fabricsched.controller import commands, events, health_server, metrics, runtime, state
from timing import Clock

REF = events.ObjectRef("fabricsched.io/v1alpha1", "FabricTopology", "ib", "uid-ib")


def test_recorder_drops_the_same_event_within_the_dedupe_window() -> None:
    posted: list[Mapping[str, Any]] = []
    outcomes: list[str] = []

    async def run() -> None:
        recorder = events.EventRecorder(lambda _, body: posted.append(body), outcome=outcomes.append,
                                        dedupe_s=30)
        notice = events.Notice("Warning", "FabricDegraded", "node a fabric link degraded")
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
            raise RuntimeError("403")

    async def run() -> None:
        recorder = events.EventRecorder(post, outcome=outcomes.append)
        recorder.record(REF, events.Notice("Normal", "Bad", "x"), 1.0)
        recorder.record(REF, events.Notice("Normal", "Good", "y"), 1.0)
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
        recorder.record(REF, events.Notice("Normal", "A", "a"), 1.0)
        recorder.record(REF, events.Notice("Normal", "B", "b"), 1.0)

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
    options = runtime.Options(kubeconfig=tmp_path / "kubeconfig", health_address=address)
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


def parse(tmp_path: Path, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    commands.register(parser.add_subparsers())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    return parser.parse_args(["run", "--kubeconfig", str(kubeconfig), *argv])


def test_run_options_take_the_flags(tmp_path: Path) -> None:
    args = parse(tmp_path, "--health-address", "0.0.0.0:9000", "--log-format", "json",
                 "--namespace-for-leases", "fabric")
    options = commands.options_from(args)
    assert (options.health_address, options.log_format, options.lease_namespace) == (
        "0.0.0.0:9000", "json", "fabric")
    assert options.extender_address == "127.0.0.1:8888"


@pytest.mark.parametrize(("argv", "message"), [
    (["--health-address", "8081"], "--health-address"),
    (["--extender-address", "localhost:http"], "--extender-address"),
    (["--status-interval", "0"], "--status-interval"),
], ids=["an address without a host is refused", "a named port is refused", "a zero interval is refused"])
def test_run_options_refuse_bad_flags(tmp_path: Path, argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        commands.options_from(parse(tmp_path, *argv))


def test_missing_kubeconfig_is_refused(tmp_path: Path) -> None:
    args = parse(tmp_path)
    args.kubeconfig = tmp_path / "absent"
    with pytest.raises(ValueError, match="does not exist"):
        commands.options_from(args)


@pytest.mark.parametrize(
    ("flag", "environ", "expected"),
    [
        pytest.param(None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, None,
                     id="in a pod without flags: service account"),
        pytest.param("given", {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "given",
                     id="an explicit flag wins in a pod"),
        pytest.param(None, {"KUBECONFIG": "env", "KUBERNETES_SERVICE_HOST": "h"}, "env",
                     id="KUBECONFIG wins over the service account"),
    ],
)
def test_kubeconfig_resolution_follows_client_go_order(
    tmp_path: Path, flag: str | None, environ: dict[str, str], expected: str | None
) -> None:
    for name in ("given", "env"):
        (tmp_path / name).write_text("apiVersion: v1\nkind: Config\n")
    env = {k: str(tmp_path / v) if k == "KUBECONFIG" else v for k, v in environ.items()}
    resolved = commands.resolve_kubeconfig(tmp_path / flag if flag else None, env)
    assert resolved == (tmp_path / expected if expected else None)

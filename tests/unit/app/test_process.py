"""The composition root's wiring: the extender built from ``fabricsched run``'s flags, on the
operator's state, and what it gives the operator (reserved GPUs, readiness)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import test_utils, web

from builders import make_node, make_pod, make_topology, topograph_tiers
from fabricsched import ids
from fabricsched.api.placement import PlacementPhase
from fabricsched.app import commands, process
from fabricsched.controller import events, health_server, metrics, runtime, state
from fabricsched.extender import service
from fabricsched.ports import notices
from timing import Clock

TOPOLOGY = "ib"


class Store:
    """FabricPlacement objects in memory (the API server is not what these tests are about)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}

    async def load(self) -> list[dict[str, Any]]:
        return list(self.objects.values())

    async def create(self, manifest: dict[str, Any]) -> None:
        self.objects.setdefault(manifest["metadata"]["name"], manifest)

    async def save(self, manifest: dict[str, Any]) -> None:
        self.objects[manifest["metadata"]["name"]] = manifest


class Recorder:
    def __init__(self) -> None:
        self.notices: list[notices.Notice] = []

    def record(self, ref: notices.ObjectRef, notice: notices.Notice, now: float) -> None:
        self.notices.append(notice)


def run_flags(tmp_path: Path, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    commands.register(parser.add_subparsers())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    return parser.parse_args(["run", "--kubeconfig", str(kubeconfig), *argv])


def cluster(clock: Clock) -> state.ClusterState:
    """Two leaves of four 8-GPU hosts, initial listings applied."""
    cs = state.ClusterState(clock)
    for leaf in ("l1", "l2"):
        for i in range(4):
            cs.apply_node(make_node(f"{leaf}-h{i}").leaf(leaf).spine("s1").gpus(8).build())
    spec = make_topology(topograph_tiers(2)).to_wire()
    cs.apply_topology(TOPOLOGY, {"metadata": {"name": TOPOLOGY, "generation": 1}, "spec": spec})
    cs.mark_synced()
    return cs


def extender(tmp_path: Path, clock: Clock, cs: state.ClusterState, *argv: str) -> service.Service:
    options = commands.options_from(run_flags(tmp_path, *argv)).extender
    return service.Service(cs, Store(), None, Recorder(), clock, options)


def first_rank(svc: service.Service, cs: state.ClusterState) -> None:
    """Job ``a`` of two 8-GPU pods; the filter call for rank 0 plans (and reserves) both."""
    cs.apply_job({"metadata": {"name": "a", "namespace": "train", "uid": "ua"},
                  "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed"}})
    pods = [make_pod(f"a-{r}", "train").job("a", "ua", r).gpus(8).scheduler("fabricsched").build()
            for r in (0, 1)]
    for created in pods:  # as the Job controller does: both pods exist before the first is filtered
        cs.apply_pod(created)
    pod = pods[0]
    answer = asyncio.run(svc.coordinator.filter(pod, list(cs.nodes)))
    assert len(answer.passed) == 1, answer


def phase_after(tmp_path: Path, seconds: float, *argv: str) -> PlacementPhase:
    clock = Clock()
    cs = cluster(clock)
    svc = extender(tmp_path, clock, cs, *argv)
    svc.coordinator.restore([])
    first_rank(svc, cs)
    clock.advance(seconds)
    svc.coordinator.housekeeping()
    (entry,) = svc.book.entries()
    return entry.phase


def test_a_short_reservation_ttl_from_the_command_line_expires_an_unbound_plan(tmp_path: Path) -> None:
    assert phase_after(tmp_path, 6.0, "--reservation-ttl", "5") == PlacementPhase.EXPIRED


def test_the_default_reservation_ttl_still_holds_the_plan_after_six_seconds(tmp_path: Path) -> None:
    assert phase_after(tmp_path, 6.0) == PlacementPhase.RESERVED


def test_the_status_reporter_reads_the_extenders_reserved_gpus(tmp_path: Path) -> None:
    clock = Clock()
    cs = cluster(clock)
    svc = extender(tmp_path, clock, cs)
    svc.coordinator.restore([])
    wired = process.companions(svc)
    assert wired.reserved is not None and wired.reserved.reserved_in(ids.TopologyName(TOPOLOGY)) == {}
    first_rank(svc, cs)
    held = wired.reserved.reserved_in(ids.TopologyName(TOPOLOGY))
    assert sum(held.values()) == 16 and len(held) == 2  # both ranks, no pod bound yet
    assert wired.reserved.reserved_in(ids.TopologyName("other")) == {}


def served(app: web.Application, check: Callable[[test_utils.TestClient[Any, Any]], Awaitable[None]]) -> None:
    async def main() -> None:
        async with test_utils.TestClient(test_utils.TestServer(app)) as client:
            await check(client)

    asyncio.run(main())


def test_a_body_over_the_flagged_limit_is_refused_and_a_small_one_is_answered(tmp_path: Path) -> None:
    clock = Clock()
    cs = cluster(clock)
    svc = extender(tmp_path, clock, cs, "--extender-max-body-bytes", "2048")
    pod = make_pod("p", "train").build()

    async def check(client: test_utils.TestClient[Any, Any]) -> None:
        svc.coordinator.restore([])
        big = {"Pod": pod, "NodeNames": [f"node-{i:04d}" for i in range(300)]}
        assert (await client.post("/filter", json=big)).status == 400
        small = {"Pod": pod, "NodeNames": ["l1-h0"]}
        assert (await client.post("/filter", json=small)).status == 200

    served(svc.app(), check)


def test_readyz_waits_for_the_extenders_reservations_to_be_restored(tmp_path: Path) -> None:
    clock = Clock()
    cs = cluster(clock)
    svc = extender(tmp_path, clock, cs)
    options = runtime.OperatorOptions(kubeconfig=None)
    rt = runtime.Runtime(options, cs, None, events.EventRecorder(lambda *_: None), metrics.Metrics(), clock)
    app = health_server.app(rt, process.companions(svc).readiness)

    async def check(client: test_utils.TestClient[Any, Any]) -> None:
        before = await client.get("/readyz")
        assert before.status == 503 and "not restored" in await before.text()
        svc.coordinator.restore([])
        assert (await client.get("/readyz")).status == 200

    served(app, check)

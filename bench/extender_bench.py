"""The extender's filter + prioritize latency, in-process and over HTTP, next to a pass-through.

    python bench/extender_bench.py [--nodes 1000 5000 10000] [--calls 200] [--http-calls 100]
    python bench/extender_bench.py --nodes 10000 --profile 40   # cProfile of planning calls

For each size, builds the operator's real ``ClusterState`` with a 2-tier fabric (16 hosts of
8 GPUs per leaf, 16 leaves per spine, leaf 2:1, 1% of hosts degraded) and runs gangs of 8
pods (8 GPUs each) through the coordinator: each call is one pod's filter then prioritize with
every node with room as NodeNames (what a kube-scheduler sends at percentageOfNodesToScore
100); the first pod of each gang makes the plan, the others follow it; pods bind as they are
steered, so the fabric fills. Timed three ways, in the same run and process:

- in-process: ``Coordinator.filter`` + ``prioritize`` (no HTTP, no JSON);
- HTTP: the same calls as JSON over loopback to the extender's aiohttp app;
- pass-through: the same requests to an aiohttp app that parses the body and returns every
  node (the floor any Python extender pays for HTTP + JSON of this size).

Prints p50/p99 in ms (in-process: all calls, then the planning calls alone; ``--http-calls 0``
skips HTTP) and the ratio HTTP / pass-through.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import statistics
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
from aiohttp import web

from benchstats import percentile
from fabricsched import ids
from fabricsched.api import extender as wire
from fabricsched.controller import state as cluster_state
from fabricsched.extender import service
from fabricsched.extender.decide import answers
from fabricsched.extender.http import server
from fabricsched.ports import notices

GPU = "nvidia.com/gpu"
HOSTS_PER_LEAF = 16
LEAVES_PER_SPINE = 16
GANG = 8
T0 = 1_700_000_000.0


class NullStore:
    async def load(self) -> list[dict[str, Any]]:
        return []

    async def create(self, manifest: dict[str, Any]) -> None:
        return None

    async def save(self, manifest: dict[str, Any]) -> None:
        return None


class NullRecorder:
    def record(self, ref: notices.ObjectRef, notice: notices.Notice, now: float) -> None:
        del ref, notice, now  # a sink: the bench times decisions, not events


def node(i: int) -> dict[str, Any]:
    leaf, spine = i // HOSTS_PER_LEAF, i // (HOSTS_PER_LEAF * LEAVES_PER_SPINE)
    labels = {"fabric.topograph.run/tier-0": f"l{leaf:04d}", "fabric.topograph.run/tier-1": f"s{spine:03d}"}
    if i % 100 == 37:
        labels["fabricsched.io/fabric-health"] = "degraded"
    return {
        "metadata": {"name": f"n{i:05d}", "labels": labels},
        "status": {"allocatable": {GPU: "8", "cpu": "96"}},
    }


def pod(gang: int, rank: int) -> dict[str, Any]:
    name = f"g{gang}"
    return {
        "metadata": {
            "name": f"{name}-{rank}",
            "namespace": "bench",
            "uid": f"uid-{name}-{rank}",
            "labels": {
                "batch.kubernetes.io/job-name": name,
                "batch.kubernetes.io/job-completion-index": str(rank),
            },
            "ownerReferences": [{"kind": "Job", "name": name, "uid": f"job-{name}", "controller": True}],
        },
        "spec": {
            "schedulerName": "fabricsched",
            "containers": [{"name": "t", "resources": {"requests": {GPU: "8"}, "limits": {GPU: "8"}}}],
        },
        "status": {"phase": "Pending"},
    }


class Bench:
    def __init__(self, size: int) -> None:
        self.state = cluster_state.ClusterState(lambda: T0)
        for i in range(size):
            self.state.apply_node(node(i))
        spec = {
            "tiers": [
                {"name": "leaf", "nodeLabel": "fabric.topograph.run/tier-0", "oversubscription": 2.0},
                {"name": "spine", "nodeLabel": "fabric.topograph.run/tier-1"},
            ]
        }
        self.state.apply_topology("bench", {"metadata": {"name": "bench", "generation": 1}, "spec": spec})
        self.state.mark_synced()
        self.topology = ids.TopologyName("bench")
        # The extender as ``fabricsched run`` builds it, with a store and recorder that keep nothing.
        self.service = service.Service(
            self.state, NullStore(), None, NullRecorder(), lambda: T0, service.ServiceOptions()
        )
        self.writer = self.service.writer
        self.coordinator = self.service.coordinator
        self.state.subscribe(self.coordinator.on_change)
        self.gang = 0
        self.rank = GANG

    async def start(self) -> None:
        self.coordinator.restore([])

    def next_pod(self) -> tuple[dict[str, Any], list[str]]:
        if self.rank == GANG:
            self.gang, self.rank = self.gang + 1, 0
            self.state.apply_job(
                {
                    "metadata": {"name": f"g{self.gang}", "namespace": "bench", "uid": f"job-g{self.gang}"},
                    "spec": {"parallelism": GANG, "completions": GANG},
                    "status": {},
                }
            )
            # As the Job controller does: the gang's pods exist before its first is filtered
            # (a gang is planned only then).
            for rank in range(GANG):
                self.state.apply_pod(pod(self.gang, rank))
        body = pod(self.gang, self.rank)
        self.rank += 1
        snapshot = self.state.snapshot(self.topology)
        assert snapshot is not None
        # What the scheduler's own filters leave: every node with room for the pod (the
        # scheduler does not see reservations, so reserved nodes are passed too).
        names: list[str] = [n for n, free in snapshot.free_gpus.items() if free >= 8]
        return body, names

    def bind(self, body: dict[str, Any], target: str) -> None:
        bound = {**body, "spec": {**body["spec"], "nodeName": target}, "status": {"phase": "Running"}}
        self.state.apply_pod(bound)



async def in_process(bench: Bench, calls: int) -> tuple[list[float], list[float]]:
    """Every call's time, and the planning calls' (first pod of a gang) among them."""
    times, planning = [], []
    for _ in range(calls):
        body, names = bench.next_pod()
        t = time.perf_counter()
        answer = await bench.coordinator.filter(body, names)
        bench.coordinator.prioritize(body, names)
        times.append(time.perf_counter() - t)
        if bench.rank == 1:
            planning.append(times[-1])
        bench.bind(body, answer.passed[0])
    return times, planning


async def profile_planning(bench: Bench, gangs: int) -> None:
    """cProfile over ``gangs`` planning calls (first pod of a gang); followers run unprofiled."""
    profiler = cProfile.Profile()
    for i in range((gangs + 1) * GANG):
        body, names = bench.next_pod()
        planning = bench.rank == 1 and i >= GANG  # the first gang builds the snapshot's index
        if planning:
            profiler.enable()
        answer = await bench.coordinator.filter(body, names)
        bench.coordinator.prioritize(body, names)
        if planning:
            profiler.disable()
        bench.bind(body, answer.passed[0])
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(35)
    stats.sort_stats("tottime").print_stats(25)


def passthrough_app() -> web.Application:
    async def echo(request: web.Request) -> web.Response:
        # Parsed and answered with the same compiled JSON paths as the extender, so the ratio
        # shows what the decision adds, not a difference of encoders.
        args = wire.ExtenderArgs.model_validate_json(await request.read())
        names = args.candidate_names()
        if request.path == "/filter":
            body = server.encode_filter(names, {}, {})
        else:
            body = server.encode_scores(answers.Scores(names, None))
        return web.Response(body=body, content_type="application/json")

    app = web.Application(client_max_size=server.DEFAULT_MAX_BODY_BYTES)
    app.router.add_post("/filter", echo)
    app.router.add_post("/prioritize", echo)
    return app


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def over_http(bench: Bench, calls: int, ours: str, floor: str) -> tuple[list[float], list[float]]:
    timed: dict[str, list[float]] = {ours: [], floor: []}
    async with aiohttp.ClientSession() as session:
        for _ in range(calls):
            body, names = bench.next_pod()
            payload = json.dumps({"Pod": body, "NodeNames": names}).encode()
            target = ""
            for url in (ours, floor):
                t = time.perf_counter()
                async with session.post(f"{url}/filter", data=payload) as r:
                    answer: Mapping[str, Any] = await r.json()
                async with session.post(f"{url}/prioritize", data=payload) as r:
                    await r.read()
                timed[url].append(time.perf_counter() - t)
                if url == ours:
                    target = answer["NodeNames"][0]
            bench.bind(body, target)
    return timed[ours], timed[floor]


async def run(size: int, calls: int, http_calls: int, profile: int = 0) -> None:
    bench = Bench(size)
    await bench.start()
    if profile:
        await profile_planning(bench, profile)
        return
    t = time.perf_counter()
    bench.state.snapshot(next(iter(bench.state.topologies)))
    snapshot_ms = (time.perf_counter() - t) * 1000
    local, planned = await in_process(bench, calls)
    http: list[float] = []
    passthrough: list[float] = []
    if http_calls:
        ours_runner, ours = await serve(server.make_app(bench.coordinator, server.ServerOptions()))
        floor_runner, floor = await serve(passthrough_app())
        try:
            http, passthrough = await over_http(bench, http_calls, ours, floor)
        finally:
            await ours_runner.cleanup()
            await floor_runner.cleanup()
    ms = [lambda v: percentile(v, 50) * 1000, lambda v: percentile(v, 99) * 1000]
    print(f"{size:>6} nodes (snapshot {snapshot_ms:.0f} ms, {bench.gang} gangs of {GANG} steered):")
    timed = [("in-process", local), ("  planning", planned), ("HTTP", http), ("pass-through", passthrough)]
    for label, values in [(label, values) for label, values in timed if values]:
        print(
            f"    {label:<13} p50 {ms[0](values):7.2f} ms   p99 {ms[1](values):7.2f} ms   "
            f"mean {statistics.mean(values) * 1000:7.2f} ms"
        )
    if not http:
        return
    print(
        f"    HTTP / pass-through: p50 x{ms[0](http) / ms[0](passthrough):.2f}, "
        f"p99 x{ms[1](http) / ms[1](passthrough):.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--calls", type=int, default=200, help="in-process calls per size")
    parser.add_argument("--http-calls", type=int, default=100, help="HTTP calls per size (each server)")
    parser.add_argument(
        "--profile", type=int, default=0, metavar="GANGS",
        help="instead of timing, print a cProfile of this many planning calls per size",
    )
    args = parser.parse_args()
    for size in args.nodes:
        asyncio.run(run(size, args.calls, args.http_calls, args.profile))


if __name__ == "__main__":
    main()

"""The fabric page's data endpoint (``/api/state``) over HTTP at 10,000 hosts.

    python bench/dashboard_bench.py [--nodes 10000] [--gangs 300] [--requests 200]

Builds the state the way ``fabricsched run`` does (``extender_bench.Bench``: the operator's real
``ClusterState``, 16 hosts of 8 GPUs per leaf, 16 leaves per spine, 1% of hosts degraded, the
extender's real coordinator), places ``--gangs`` gangs of 8 pods through filter + prioritize
and binds them, then serves the page's aiohttp app (``app.dashboard.ProcessSource`` on that
state) on loopback and times GET /api/state with aiohttp's client, three ways:

- revalidate: nothing moved, the page's own request (``If-None-Match``) -> 304;
- cached: nothing moved, no ETag -> the serialised body of this version (200);
- a new query: ``namespace=`` a new name each time (nothing moved): the fabric part is built
  once per version whatever the query; a query pays its gang list and the join;
- after a change: one pod of a new gang bound before each request, so every request finds a
  new version and rebuilds the document (the cost the page pays while the cluster moves; the
  rebuild is incremental, ``dashboard.fragments``: the bound pod's leaf and what sums it).

Prints p50/p99 in ms and the body size.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time

import aiohttp

from benchstats import percentile
from extender_bench import Bench, serve
from fabricsched.app import dashboard
from fabricsched.dashboard import server


async def timed(session: aiohttp.ClientSession, url: str, etag: str | None) -> tuple[float, int, int, str]:
    headers = {"If-None-Match": etag} if etag else {}
    started = time.perf_counter()
    async with session.get(url, headers=headers) as response:
        body = await response.read()
    return time.perf_counter() - started, response.status, len(body), response.headers.get("ETag", "")


def line(label: str, times: list[float], size: int) -> str:
    p50, p99 = percentile(times, 50) * 1000, percentile(times, 99) * 1000
    return f"{label:<28} p50 {p50:7.2f} ms   p99 {p99:7.2f} ms   ({len(times)} requests, body {size:,} bytes)"


async def run(size: int, gangs: int, requests: int) -> None:
    started = time.perf_counter()
    bench = Bench(size)
    await bench.start()
    for _ in range(gangs * 8):
        body, names = bench.next_pod()
        answer = await bench.coordinator.filter(body, names)
        bench.coordinator.prioritize(body, names)
        bench.bind(body, answer.passed[0])
    print(f"{size:,} hosts, {len(bench.coordinator.book.entries())} gangs placed "
          f"(built in {time.perf_counter() - started:.1f} s)")
    # As ``fabricsched run`` does once its initial listings are in (controller.handlers): the
    # state built so far is frozen out of the collector's sight, so a full collection does not
    # walk it in the middle of a timed request.
    gc.freeze()
    # No rebuild period (the process rebuilds at most once a second): every change is paid here.
    app = server.make_app(dashboard.ProcessSource(bench.state, bench.service), min_rebuild_s=0)
    runner, base = await serve(app)
    url = f"{base}/api/state"
    try:
        async with aiohttp.ClientSession() as session:
            first, status, body_size, etag = await timed(session, url, None)
            assert status == 200, status
            print(f"{'first request (cold)':<28} {first * 1000:7.2f} ms")
            same = [await timed(session, url, etag) for _ in range(requests)]
            assert all(s == 304 for _, s, _, _ in same)
            print(line("revalidate (304)", [t for t, *_ in same], 0))
            cached = [await timed(session, url, None) for _ in range(requests)]
            print(line("cached (200)", [t for t, *_ in cached], body_size))
            queried = [await timed(session, f"{url}?namespace=ns-{i}", None) for i in range(requests)]
            print(line("a new namespace= each time", [t for t, *_ in queried], queried[-1][2]))
            moved = []
            for _ in range(max(1, requests // 4)):
                body, names = bench.next_pod()
                answer = await bench.coordinator.filter(body, names)
                bench.bind(body, answer.passed[0])
                took, status, moved_size, new_tag = await timed(session, url, etag)
                assert status == 200 and new_tag != etag
                etag = new_tag
                moved.append(took)
            print(line("after a change (rebuild)", moved, moved_size))
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--gangs", type=int, default=300)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(run(args.nodes, args.gangs, args.requests))


if __name__ == "__main__":
    main()

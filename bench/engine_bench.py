"""The placement engine at cluster scale: plans per second and latency per call.

    python bench/engine_bench.py [--hosts 1000 5000 10000] [--calls 400] [--seed 1] [--churn]

For each size, builds a 2-tier fabric (16 hosts of 8 GPUs per leaf, 16 leaves per spine,
leaves 2:1 oversubscribed) with 1% of hosts and 2% of leaves degraded, fills about 60% of the
GPUs with gangs placed by the engine itself (their traffic recorded), then times ``place`` for
a mix of gang sizes against that state (nothing committed, so every call sees the same state).
The snapshot of the fabric (``placement.snapshot``: the engine's tree) is built once by the
bench's placement session, as the extender's is; it is timed apart.

``--churn`` runs the calls the way the extender makes them: every host name passed as the
candidates (a new list each call), and the state moving between calls: each plan is reserved
and the oldest gangs released to stay near 60% used, so no two calls see the same free GPUs.
The timed calls run with the setup frozen out of the cyclic GC (``gc.freeze``), as a
long-lived extender should: a full collection over a 10k-host snapshot is a pause of its own.

Latency is reported twice: wall time, and CPU time of the calling thread, which stays honest on
a machine shared with other work (wall time there also counts the time other processes ran).
"""

from __future__ import annotations

import argparse
import collections
import gc
import random
import time

from benchstats import percentile
from fabricsched import ids
from fabricsched.placement import capacity, request, session
from fabricsched.topology import fabric

HOSTS_PER_LEAF = 16
LEAVES_PER_SPINE = 16
GPUS = 8
MIX: tuple[tuple[int, int, int], ...] = (
    # (pods, gpus per pod, weight)
    (1, 8, 2), (2, 4, 1), (16, 8, 3), (32, 8, 3), (64, 8, 2), (128, 8, 1),
)


def _health(rng: random.Random, degraded: float) -> tuple[float, fabric.HealthState]:
    if rng.random() < degraded:
        return 0.5, fabric.HealthState.DEGRADED
    return 1.0, fabric.HealthState.HEALTHY


def build_fabric(hosts: int, rng: random.Random) -> fabric.Fabric:
    tiers = (fabric.Tier(ids.TierName("leaf"), "tier-0", 2.0), fabric.Tier(ids.TierName("spine"), "tier-1"))
    leaves = -(-hosts // HOSTS_PER_LEAF)
    records: dict[ids.NodeName, fabric.Host] = {}
    domains: dict[fabric.DomainKey, fabric.Domain] = {}
    for s in range(-(-leaves // LEAVES_PER_SPINE)):
        spine = ids.DomainName(f"s{s:03d}")
        children: list[ids.DomainName] = []
        below: list[ids.NodeName] = []
        for leaf_i in range(s * LEAVES_PER_SPINE, min(leaves, (s + 1) * LEAVES_PER_SPINE)):
            leaf = ids.DomainName(f"l{leaf_i:04d}")
            names = [ids.NodeName(f"gpu-{i:05d}")
                     for i in range(leaf_i * HOSTS_PER_LEAF, min(hosts, (leaf_i + 1) * HOSTS_PER_LEAF))]
            for name in names:
                health, state = _health(rng, 0.01)
                records[name] = fabric.Host(name, GPUS, (leaf, spine), health, state)
            health, state = _health(rng, 0.02)
            domains[(0, leaf)] = fabric.Domain(0, leaf, spine, tuple(names), (), GPUS * len(names),
                                               health, state)
            children.append(leaf)
            below.extend(names)
        domains[(1, spine)] = fabric.Domain(1, spine, None, tuple(below), tuple(children), GPUS * len(below))
    return fabric.Fabric(tiers, records, domains)


def draw(rng: random.Random, i: int) -> request.GangRequest:
    pods, gpus, _ = rng.choices(MIX, weights=[w for *_, w in MIX])[0]
    return request.GangRequest(ids.GangKey(f"bench/g{i}"), pods, gpus)


Running = collections.deque[tuple[tuple[ids.NodeName, ...], int]]


def fill(
    planner: session.Session, fab: fabric.Fabric, rng: random.Random, target: float,
    running: Running | None = None,
) -> tuple[dict[ids.NodeName, int], capacity.Traffic]:
    """Place gangs until ``target`` of the GPUs are used, as a busy cluster would be."""
    free = {name: host.gpus for name, host in fab.hosts.items()}
    traffic = capacity.Traffic()
    total = sum(free.values())
    i = 0
    misses = 0
    while sum(free.values()) > total * (1 - target) and misses < 50:
        gang = draw(rng, i)
        i += 1
        plan = planner.place(fab, free, gang, traffic)
        if not isinstance(plan, request.Plan):
            misses += 1
            continue
        commit(fab, free, traffic, plan.ranks, gang.gpus_per_pod, running)
    return free, traffic


def commit(
    fab: fabric.Fabric, free: dict[ids.NodeName, int], traffic: capacity.Traffic,
    ranks: tuple[ids.NodeName, ...], gpus_per_pod: int, running: Running | None,
) -> None:
    for name in ranks:
        free[name] -= gpus_per_pod
    traffic.add(fab, ranks, gpus_per_pod)
    if running is not None:
        running.append((ranks, gpus_per_pod))


def churn(
    fab: fabric.Fabric, free: dict[ids.NodeName, int], traffic: capacity.Traffic,
    result: request.Plan | request.NoFit, gpus_per_pod: int, running: Running, target: float,
) -> None:
    """Reserve the plan, then release the oldest gangs until usage is back near ``target``."""
    if isinstance(result, request.Plan):
        commit(fab, free, traffic, result.ranks, gpus_per_pod, running)
    total = GPUS * len(fab.hosts)
    while running and sum(free.values()) < total * (1 - target):
        ranks, g = running.popleft()
        for name in ranks:
            free[name] += g
        traffic.remove(fab, ranks, g)



def run(hosts: int, calls: int, seed: int, moving: bool) -> None:
    rng = random.Random(seed)
    fab = build_fabric(hosts, rng)
    planner = session.Session()
    started = time.perf_counter()
    planner.snapshot(fab)
    index_ms = (time.perf_counter() - started) * 1e3
    running: Running = collections.deque()
    free, traffic = fill(planner, fab, rng, 0.6, running)
    gangs = [draw(rng, i) for i in range(calls)]
    names = list(fab.hosts)
    # A long-lived process freezes its big, lasting objects (the snapshot) out of the cyclic
    # GC; otherwise a full collection walks all of them (~10 ms at 10k hosts) inside some call.
    gc.collect()
    gc.freeze()
    times: dict[int, list[float]] = {}
    walls: list[float] = []
    fits = 0
    elapsed = cpu = 0.0
    for gang in gangs:
        candidates = list(names) if moving else None  # the extender builds a new list per call
        t0, c0 = time.perf_counter(), time.thread_time_ns()
        result = planner.place(fab, free, gang, traffic, candidates=candidates)
        cpu_ms = (time.thread_time_ns() - c0) / 1e6
        wall_ms = (time.perf_counter() - t0) * 1e3
        times.setdefault(gang.pods, []).append(cpu_ms)
        walls.append(wall_ms)
        elapsed, cpu = elapsed + wall_ms / 1e3, cpu + cpu_ms / 1e3
        fits += isinstance(result, request.Plan)
        if moving:
            churn(fab, free, traffic, result, gang.gpus_per_pod, running, 0.6)
    gc.unfreeze()
    every = [t for ts in times.values() for t in ts]
    used = 1 - sum(free.values()) / (GPUS * hosts)
    print(f"{hosts:>6} hosts ({used:.0%} GPUs used, index {index_ms:.1f} ms, {fits}/{calls} fit): "
          f"{calls / cpu:5.0f} plans/CPU-s, CPU p50 {percentile(every, 50):.2f} ms, "
          f"p99 {percentile(every, 99):.2f} ms | wall {calls / elapsed:5.0f} plans/s, "
          f"p50 {percentile(walls, 50):.2f} ms, p99 {percentile(walls, 99):.2f} ms")
    for pods in sorted(times):
        ts = times[pods]
        print(f"         {pods:>4} pods: CPU p50 {percentile(ts, 50):.2f} ms, p99 {percentile(ts, 99):.2f} ms"
              f" ({len(ts)} calls)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--churn", action="store_true",
                        help="pass every host as candidates and change the state between calls")
    args = parser.parse_args()
    for hosts in args.hosts:
        run(hosts, args.calls, args.seed, args.churn)


if __name__ == "__main__":
    main()

"""``scale_bench.py``'s latency phase in one process: ``/filter`` per kind of pod, no control plane.

    python bench/filter_kinds_bench.py [--nodes 1000] [--requests 300] [--rounds 3]
    python bench/filter_kinds_bench.py --profile new_gang      # cProfile of that kind's calls

The cluster ``scale_bench.py`` builds, fed to the operator's real ``ClusterState``: the sample
fabric (8-GPU hosts, 16 per leaf, 16 leaves per spine), ``--pods-per-node`` running 1-GPU pods
bound to every node, then ``--requests`` gated 1-GPU single pods and as many Indexed Jobs of
``--gang`` gated 1-GPU pods. Each call is what the HTTP handler does for the kube-scheduler's
request, without the socket: the body parsed by the wire model, ``Coordinator.filter``, the
answer encoded, and ``prioritize`` (with the names passed) when more than one node passed. The
calls come in the scale bench's order: single i, the first pod of gang i (it makes the plan),
then gang i's other pods (planned members) until ``--requests`` of them were asked; no pod
binds, so the plans pile up as they do there. The process's clock moves ``--step`` seconds per
call, and the service's housekeeping runs every second of it, timed apart (``housekeeping``:
what a call arriving meanwhile waits for).

``--rounds`` builds the cluster anew each round (all rounds' calls are pooled per kind)
and prints p50/p99/mean per kind in ms, of wall time and of the calling thread's CPU time
(``cpu``: honest on a machine shared with other work). ``--profile KIND`` prints the cProfile of that kind's
calls instead (sorted by cumulative time, then by own time). ``--answers FILE`` writes every
call's answer, so two trees can be shown to decide the same.

Runs against any tree whose ``operator/`` is first on ``PYTHONPATH`` back to commit 7357da4
(before the extender's rework), so the same calls can be timed on the old code and the new.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import inspect
import json
import math
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchstats import percentile
from fabricsched.api import extender as wire
from fabricsched.cluster import samples
from fabricsched.controller import state as cluster_state

try:  # after the rework (issue 28)
    from fabricsched.extender import service
    from fabricsched.extender.http import server
except ImportError:  # pragma: no cover - 7357da4's layout
    from fabricsched.extender import server, service  # type: ignore[attr-defined,no-redef]

GPU = "nvidia.com/gpu"
GATE = "fabricsched.io/bench"
TOPOLOGY = "bench"
KINDS = ("single", "new_gang", "planned_member")
HOSTS_PER_LEAF = 16
LEAVES_PER_SPINE = 16


class NullStore:
    """The FabricPlacement store: keeps nothing (the bench times decisions, not writes)."""

    listed_version = ""

    async def load(self) -> list[dict[str, Any]]:
        return []

    async def create(self, manifest: dict[str, Any]) -> None:
        return None

    async def save(self, manifest: dict[str, Any]) -> None:
        return None

    async def delete(self, namespace: str, name: str) -> None:
        return None


class NullRecorder:
    def record(self, *args: Any) -> None:
        del args  # a sink: Events are not what is timed


class NoPods:
    """The API server's pod lookup: never reached, every pod asked about is in the state."""

    async def uid_of(self, namespace: str, name: str) -> str | None:
        raise AssertionError(f"pod {namespace}/{name} looked up: it should be in the state")


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def pod_spec(gated: bool, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "fabricsched" if gated else "default-scheduler",
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "bench:1",
                        "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}}}],
    }
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    if node is not None:
        spec["nodeName"] = node
    return spec


def fill_pod(i: int, node: str, created: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"f-{i:06d}", "namespace": "fill", "uid": f"uid-f-{i}",
                     "creationTimestamp": created},
        "spec": pod_spec(False, node),
        "status": {"phase": "Running"},
    }


def single_pod(i: int, created: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"s-{i:05d}", "namespace": "lat", "uid": f"uid-s-{i}",
                     "creationTimestamp": created},
        "spec": pod_spec(True),
        "status": {"phase": "Pending"},
    }


def job(i: int, size: int, created: str) -> dict[str, Any]:
    name = f"g-{i:04d}"
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "lat", "uid": f"job-{name}", "creationTimestamp": created},
        "spec": {"parallelism": size, "completions": size, "completionMode": "Indexed", "backoffLimit": 0,
                 "template": {"spec": pod_spec(True)}},
        "status": {"active": size},
    }


def job_pod(i: int, rank: int, created: str) -> dict[str, Any]:
    """Pod ``rank`` of Job ``i`` as the Job controller makes it."""
    name = f"g-{i:04d}"
    index = {"batch.kubernetes.io/job-completion-index": str(rank)}
    return {
        "metadata": {
            "name": f"{name}-{rank}-x{i:x}", "namespace": "lat", "uid": f"uid-{name}-{rank}",
            "creationTimestamp": created,
            "labels": {"batch.kubernetes.io/controller-uid": f"job-{name}",
                       "batch.kubernetes.io/job-name": name, "controller-uid": f"job-{name}",
                       "job-name": name, **index},
            "annotations": dict(index),
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": f"job-{name}",
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {**pod_spec(True), "hostname": f"{name}-{rank}", "subdomain": name},
        "status": {"phase": "Pending"},
    }


class Cluster:
    """The operator's state and extender as ``fabricsched run`` builds them, fed the scale
    bench's objects."""

    def __init__(self, size: int, pods_per_node: int, requests: int, gang: int) -> None:
        self.now = time.time()
        """The process's clock: moved on by the bench, each call as long as in the scale bench."""
        created = _stamp(self.now)
        spines = math.ceil(size / (HOSTS_PER_LEAF * LEAVES_PER_SPINE))
        manifests = samples.sample_fabric(spines, LEAVES_PER_SPINE, HOSTS_PER_LEAF, gpus=8)[:size]
        self.names = [m["metadata"]["name"] for m in manifests]
        self.state = cluster_state.ClusterState(self.clock)
        for manifest in manifests:
            self.state.apply_node(manifest)
        topology = samples.demo_topology(TOPOLOGY)
        topology["spec"]["links"] = []
        topology["metadata"]["generation"] = 1
        self.state.apply_topology(TOPOLOGY, topology)
        for i in range(size * pods_per_node):
            self.state.apply_pod(fill_pod(i, self.names[i % size], created))
        self.state.mark_synced()
        self.service = service.Service(
            self.state, NullStore(), None, NullRecorder(), self.clock, service.ServiceOptions(), pods=NoPods()
        )
        self.coordinator = self.service.coordinator
        self.state.subscribe(self.coordinator.on_change)
        self.singles = [single_pod(i, created) for i in range(requests)]
        self.gangs: list[list[dict[str, Any]]] = []
        for i in range(requests):
            self.state.apply_job(job(i, gang, created))
            self.gangs.append([job_pod(i, r, created) for r in range(gang)])
        for manifest in [*self.singles, *(p for g in self.gangs for p in g)]:
            self.state.apply_pod(manifest)

    def clock(self) -> float:
        return self.now

    async def start(self) -> None:
        restore = self.coordinator.restore
        done = restore([]) if inspect.signature(restore).parameters else restore()
        if inspect.isawaitable(done):
            await done

    def calls(self, requests: int) -> list[tuple[str, dict[str, Any]]]:
        """The scale bench's order of calls."""
        order: list[tuple[str, dict[str, Any]]] = []
        members = 0
        for single, gang in zip(self.singles, self.gangs, strict=True):
            order += [("single", single), ("new_gang", gang[0])]
            if members < requests:
                order += [("planned_member", p) for p in gang[1:]]
                members += len(gang) - 1
        return order

    async def call(self, body: bytes) -> list[str]:
        """What the HTTP handler does for ``/filter`` (and ``/prioritize`` when more than one
        node passed), from the request's bytes to the answer's."""
        args = wire.ExtenderArgs.model_validate_json(body)
        answer = await self.coordinator.filter(args.pod, args.candidate_names())
        server.encode_filter(answer.passed, answer.failed, answer.unresolvable)
        if len(answer.passed) > 1:
            again = json.dumps({"Pod": args.pod, "NodeNames": answer.passed})
            more = wire.ExtenderArgs.model_validate_json(again)
            server.encode_scores(self.coordinator.prioritize(more.pod, more.candidate_names()))
        return answer.passed


async def one_round(
    args: argparse.Namespace, timed: dict[str, list[float]], profiler: cProfile.Profile | None,
    answers: list[str],
) -> dict[str, int]:
    """Every call of one fresh cluster; returns the calls per kind that did not pass one node.
    Each answer is appended to ``answers`` (pod, nodes passed)."""
    cluster = Cluster(args.nodes, args.pods_per_node, args.requests, args.gang)
    await cluster.start()
    gc.collect()
    gc.freeze()  # the setup is long-lived, as in a running process
    problems = dict.fromkeys(KINDS, 0)
    tick = cluster.now
    for kind, pod in cluster.calls(args.requests):
        cluster.now += args.step
        if cluster.now - tick >= 1.0:  # the service's housekeeping, every second on the loop
            tick = cluster.now
            started, cpu = time.perf_counter(), time.thread_time()
            cluster.coordinator.housekeeping()
            timed["housekeeping"].append(time.perf_counter() - started)
            timed["housekeeping cpu"].append(time.thread_time() - cpu)
        body = json.dumps({"Pod": pod, "NodeNames": cluster.names}).encode()
        profiled = profiler is not None and kind == args.profile
        if profiled:
            assert profiler is not None
            profiler.enable()
        started, cpu = time.perf_counter(), time.thread_time()
        passed = await cluster.call(body)
        seconds, cpu = time.perf_counter() - started, time.thread_time() - cpu
        if profiled:
            assert profiler is not None
            profiler.disable()
        timed[kind].append(seconds)
        answers.append(f"{pod['metadata']['name']} {' '.join(passed[:3])}{' ...' if len(passed) > 3 else ''}")
        timed[f"{kind} cpu"].append(cpu)
        if len(passed) != 1:
            problems[kind] += 1
    gc.unfreeze()
    return problems


async def run(args: argparse.Namespace) -> None:
    kinds = (*KINDS, "housekeeping")
    timed: dict[str, list[float]] = {k: [] for kind in kinds for k in (kind, f"{kind} cpu")}
    profiler = cProfile.Profile() if args.profile else None
    answers: list[str] = []
    for _ in range(args.rounds):
        problems = await one_round(args, timed, profiler, answers)
        if any(problems.values()):
            print(f"  answers without exactly one node: {problems}")
    if args.answers:
        with open(args.answers, "w") as out:
            out.write("\n".join(answers) + "\n")
    if profiler is not None:
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(args.lines)
        stats.sort_stats("tottime").print_stats(args.lines)
        return
    ms: Callable[[list[float], float], float] = lambda v, q: percentile(v, q) * 1000  # noqa: E731
    print(f"{args.nodes} nodes, {args.pods_per_node} fill pods per node, gangs of {args.gang}, "
          f"{args.rounds} round(s):")
    for kind in timed:
        values = timed[kind]
        print(f"  {kind:<19} n {len(values):4d}  p50 {ms(values, 50):7.2f} ms  p99 {ms(values, 99):7.2f} ms  "
              f"mean {statistics.mean(values) * 1000:7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods-per-node", type=int, default=5,
                        help="running 1-GPU pods per node (default 5)")
    parser.add_argument("--requests", type=int, default=300, help="single pods, and gangs (default 300)")
    parser.add_argument("--gang", type=int, default=4, help="pods per gang (default 4)")
    parser.add_argument("--step", type=float, default=0.06,
                        help="seconds the clock moves per call (default 0.06: the scale bench's pace, "
                        "both servers)")
    parser.add_argument("--rounds", type=int, default=1, help="fresh clusters, calls pooled (default 1)")
    parser.add_argument("--profile", choices=KINDS, help="print a cProfile of this kind's calls instead")
    parser.add_argument("--answers", help="write each call's pod and answer to this file (to compare trees)")
    parser.add_argument("--lines", type=int, default=40, help="lines of each profile listing (default 40)")
    args = parser.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()

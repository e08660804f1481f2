"""The preemption sweep's decision in process, at scale: no control plane, no API server.

    python bench/preempt_decision_bench.py [--nodes 5120] [--rounds 10] [--profile 25]

Builds what the sweep reads the way the extender's unit tests do (tests/unit/extender/
extender_harness.py: the real ``ClusterState``, book, coordinator and owner cache, the API
calls played in memory): the sample fabric (8-GPU hosts, 16 per leaf, 16 leaves per spine),
``--pods-per-node`` 1-GPU fill pods bound on every host (lone pods, priority 0) and, as
bench/scale_preempt.py does, one low-priority gang per leaf (priority -100, one pod of the
hosts' remaining GPUs on each host). Then, ``--rounds`` times, a high-priority Indexed Job of
``--gang`` pods of those GPUs, ``required-tier: leaf``, is created and one sweep runs: it fits
nowhere, so one low gang is evicted. Measured: ``GangPreemption.decided_s`` (what the extender
logs as "decided in N ms": from the fit check to the choice) and the whole sweep. After each
round the gang is deleted and its victim put back, so every round sees a full fabric.

``--profile N`` runs one more round under cProfile and prints its top N entries (cumulative).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import datetime
import gc
import math
import os
import pstats
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "unit" / "extender")]

from extender_harness import Harness, PlayedEvictions  # noqa: E402

from benchstats import percentile  # noqa: E402
from builders import PodBuilder, make_pod  # noqa: E402
from fabricsched.cluster import samples  # noqa: E402
from fabricsched.extender.decide import preempting, preemption_options  # noqa: E402

HOSTS_PER_LEAF = 16
LEAVES_PER_SPINE = 16
LOW, HIGH = -100, 1000


class Pod:
    """A running pod's builder and its ``status.startTime`` (None: none, as the builder makes it)."""

    def __init__(self, builder: PodBuilder, started_s: float | None) -> None:
        self.builder, self.started_s = builder, started_s

    def build(self, terminating: bool = False) -> dict[str, object]:
        made = (copy.deepcopy(self.builder).terminating() if terminating else self.builder).build()
        if self.started_s is not None:
            stamp = datetime.datetime.fromtimestamp(self.started_s, datetime.UTC)
            made["status"]["startTime"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        return made


def build(node_count: int, per_node: int, start_times: bool) -> tuple[Harness, dict[str, Pod]]:
    """The harness on a full fabric, and the low gangs' pods by name. With ``start_times``, the
    fill pods started an hour ago and the low pods 100 a second after them, as a parallel
    creation starts them (gangs next to each other may start in the same second)."""
    spines = math.ceil(node_count / (HOSTS_PER_LEAF * LEAVES_PER_SPINE))
    manifests = samples.sample_fabric(spines, LEAVES_PER_SPINE, HOSTS_PER_LEAF, gpus=8)[:node_count]
    spec = samples.demo_topology("scale")["spec"]
    spec["links"] = []
    h = Harness(manifests, spec=spec)
    h.restore()
    leaves: dict[str, list[str]] = {}
    for m in manifests:
        leaves.setdefault(m["metadata"]["labels"][samples.TOPOGRAPH.leaf], []).append(m["metadata"]["name"])
    began = h.clock() - 3600.0
    for m in manifests:
        node = m["metadata"]["name"]
        for i in range(per_node):
            fill = Pod(make_pod(f"fill-{node}-{i}", "fill").gpus(1).on(node), began if start_times else None)
            h.state.apply_pod(fill.build())
    low: dict[str, Pod] = {}
    for leaf, hosts in sorted(leaves.items()):
        for rank, node in enumerate(hosts):
            builder = (make_pod(f"low-{leaf}-{rank}", "low").gang(f"low-{leaf}", len(hosts))
                       .annotate("fabricsched.io/rank", str(rank)).gpus(8 - per_node).priority(LOW)
                       .scheduler("fabricsched").on(node))
            pod = Pod(builder, began + 600.0 + len(low) // 100 if start_times else None)
            h.state.apply_pod(pod.build())
            low[f"low-{leaf}-{rank}"] = pod
    return h, low


def one_round(h: Harness, calls: PlayedEvictions, low: Mapping[str, Pod],
              preempter: preempting.GangPreemption, turn: int, gang: int, gpus: int) -> tuple[float, float]:
    """(decided_s, the whole sweep's CPU seconds) for a new high gang; the fabric is full again
    afterwards. The sweep's CPU time stays honest on a machine shared with other work."""
    name = f"h-{turn:03d}"
    uid = h.job(name, gang, namespace="high", create_pods=False)
    pods = [h.pod(name, uid, rank, gpus=gpus, namespace="high").priority(HIGH)
            .annotate("fabricsched.io/required-tier", "leaf") for rank in range(gang)]
    for pod in pods:
        h.state.apply_pod(pod.build())
    calls.evicted.clear()
    preempter.decided_s = -1.0
    h.clock.advance(61.0)  # past the rate limit of the rounds before
    started = time.thread_time()
    h.run(preempter.sweep())
    swept = time.thread_time() - started
    if preempter.decided_s < 0 or not calls.evicted:
        raise RuntimeError(f"round {turn}: no preemption ({calls.evicted})")
    for entry in list(h.book.entries()):
        h.coordinator.follower.release(entry.key, "bench round over")
    for pod in pods:
        built = pod.build()["metadata"]
        h.state.delete_pod(built["namespace"], built["name"])
    for victim in calls.evicted:
        h.state.apply_pod(low[victim].build())  # running again, as before the round
    h.run(h.writer.flush(1.0))
    return preempter.decided_s, swept


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5120)
    parser.add_argument("--pods-per-node", type=int, default=5)
    parser.add_argument("--gang", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="profile one more round, top N")
    parser.add_argument("--no-start-times", action="store_true",
                        help="pods without status.startTime: every low gang costs the same (all tie)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    h, low = build(args.nodes, args.pods_per_node, not args.no_start_times)
    calls = PlayedEvictions(lambda name: h.state.apply_pod(low[name].build(terminating=True)))
    c = h.coordinator
    preempter = preempting.GangPreemption(
        h.state, h.book, c.follower, h.writer, c.events, c.owners, c.pending, c.workloads, calls,
        c._session, h.clock, preemption_options.PreemptionOptions(),
    )
    gc.freeze()  # the setup is long-lived state, as in the extender
    print(f"{args.nodes} nodes, {len(h.state.pods)} pods, {len(low) // HOSTS_PER_LEAF} low gangs "
          f"(built in {time.perf_counter() - started:.1f} s); load average {os.getloadavg()[0]:.2f}")
    gpus = 8 - args.pods_per_node
    one_round(h, calls, low, preempter, 999, args.gang, gpus)  # warm: the engine's snapshot, caches
    decided, swept = [], []
    for turn in range(args.rounds):
        d, s = one_round(h, calls, low, preempter, turn, args.gang, gpus)
        decided.append(d * 1000)
        swept.append(s * 1000)
    for what, values in (("decision", decided), ("sweep CPU", swept)):
        print(f"{what:>9} ms: p50 {percentile(values, 50):.1f}  p99 {percentile(values, 99):.1f}  "
              f"min {min(values):.1f}  max {max(values):.1f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        one_round(h, calls, low, preempter, 1000, args.gang, gpus)
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The capacity model beside published measurements: each placement rebuilt on a fabric of the
simulator's kind, priced by the engine's own model for both traffic patterns (docs/model.md).

Every fabric is a ``sim.fabrics`` layout built exactly as ``fabricsched simulate`` builds one
(Node manifests and a FabricTopology through ``topology.building``); whole-gang plans come from
the engine (``placement.session``), the other placements are written out rank by rank as the
source describes them. The published sources do not give every number the model needs (the
oversubscription, what else ran), so each row states what it assumes; docs/model.md discusses
where the model agrees and where it does not. Usage, from the repository root:

    python bench/model_check.py            # the Markdown table for docs/model.md
"""

from __future__ import annotations

import dataclasses
import functools
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.placement import capacity, request, session
from fabricsched.sim import fabrics
from fabricsched.topology import building, fabric, nodes

A2A, RING = capacity.ALL_TO_ALL, capacity.RING
Ranks = list[ids.NodeName]


@functools.cache
def build(layout: fabrics.FabricLayout) -> fabric.Fabric:
    """The fabric ``fabricsched simulate`` would build from the layout's manifests."""
    spec = api.FabricTopologySpec.model_validate(fabrics.topology(layout, "check")["spec"])
    infos = [nodes.NodeInfo.from_manifest(m) for m in fabrics.node_list(layout)["items"]]
    return building.build_fabric(spec, infos, {}).fabric


def hosts_in(fab: fabric.Fabric, tier: str, domain: str) -> Ranks:
    """The hosts below one domain, in fabric order."""
    return list(fab.domains[(fab.tier_index(tier), ids.DomainName(domain))].hosts)


def ordered(ranks: Sequence[ids.NodeName], seed: int | None, salt: int = 0) -> Ranks:
    """The ranks in fabric order (``seed`` None), or in a first-fit order: numbered as hosts
    come, not as the fabric groups them (a shuffle; ``salt`` tells gangs apart)."""
    out = list(ranks)
    if seed is not None:
        random.Random(f"{seed}/{salt}").shuffle(out)
    return out


def engine_plan(fab: fabric.Fabric, pods: int, gpus: int) -> Ranks:
    """The engine's plan for a whole gang in the empty fabric (its rank order is the fabric's)."""
    free = {n: h.gpus for n, h in fab.hosts.items()}
    plan = session.Session().place(fab, free, request.GangRequest(ids.GangKey("check"), pods, gpus))
    assert isinstance(plan, request.Plan), plan
    return list(plan.ranks)


@dataclass(frozen=True)
class Gang:
    ranks: Ranks
    """Node of every rank, rank 0 first (8-GPU pods: one pod per host)."""
    pattern: capacity.Pattern


def slowdown(fab: fabric.Fabric, gang: Gang, others: Sequence[Gang] = (), gpus: int = 8) -> float:
    """comm_slowdown of ``gang`` with ``others`` running (each priced with its own pattern)."""
    running = capacity.Traffic()
    for other in others:
        running.add(fab, other.ranks, gpus, other.pattern)
    return capacity.comm_slowdown(fab, gang.ranks, gpus, running, pattern=gang.pattern)


@dataclass(frozen=True)
class Case:
    source: str
    published: str
    ratio: float
    """The published figure as a ratio to the ideal (step time, or bandwidth inverted)."""
    placement: str
    """The placement rebuilt, with what the row assumes that the source does not say."""
    figures: Callable[[capacity.Pattern, int | None], float]
    """(pattern, seed of a first-fit rank order or None: fabric order) -> the comm_slowdown."""

    def first_fit(self, pattern: capacity.Pattern, draws: int = 200) -> float:
        """The mean comm_slowdown over ``draws`` first-fit rank orders."""
        return statistics.fmean(self.figures(pattern, seed) for seed in range(draws))


def share_to_match(ratio: float, slowdown: float) -> str:
    """The communication share of the ideal step for which step = (1 - f) + f x slowdown
    equals the published ratio: "-" when both are 1, "none" when the model sees no slowdown."""
    if slowdown <= 1.0 + 1e-9:
        return "-" if ratio <= 1.0 + 0.02 else "none"
    share = (ratio - 1) / (slowdown - 1)
    return f"{share:.2f}" if share <= 1 else f"none ({share:.2f} > 1)"


# --- the placements ------------------------------------------------------------------------

FLUIDSTACK = fabrics.FabricLayout(
    (fabrics.TierShape("spine", 1), fabrics.TierShape("pod", 4, 4.0), fabrics.TierShape("rack", 8)),
    hosts_per_leaf=4)
"""4 pods of 8 racks of 4 hosts x 8 GPUs (a pod is 256 GPUs), pods 4:1 to the spine."""


def fluidstack(kind: str) -> Callable[[capacity.Pattern, int | None], float]:
    """256 GPUs (32 hosts): in one pod; first-fit (24 hosts of one pod's holes, 8 of the next);
    split 16 + 16 over two pods. Beside it a second job placed the same way, mirrored, shares
    the two pods' uplinks (the fleet is busy)."""
    fab = build(FLUIDSTACK)
    p0, p1 = hosts_in(fab, "pod", "p00"), hosts_in(fab, "pod", "p01")

    def figure(pattern: capacity.Pattern, seed: int | None) -> float:
        if kind == "together":
            return slowdown(fab, Gang(engine_plan(fab, 32, 8), pattern))
        first = 24 if kind == "first-fit" else 16
        ours = p0[:first] + p1[:32 - first]
        theirs = p0[first:] + p1[32 - first:]
        return slowdown(fab, Gang(ordered(ours, seed), pattern), [Gang(ordered(theirs, seed, 1), pattern)])
    return figure


TOR = fabrics.FabricLayout((fabrics.TierShape("spine", 1), fabrics.TierShape("leaf", 8, 2.0)),
                           hosts_per_leaf=16)
"""Racks of 16 hosts x 8 GPUs behind a 2:1 ToR, one spine layer."""


def nccl_tests(kind: str) -> Callable[[capacity.Pattern, int | None], float]:
    """all_reduce_perf on two hosts: under one ToR, across two, or with one host's link slow
    (degraded at the FabricTopology's default capacity, 0.5)."""
    fab = build(TOR)
    l0, l1 = hosts_in(fab, "leaf", "l00"), hosts_in(fab, "leaf", "l01")
    if kind == "slow host":
        slow = l0[1]
        hosts = dict(fab.hosts)
        hosts[slow] = dataclasses.replace(hosts[slow], health=0.5, state=fabric.HealthState.DEGRADED)
        fab = dataclasses.replace(fab, hosts=hosts)
    pair = {"one ToR": [l0[0], l0[1]], "across ToRs": [l0[0], l1[0]], "slow host": [l0[0], l0[1]]}[kind]

    def figure(pattern: capacity.Pattern, seed: int | None) -> float:
        return slowdown(fab, Gang(pair, pattern))
    return figure


RAIL_ONLY = fabrics.FabricLayout((fabrics.TierShape("rail-group", 1),), hosts_per_leaf=128)
"""Rail-only: 128 hosts x 8 GPUs whose same-index GPUs share one rail switch each; no spine,
so the fabric is one domain (cross-rail traffic goes over NVLink inside the host first)."""


def rail_only(_: str) -> Callable[[capacity.Pattern, int | None], float]:
    fab = build(RAIL_ONLY)

    def figure(pattern: capacity.Pattern, seed: int | None) -> float:
        ranks = engine_plan(fab, 64, 8)
        return slowdown(fab, Gang(ordered(ranks, seed), pattern))
    return figure


META = fabrics.FabricLayout(
    (fabrics.TierShape("ats", 1), fabrics.TierShape("zone", 4, 7.0), fabrics.TierShape("rack", 24)),
    hosts_per_leaf=16)
"""AI zones of 24 racks x 16 hosts x 8 GPUs (3072 GPUs, non-blocking inside), 7:1 across zones."""


def meta(kind: str) -> Callable[[capacity.Pattern, int | None], float]:
    """A 1024-GPU job (128 hosts) in one zone, or fragmented over the 4 zones (32 hosts in
    each) beside 2 more jobs fragmented the same way."""
    fab = build(META)
    zones = [hosts_in(fab, "zone", f"z{z:02d}") for z in range(4)]

    def fragmented(j: int) -> Ranks:
        return [h for zone in zones for h in zone[32 * j:32 * (j + 1)]]

    def figure(pattern: capacity.Pattern, seed: int | None) -> float:
        if kind == "together":
            return slowdown(fab, Gang(engine_plan(fab, 128, 8), pattern))
        others = [Gang(ordered(fragmented(j), seed, j), pattern) for j in (1, 2)]
        return slowdown(fab, Gang(ordered(fragmented(0), seed), pattern), others)
    return figure


CRUX = fabrics.FabricLayout((fabrics.TierShape("spine", 1), fabrics.TierShape("leaf", 4, 2.0)),
                            hosts_per_leaf=16)


def crux(kind: str) -> Callable[[capacity.Pattern, int | None], float]:
    """A 128-GPU GPT job (16 hosts) over two leaves, 8 + 8, alone or beside a second job placed
    the same way on the same two leaves (sharing their uplinks)."""
    fab = build(CRUX)
    l0, l1 = hosts_in(fab, "leaf", "l00"), hosts_in(fab, "leaf", "l01")
    ours, theirs = l0[:8] + l1[:8], l0[8:] + l1[8:]

    def figure(pattern: capacity.Pattern, seed: int | None) -> float:
        others = [Gang(ordered(theirs, seed, 1), pattern)] if kind == "shared" else []
        return slowdown(fab, Gang(ordered(ours, seed), pattern), others)
    return figure


CASES = (
    Case("Fluidstack, 256 GPUs", "together 412 ms", 1.0,
         "one pod (the engine's plan); pods of 256 GPUs, 4:1 to the spine", fluidstack("together")),
    Case("Fluidstack, 256 GPUs", "first-fit 631 ms", 631 / 412,
         "24 hosts in one pod's holes, 8 in the next; a second job mirrored beside it",
         fluidstack("first-fit")),
    Case("Fluidstack, 256 GPUs", "split pods 905 ms", 905 / 412,
         "16 + 16 hosts over two pods; a second job split the same way", fluidstack("split")),
    Case("nccl-tests #106", "one ToR 88.36 GB/s", 1.0, "2 hosts x 8 GPUs under one 2:1 ToR",
         nccl_tests("one ToR")),
    Case("nccl-tests #106", "across ToRs 86.81 GB/s", 88.36 / 86.81, "2 hosts under two ToRs",
         nccl_tests("across ToRs")),
    Case("nccl-tests #106", "one slow host 49.3 GB/s", 88.36 / 49.3,
         "one host's link degraded at the default capacity 0.5", nccl_tests("slow host")),
    Case("rail-only, arXiv 2307.12169", "dense LLM: same speed", 1.0,
         "512 GPUs, rail switches only (one domain, no spine)", rail_only("dense")),
    Case("rail-only, arXiv 2307.12169", "MoE: 8-11 % slower", 1.095, "the same, expert-parallel all-to-all",
         rail_only("moe")),
    Case("Meta, SIGCOMM 2024", "one AI zone", 1.0, "1024 GPUs in one zone (the engine's plan)",
         meta("together")),
    Case("Meta, SIGCOMM 2024", "fragmented: up to > 30 %", 1.30,
         "256 GPUs in each of 4 zones, 7:1 across zones; 2 more jobs fragmented alike", meta("fragmented")),
    Case("Alibaba Crux, SIGCOMM 2024", "GPT alone", 1.0, "128 GPUs over two 2:1 leaves, 8 + 8 hosts",
         crux("alone")),
    Case("Alibaba Crux, SIGCOMM 2024", "sharing links: 11 % slower", 1.11,
         "the same, a second job on the same two leaves", crux("shared")),
)


def main() -> None:
    print("| source | published | ratio | placement rebuilt (and what it assumes) | commSlowdown: all-to-all "
          "/ ring / ring in first-fit order | communication share that matches: all-to-all / ring in "
          "first-fit order |")
    print("|---|---|---|---|---|---|")
    for case in CASES:
        a2a, ring, shuffled = case.figures(A2A, None), case.figures(RING, None), case.first_fit(RING)
        print(f"| {case.source} | {case.published} | {case.ratio:.2f} | {case.placement} "
              f"| {a2a:.2f} / {ring:.2f} / {shuffled:.2f} "
              f"| {share_to_match(case.ratio, a2a)} / {share_to_match(case.ratio, shuffled)} |")


if __name__ == "__main__":
    main()

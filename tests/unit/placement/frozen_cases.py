"""Seeded random decision sequences on medium fabrics, and the plans the engine made for them.

The engine is tuned for speed (per-snapshot caches, pruning on domain sums), and none of that
may change a plan. ``frozen_plans.json`` holds what the engine answered for every decision
below before that tuning; ``test_engine_frozen.py`` replays the same sequences and asks for
the same answers. Each sequence runs on one snapshot like the simulator and the extender do:
gangs are committed and released, other hosts' free GPUs change, health changes give a new
snapshot, so caches kept across decisions are exercised too.

Regenerate only for an intended change of plans, and say why in the change:

    .venv/bin/python tests/unit/placement/frozen_cases.py
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placement_builders import FabricBuilder

from fabricsched import ids
from fabricsched.placement import capacity, placing, request, snapshot
from fabricsched.topology import fabric

FIXTURE = Path(__file__).with_name("frozen_plans.json")
SEQUENCES = 20
DECISIONS = 30
PODS = (1, 1, 1, 2, 2, 3, 4, 5, 6, 8, 12, 16, 20, 24, 32, 48, 64, 100)
GPUS_PER_POD = (1, 2, 4, 8, 8, 8)


@dataclass(frozen=True)
class Decision:
    label: str
    fab: fabric.Fabric
    free: dict[ids.NodeName, int]
    gang: request.GangRequest
    traffic: capacity.Traffic | None
    options: request.PlacementOptions
    candidates: list[ids.NodeName] | None


def _fabric(rng: random.Random, seq: int) -> fabric.Fabric:
    """Tier-less, leaf-only, leaf-spine or three tiers; 1..16 hosts per leaf; some health trouble."""
    levels = seq % 4
    names = [("leaf", 2.0), ("spine", 1.5), ("core", 1.0)][:levels]
    builder = FabricBuilder(tiers=names)
    if levels == 0:
        for i in range(rng.randint(3, 30)):
            builder.host(f"h{i:02d}", rng.choice((4, 8)))
    else:
        leaves = rng.randint(3, 40)
        spine_every, core_every = rng.randint(2, 8), rng.randint(1, 4)
        spines = 0
        for i in range(leaves):
            if levels >= 2 and i % spine_every == 0:
                if levels >= 3 and spines % core_every == 0:
                    builder.core(f"c{spines // core_every:02d}")
                builder.spine(f"s{spines:02d}")
                spines += 1
            gpus = rng.choice((4, 8, 8, 8))
            builder.leaf(f"l{i:02d}", hosts=rng.randint(1, 16), gpus=gpus)
            if rng.random() < 0.2:
                builder.host(f"l{i:02d}-odd", rng.choice((2, 16)))
    _trouble(rng, builder)
    return builder.build()


def _trouble(rng: random.Random, builder: FabricBuilder) -> None:
    host_rate, domain_rate = rng.choice((0.0, 0.02, 0.1, 0.3)), rng.choice((0.0, 0.05, 0.2, 0.4))
    for name in sorted(builder._hosts):
        if rng.random() < host_rate:
            if rng.random() < 0.2:
                builder.down_host(name)
            else:
                builder.degrade_host(name, rng.choice((0.25, 0.5, 0.9)))
    for tier, name in sorted(builder._parents):
        if rng.random() < domain_rate:
            tier_name = builder.tiers[tier][0]
            if rng.random() < 0.15:
                builder.down(tier_name, name)
            else:
                builder.degrade(tier_name, name, rng.choice((0.25, 0.5, 0.9)))


def _rehealth(rng: random.Random, fab: fabric.Fabric) -> fabric.Fabric:
    """A new snapshot: a few hosts and domains change health (better or worse)."""
    states = ((1.0, fabric.HealthState.HEALTHY), (0.5, fabric.HealthState.DEGRADED),
              (0.0, fabric.HealthState.DOWN))
    hosts = dict(fab.hosts)
    for name in rng.sample(sorted(hosts), min(len(hosts), 3)):
        health, state = rng.choice(states)
        hosts[name] = dataclasses.replace(hosts[name], health=health, state=state)
    domains = dict(fab.domains)
    for key in rng.sample(sorted(domains), min(len(domains), 2)):
        health, state = rng.choice(states)
        domains[key] = dataclasses.replace(domains[key], uplink_health=health, state=state)
    return fabric.Fabric(fab.tiers, hosts, domains, fab.gpu_bandwidth_gbps, fab.rails)


def _gang(rng: random.Random, fab: fabric.Fabric, i: int) -> request.GangRequest:
    tier: int | None = None
    required = False
    if fab.tiers and rng.random() < 0.3:
        tier = rng.randrange(len(fab.tiers))
        required = rng.random() < 0.5
    return request.GangRequest(ids.GangKey(f"frozen/g{i}"), rng.choice(PODS), rng.choice(GPUS_PER_POD),
                               tier, required)


def decisions() -> Generator[Decision, request.Plan | request.NoFit, None]:
    """Every decision, in order; send each one's answer back (``generator.send``) so the
    sequence commits it. The answers steer later decisions, as in a real cluster."""
    for seq in range(SEQUENCES):
        rng = random.Random(1000 + seq)
        fab = _fabric(rng, seq)
        free = {n: h.gpus - rng.choice((0, 0, 0, h.gpus // 2, h.gpus)) for n, h in sorted(fab.hosts.items())}
        traffic = capacity.Traffic()
        running: list[tuple[tuple[ids.NodeName, ...], int]] = []
        for step in range(DECISIONS):
            roll = rng.random()
            if roll < 0.08:
                fab = _rehealth(rng, fab)
            elif roll < 0.25:
                for name in rng.sample(sorted(free), min(len(free), 4)):
                    free[name] = rng.randint(-1, fab.hosts[name].gpus)  # -1: over-reserved
            if running and rng.random() < 0.2:
                ranks, g = running.pop(rng.randrange(len(running)))
                for name in ranks:
                    free[name] = min(free[name] + g, fab.hosts[name].gpus)
                traffic.remove(fab, ranks, g)
            gang = _gang(rng, fab, step)
            pick = rng.random()
            candidates: list[ids.NodeName] | None = None
            if pick < 0.15:
                candidates = sorted(fab.hosts)
            elif pick < 0.5:
                candidates = sorted(rng.sample(sorted(fab.hosts), max(1, len(fab.hosts) * 2 // 3)))
            options = request.PlacementOptions(health_aware=rng.random() < 0.8)
            shown = free  # the same map, changed in place between decisions, as callers may do
            if rng.random() < 0.1:
                shown = dict(free)
                shown.pop(rng.choice(sorted(shown)))  # a host missing from the free map has none
            decision = Decision(f"sequence {seq} decision {step}", fab, shown, gang,
                                traffic if rng.random() < 0.9 else None, options, candidates)
            result = yield decision
            if isinstance(result, request.Plan) and rng.random() < 0.75:
                for name in result.ranks:
                    free[name] -= gang.gpus_per_pod
                traffic.add(fab, result.ranks, gang.gpus_per_pod)
                running.append((result.ranks, gang.gpus_per_pod))


def run(d: Decision, snapshots: snapshot.Cache | None = None) -> request.Plan | request.NoFit:
    """The engine's answer; with ``snapshots`` on the snapshot the cache keeps for ``d.fab`` (what
    earlier decisions on it left carries over), else on a fresh snapshot."""
    snap = snapshots.of(d.fab) if snapshots is not None else snapshot.build(d.fab)
    return placing.place(snap, d.free, d.gang, d.traffic, d.options, d.candidates)


def encode(result: request.Plan | request.NoFit) -> dict[str, Any]:
    """Compact and exact: ranks run-length encoded, floats as their repr."""
    if isinstance(result, request.NoFit):
        return {"nofit": result.reason, "unresolvable": result.unresolvable}
    runs: list[list[Any]] = []
    for name in result.ranks:
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    domains = {str(t): list(v) for t, v in result.domains.items()}
    return {"ranks": runs, "tier": result.tier, "domains": domains,
            "comm_slowdown": repr(result.comm_slowdown), "degraded_path": result.degraded_path,
            "reasons": list(result.reasons)}


def replay() -> Iterator[tuple[str, dict[str, Any]]]:
    """Run every decision through the engine: (label, encoded answer)."""
    steps = decisions()
    try:
        decision = next(steps)
        while True:
            answer = run(decision)
            yield decision.label, encode(answer)
            decision = steps.send(answer)
    except StopIteration:
        return


def main() -> None:
    frozen = dict(replay())
    FIXTURE.write_text(json.dumps(frozen, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"wrote {len(frozen)} decisions to {FIXTURE}", file=sys.stderr)


if __name__ == "__main__":
    main()

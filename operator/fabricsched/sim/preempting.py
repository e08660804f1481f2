"""Preemption in the simulator: which running jobs a job that cannot start evicts, per policy.

Asked only for a job that does not fit at all, and only for running jobs of lower priority.
Each answer is the victims (job indices) and where the preemptor's pods go once they are gone;
the simulation evicts them (each loses its work since its last checkpoint and goes back to the
queue) and starts the preemptor there.

* ``fabric``: the engine's own choice, ``placement.preemption.choose`` (health-aware): the
  domain of the gang's tier whose clearing costs least (lowest victim priority, fewest GPUs,
  fewest workloads, least progress), then the usual placement preferences.
* ``tas-bestfit``: as a topology-aware queue preempts (Kueue's TAS, health-blind): the domain
  is where the best fit would place the gang if every lower-priority GPU were free; victims
  in it lowest priority first, newest first, until the gang fits there.
* ``default``: the kube-scheduler's DefaultPreemption, one pod at a time: a pod that fits no
  node evicts, on the one node where that costs least (lowest highest-victim priority, then
  the smallest sum of priorities, fewest victims, random), the fewest lowest-priority pods
  that make room. It sees pods, not gangs: a victim pod's whole gang fails with it. Generous
  to it: nothing is evicted unless every pod of the preemptor then has a node.
* ``random``: never preempts.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from fabricsched import ids
from fabricsched.placement import capacity, placing, preemption, request, session, victims
from fabricsched.sim import policies, records
from fabricsched.topology import fabric

Ranks = tuple[ids.NodeName, ...]


@dataclass(frozen=True)
class Victim:
    """A running job as preemption sees it."""

    index: int
    priority: int
    ranks: Ranks
    gpus_per_pod: int
    start_s: float
    pattern: capacity.Pattern = capacity.ALL_TO_ALL

    def workload(self) -> preemption.RunningWorkload:
        return preemption.RunningWorkload(ids.GangKey(str(self.index)), self.priority,
                                   tuple((h, self.gpus_per_pod) for h in self.ranks), self.start_s,
                                   gang=len(self.ranks) > 1, pattern=self.pattern)


@dataclass(frozen=True)
class Eviction:
    victims: tuple[int, ...]
    ranks: Ranks


class Preempter(Protocol):
    def preempt(
        self, snap: fabric.Fabric, free: Mapping[ids.NodeName, int], traffic: capacity.Traffic,
        job: records.Job, running: Sequence[Victim], now_s: float,
    ) -> Eviction | None: ...


class EnginePreempter:
    """``fabric``: ``placement.preemption.choose`` on the policy's own session."""

    def __init__(self, sess: session.Session, options: request.PlacementOptions) -> None:
        self.session = sess
        aware = request.PlacementOptions(health_aware=options.health_aware, fit_order=options.fit_order)
        self.options = preemption.Options(placement=aware)

    def preempt(
        self, snap: fabric.Fabric, free: Mapping[ids.NodeName, int], traffic: capacity.Traffic,
        job: records.Job, running: Sequence[Victim], now_s: float,
    ) -> Eviction | None:
        gang = policies.gang_request(snap, job)
        if isinstance(gang, request.NoFit):
            return None
        lower = [v.workload() for v in running if v.priority < job.rank]
        chosen = preemption.choose(self.session.snapshot(snap), free, lower,
                                   preemption.Preemptor(gang, job.rank), now_s, traffic, self.options)
        if isinstance(chosen, preemption.NoVictims):
            return None
        return Eviction(tuple(int(w.key) for w in chosen.victims), chosen.plan.ranks)


class TasPreempter:
    """``tas-bestfit``: the best-fit domain as if lower-priority work were gone, then victims
    in it lowest priority first, newest first (health-blind)."""

    def __init__(self, sess: session.Session,
                 fit_order: request.FitOrder = request.DEFAULT_FIT_ORDER) -> None:
        self.session = sess
        self.options = request.PlacementOptions(health_aware=False, fit_order=fit_order)

    def preempt(
        self, snap: fabric.Fabric, free: Mapping[ids.NodeName, int], traffic: capacity.Traffic,
        job: records.Job, running: Sequence[Victim], now_s: float,
    ) -> Eviction | None:
        gang = policies.gang_request(snap, job)
        if isinstance(gang, request.NoFit):
            return None
        lower = sorted((v for v in running if v.priority < job.rank), key=lambda v: (v.priority, -v.start_s))
        if not lower:
            return None
        state = self.session.snapshot(snap)
        ideal = placing.place(state, _give_back(snap, free, lower), gang, None, self.options)
        if not isinstance(ideal, request.Plan):
            return None
        tier = victims.tier_of(state, gang)
        if tier < len(snap.tiers):
            domain = snap.hosts[ideal.ranks[0]].path[tier]
            hosts = frozenset(n for n, h in snap.hosts.items() if h.path[tier] == domain)
        else:
            hosts = frozenset(snap.hosts)
        taken: list[Victim] = []
        for v in lower:
            if not hosts.intersection(v.ranks):
                continue
            taken.append(v)
            plan = placing.place(state, _give_back(snap, free, taken), gang, None, self.options, hosts)
            if isinstance(plan, request.Plan):
                return Eviction(tuple(t.index for t in taken), plan.ranks)
        return None


class DefaultPreempter:
    """``default``: the kube-scheduler's DefaultPreemption, pod by pod, node by node."""

    def __init__(self, policy: policies.DefaultPolicy, seed: int) -> None:
        self.policy = policy
        self.rng = random.Random(seed)

    def preempt(
        self, snap: fabric.Fabric, free: Mapping[ids.NodeName, int], traffic: capacity.Traffic,
        job: records.Job, running: Sequence[Victim], now_s: float,
    ) -> Eviction | None:
        g = job.gpus_per_pod
        hosts = self.policy.usable(snap, job.pods)
        left = {h.name: free[h.name] for h in hosts}
        on_host: dict[ids.NodeName, list[Victim]] = {}
        for v in running:
            if v.priority < job.rank:
                for name in dict.fromkeys(v.ranks):
                    on_host.setdefault(name, []).append(v)
        gone: dict[int, Victim] = {}
        ranks: list[ids.NodeName] = []
        for _ in range(job.pods):
            room = [h for h in hosts if left[h.name] >= g]
            if room:  # LeastAllocated, as the policy scores
                best = max((left[h.name] - g) * 100 // h.gpus for h in room)
                host = self.rng.choice([h for h in room if (left[h.name] - g) * 100 // h.gpus == best]).name
            else:
                found = self._node(hosts, left, on_host, gone, g)
                if found is None:
                    return None
                host, evicted = found
                for v in evicted:  # the whole job goes, on every node it holds
                    gone[v.index] = v
                    for name in v.ranks:
                        if name in left:
                            left[name] += v.gpus_per_pod
            left[host] -= g
            ranks.append(host)
        return Eviction(tuple(gone), tuple(ranks))

    def _node(
        self, hosts: Sequence[fabric.Host], left: Mapping[ids.NodeName, int],
        on_host: Mapping[ids.NodeName, list[Victim]], gone: Mapping[int, Victim], g: int,
    ) -> tuple[ids.NodeName, list[Victim]] | None:
        """The node whose fewest lowest-priority pods make room for one pod, and those pods' jobs."""
        options: list[tuple[tuple[int, int, int], ids.NodeName, list[Victim]]] = []
        for h in hosts:
            there = [v for v in on_host.get(h.name, ()) if v.index not in gone]
            held = {v.index: v.gpus_per_pod * v.ranks.count(h.name) for v in there}
            if left[h.name] + sum(held.values()) < g:
                continue
            evicted = sorted(there, key=lambda v: (v.priority, v.index))
            for v in sorted(there, key=lambda v: (-v.priority, -v.start_s, v.index)):  # reprieve
                rest = [e for e in evicted if e is not v]
                if left[h.name] + sum(held[e.index] for e in rest) >= g:
                    evicted = rest
            if evicted:
                cost = (max(v.priority for v in evicted), sum(v.priority for v in evicted), len(evicted))
                options.append((cost, h.name, evicted))
        if not options:
            return None
        least = min(o[0] for o in options)
        _, host, evicted = self.rng.choice([o for o in options if o[0] == least])
        return host, evicted


def _give_back(
    snap: fabric.Fabric, free: Mapping[ids.NodeName, int], gone: Sequence[Victim]
) -> dict[ids.NodeName, int]:
    out = dict(free)
    for v in gone:
        for name in v.ranks:
            out[name] = min(snap.hosts[name].gpus, out[name] + v.gpus_per_pod)
    return out


def make(policy: policies.Policy, seed: int) -> Preempter | None:
    """The preemption of ``policy`` (by its name); None for a policy that never preempts."""
    if isinstance(policy, policies.EnginePolicy):
        if policy.name == "fabric":
            return EnginePreempter(policy.session, policy.options)
        if policy.name == "tas-bestfit":
            return TasPreempter(policy.session, policy.options.fit_order)
    if isinstance(policy, policies.DefaultPolicy):
        return DefaultPreempter(policy, seed)
    return None

"""Placement policies the simulator compares: the fabric engine, and the baselines it must beat.

``fabric`` and ``tas-bestfit`` are the one placement engine (``placement.placing``), with health
on and off; the simulator holds no copy of its rules. ``fabric`` also waits for locality
(``placement.patience``): it may hold a job whose plan is well above its floor, for a bounded
time (``DEFAULT_LOCALITY_WAIT`` unless told otherwise; timeout 0 turns it off).
``default`` is the kube-scheduler's own spreading and ``random`` a floor: both are blind to
gangs, tiers and health, but like every policy they never use a down element, as if an admin
had cordoned it (a down host; for gangs of more than one pod also every host under a domain
whose uplinks are down).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Protocol

from fabricsched import ids
from fabricsched.placement import capacity, patience, request, session
from fabricsched.sim import records
from fabricsched.topology import fabric, index

Ranks = tuple[ids.NodeName, ...]

POLICY_NAMES = ("fabric", "default", "tas-bestfit", "random")

DEFAULT_LOCALITY_WAIT = patience.DEFAULT_LOCALITY_WAIT
"""The ``fabric`` policy's wait for locality: the product's own default (one constant)."""

Placed = Ranks | patience.Wait | None
"""Where the job's pods go now; a ``patience.Wait`` to hold it (asked again by the wait's end,
or when capacity comes back); None when they do not all fit."""


class Policy(Protocol):
    """Where a job's pods go now, whether it is held for a better placement, or None (no fit)."""

    name: str

    def place(
        self,
        snapshot: fabric.Fabric,
        free: Mapping[ids.NodeName, int],
        traffic: capacity.Traffic,
        job: records.Job,
        held: patience.Held,
    ) -> Placed: ...


def gang_request(snapshot: fabric.Fabric, job: records.Job) -> request.GangRequest | request.NoFit:
    """The engine's view of a trace row, built as the extender builds a gang's from its pods'
    annotations (``gangs.constraints``): the required tier, else the preferred one, and a
    preferred tier below a required one; the tier names were checked against the fabric on load."""
    required = job.required_tier is not None
    tier = job.required_tier or job.preferred_tier
    key = ids.GangKey(job.name)
    return request.gang_on(snapshot, key, job.pods, job.gpus_per_pod, tier, required,
                           preferred=job.preferred_tier if required else None, slices=job.slices,
                           pattern=job.traffic)


def pattern_of(fab: fabric.Fabric, job: records.Job) -> capacity.Pattern:
    """The traffic pattern job ``job`` is priced with: its ``traffic`` cell, else the fabric's."""
    return fab.traffic if job.traffic is None else job.traffic


class EnginePolicy:
    """``fabric`` (health-aware) or ``tas-bestfit`` (health-blind): the placement engine itself,
    with its locality wait (``options.locality_wait``, off unless set)."""

    def __init__(self, name: str, options: request.PlacementOptions) -> None:
        self.name = name
        self.options = options
        self.session = session.Session()
        """Its placement session; the simulation prices starts with it too (``engine``)."""

    def place(
        self,
        snapshot: fabric.Fabric,
        free: Mapping[ids.NodeName, int],
        traffic: capacity.Traffic,
        job: records.Job,
        held: patience.Held,
    ) -> Placed:
        gang = gang_request(snapshot, job)
        if isinstance(gang, request.NoFit):
            return None
        result = self.session.place(snapshot, free, gang, traffic, self.options)
        if not isinstance(result, request.Plan):
            return None
        decision = self.session.hold_for(snapshot, gang, result, held, self.options.locality_wait, free)
        return decision if isinstance(decision, patience.Wait) else result.ranks


class _Blind:
    """What the blind baselines share: seeded randomness, and the hosts they may use in one
    snapshot (cached until the fabric is rebuilt)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self._snapshot: fabric.Fabric | None = None
        self._single: list[fabric.Host] = []
        self._gang: list[fabric.Host] = []

    def usable(self, snapshot: fabric.Fabric, pods: int) -> list[fabric.Host]:
        """Hosts that are not down; for a gang of several pods, not under a down uplink either."""
        if snapshot is not self._snapshot:
            down_domains = {key for key, d in snapshot.domains.items() if d.down}
            # Name order, not the mapping's: that one may follow set iteration (hash-seeded),
            # and the seeded tie-breaks must see the same list in every process.
            ordered = sorted(snapshot.hosts.values(), key=lambda h: index.natural_key(h.name))
            self._single = [h for h in ordered if not h.down]
            self._gang = [h for h in self._single
                          if not any((t, name) in down_domains for t, name in enumerate(h.path))]
            self._snapshot = snapshot
        return self._single if pods == 1 else self._gang


class DefaultPolicy(_Blind):
    """The kube-scheduler's default scoring, one pod at a time.

    NodeResourcesFit with LeastAllocated: integer score 0-100 of the GPU fraction left free after
    the pod, highest wins, ties broken at random (seeded). Every node is scored, as with
    ``percentageOfNodesToScore: 100``. All-or-nothing: if one pod finds no host the job waits
    and nothing is bound, as a coscheduling gate in front of the default scheduler would do.
    """

    name = "default"

    def place(
        self,
        snapshot: fabric.Fabric,
        free: Mapping[ids.NodeName, int],
        traffic: capacity.Traffic,
        job: records.Job,
        held: patience.Held,
    ) -> Ranks | None:
        g = job.gpus_per_pod
        left: dict[ids.NodeName, int] = {}
        buckets: dict[int, list[fabric.Host]] = {}
        for host in self.usable(snapshot, job.pods):
            have = free[host.name]
            if have >= g:
                left[host.name] = have
                buckets.setdefault((have - g) * 100 // host.gpus, []).append(host)
        ranks: list[ids.NodeName] = []
        for _ in range(job.pods):
            if not buckets:
                return None
            best = max(buckets)
            bucket = buckets[best]
            i = self.rng.randrange(len(bucket))
            host = bucket[i]
            bucket[i] = bucket[-1]
            bucket.pop()
            if not bucket:
                del buckets[best]
            ranks.append(host.name)
            left[host.name] -= g
            if left[host.name] >= g:
                buckets.setdefault((left[host.name] - g) * 100 // host.gpus, []).append(host)
        return tuple(ranks)


class RandomPolicy(_Blind):
    """Each pod on a host drawn uniformly among those with room: the no-information floor."""

    name = "random"

    def place(
        self,
        snapshot: fabric.Fabric,
        free: Mapping[ids.NodeName, int],
        traffic: capacity.Traffic,
        job: records.Job,
        held: patience.Held,
    ) -> Ranks | None:
        g = job.gpus_per_pod
        left = {h.name: free[h.name] for h in self.usable(snapshot, job.pods) if free[h.name] >= g}
        room = list(left)
        ranks: list[ids.NodeName] = []
        for _ in range(job.pods):
            if not room:
                return None
            i = self.rng.randrange(len(room))
            name = room[i]
            ranks.append(name)
            left[name] -= g
            if left[name] < g:
                room[i] = room[-1]
                room.pop()
        return tuple(ranks)


def make(name: str, seed: int, locality_wait: request.LocalityWait | None = None,
         fit_order: request.FitOrder = request.DEFAULT_FIT_ORDER) -> Policy:
    """The policy called ``name`` (one of ``POLICY_NAMES``), its randomness seeded.

    ``locality_wait`` is the ``fabric`` policy's (None: ``DEFAULT_LOCALITY_WAIT``; timeout 0:
    no wait); the baselines never wait, so their figures stay what they were. ``fit_order``
    is the engine's best-fit tie-break (``fabric`` and ``tas-bestfit``: ``--fit-order``).
    """
    if name == "fabric":
        wait = DEFAULT_LOCALITY_WAIT if locality_wait is None else locality_wait
        return EnginePolicy(name, request.PlacementOptions(health_aware=True, locality_wait=wait,
                                                           fit_order=fit_order))
    if name == "tas-bestfit":
        return EnginePolicy(name, request.PlacementOptions(health_aware=False, fit_order=fit_order))
    if name == "default":
        return DefaultPolicy(seed)
    if name == "random":
        return RandomPolicy(seed)
    raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(POLICY_NAMES)}")

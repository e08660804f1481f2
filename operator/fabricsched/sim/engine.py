"""The event-driven simulation: jobs arrive, wait, start all-or-nothing, run stretched, end.

Algorithm overview
------------------
Events sit in one heap ordered by (time, kind): at equal timestamps job ends come first, then
health events (and due recovery re-checks), then submissions, then the ends of locality waits.
After all events of a timestamp, queued jobs are tried in submit order and each that fits
starts (greedy backfill: a big job at the head does not block smaller ones behind it).

A policy may hold a job that fits (``fabric`` waiting for locality, ``placement.patience``):
it stays queued, does not block the jobs behind it, and is tried again whenever capacity comes
back and, at the latest, at the end of its wait, for which an event is scheduled; so no held
job waits past its timeout for want of an event. How long a job has been held is the session's
``patience.Clocks``, the extender's: a hold starts at the plan a job is held from, ends when it
loses its fit (its next plan starts a new one, its first hold counts for the hold limit), and
ends for good at its start.

A start asks the policy for ranks, then prices them with the capacity model
(``placement.capacity``) against the traffic of the gangs running at that moment, the job
included; the job runs ``duration x comm_slowdown``, fixed at start. Health events feed the
topology's ``HealthTracker`` as source "event", so its hysteresis applies: a worsening counts at
once, a recovery after ``recoverAfterSeconds`` (a re-check is scheduled when one falls due).
The fabric snapshot is rebuilt (incrementally) only when the effective health changes.

Cost: a job that could not start stays failed until capacity comes back (an end or a health
change): placements only consume. So a timestamp with only submissions tries only the new
jobs (and the held jobs whose wait ends), and within one pass a job is skipped without asking
the policy when the free pod slots of its size are too few, or when a job of the same shape and
constraint, no larger, already failed in this pass (a held job is no failure: it fits).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

from fabricsched import ids
from fabricsched.placement import capacity, patience, request, session
from fabricsched.sim import policies, preempting, records, results, scenario
from fabricsched.topology import fabric, health

_END, _HEALTH, _SUBMIT, _WAIT_OVER = 0, 1, 2, 3

_Constraint = tuple[str | None, str | None, request.Slices | None]

Progress = Callable[[int, int], None]
"""Called with (jobs finished or started so far, jobs in all) as the run advances."""


DEFAULT_CHECKPOINT_S = 1800.0
"""How often a job saves its work: a preempted job loses what it did since its last save."""

_MAX_ROUNDS = 64
"""Passes at one timestamp after preemptions put victims back in the queue (a bound, never
reached in practice: each round needs a strictly higher priority to evict)."""


@dataclass
class _Running:
    index: int
    ranks: tuple[ids.NodeName, ...]
    end_s: float = math.inf


class _Free:
    """Free GPUs per host, with the free pod slots of every pod size kept up to date.

    The slots (sum over hosts of free // g) are a necessary condition for any policy: a job
    whose pods outnumber them cannot start, whatever the fabric looks like.
    """

    def __init__(self, structure: fabric.Fabric, sizes: set[int]) -> None:
        self.gpus: dict[ids.NodeName, int] = {n: h.gpus for n, h in structure.hosts.items()}
        self.slots = {g: sum(v // g for v in self.gpus.values()) for g in sizes}

    def take(self, ranks: tuple[ids.NodeName, ...], g: int) -> None:
        self._change(ranks, -g)

    def give(self, ranks: tuple[ids.NodeName, ...], g: int) -> None:
        self._change(ranks, g)

    def _change(self, ranks: tuple[ids.NodeName, ...], delta: int) -> None:
        for name in ranks:
            old = self.gpus[name]
            new = old + delta
            if new < 0:
                raise RuntimeError(f"policy over-committed host {name}: {old} GPUs free, {-delta} asked")
            self.gpus[name] = new
            for size in self.slots:
                self.slots[size] += new // size - old // size


class Simulation:
    """One run of one policy over one scenario. Pure: no files, no clock."""

    def __init__(self, scn: scenario.Scenario, policy: policies.Policy, seed: int = 0,
                 checkpoint_s: float = DEFAULT_CHECKPOINT_S) -> None:
        self.scn = scn
        self.policy = policy
        prioritised = any(j.priority is not None for j in scn.jobs)
        self.preempter = preempting.make(policy, seed) if prioritised else None
        """Only a trace with priorities ever preempts: without, every job is equal."""
        if not (math.isfinite(checkpoint_s) and checkpoint_s >= 0):
            raise ValueError(f"checkpoint interval must be finite and >= 0, got {checkpoint_s}")
        self.checkpoint_s = checkpoint_s
        self._lowest = min(j.rank for j in scn.jobs)
        self._left: dict[int, float] = {}
        """Work (unstretched seconds) a preempted job still has to do."""
        self._earlier: dict[int, list[results.Span]] = {}
        self._lost: dict[int, float] = {}
        self._requeued: list[int] = []
        self.index = scn.new_index()
        self.tracker = health.HealthTracker(
            scn.spec.health.recover_after_seconds, scn.spec.health.degraded_capacity)
        self.snapshot = scn.structure
        self.session = policy.session if isinstance(policy, policies.EnginePolicy) else session.Session()
        """The placement session the policy decides in (the engine's policies), whose running
        traffic and floors the figures below share."""
        self.traffic = self.session.running.traffic
        self.free = _Free(scn.structure, {j.gpus_per_pod for j in scn.jobs})
        self.heap: list[tuple[float, int, int, int]] = []
        self.outcomes: list[results.Outcome] = [
            results.Outcome(job, traffic=policies.pattern_of(scn.structure, job)) for job in scn.jobs]
        self.running: dict[int, _Running] = {}
        self.ticks: set[float] = set()
        self._leaf_slots: dict[int, int] = {}
        self._checker = request.PlacementOptions(health_aware=True)
        self.clocks = self.session.clocks
        """The jobs a policy holds (they fit) and held, the session's as the extender's: a job
        that lost its fit while held is held afresh once it fits again, within the hold limit."""
        self._keys = [_key(i) for i in range(len(scn.jobs))]
        """Each job's key in the session (its running traffic, its clocks)."""
        self._by_key = {key: i for i, key in enumerate(self._keys)}
        self._wait_over: dict[int, float] = {}
        """The retry event scheduled for each held job."""

    # -- events ---------------------------------------------------------------------------

    def run(self, progress: Progress | None = None) -> results.Run:
        for i, job in enumerate(self.scn.jobs):
            heapq.heappush(self.heap, (job.submit_s, _SUBMIT, i, i))
        for i, event in enumerate(self.scn.events):
            heapq.heappush(self.heap, (event.time_s, _HEALTH, i, i))
        self._initial_health(min([0.0, *(j.submit_s for j in self.scn.jobs)]))
        queue: list[int] = []
        done = 0
        while self.heap:
            now = self.heap[0][0]
            arrived: list[int] = []
            over: set[int] = set()
            capacity_back = False
            while self.heap and self.heap[0][0] == now:
                _, kind, _, payload = heapq.heappop(self.heap)
                if kind == _END:
                    capacity_back |= self._end(now, payload)
                elif kind == _HEALTH:
                    capacity_back |= self._health(now, payload)
                elif kind == _SUBMIT:
                    arrived.append(payload)
                else:
                    over.add(payload)
            queue.extend(arrived)
            # A held job outranking a new arrival is asked again: it may no longer be held.
            lowest_new = min((self.scn.jobs[i].rank for i in arrived), default=math.inf)
            if arrived:
                held_now = (self._by_key[key] for key in self.clocks.holding())
                over.update(i for i in held_now if self.scn.jobs[i].rank > lowest_new)
            if capacity_back:
                tried = queue
            elif over:
                # Only the held jobs whose wait ends change: the rest still fail or are held.
                over.update(arrived)
                tried = [i for i in queue if i in over]
            else:
                tried = arrived
            for _ in range(_MAX_ROUNDS):
                started = self._pass(now, tried, queue)
                if started:
                    queue = [i for i in queue if i not in started]
                    done += len(started)
                    if progress is not None:
                        progress(min(done, len(self.scn.jobs)), len(self.scn.jobs))
                if not self._requeued:
                    break
                # Victims wait again, and what their eviction freed beyond the preemptor's
                # needs is capacity back for everyone queued.
                queue.extend(self._requeued)
                self._requeued.clear()
                tried = queue
            queue.extend(self._requeued)  # only when the rounds ran out
            self._requeued.clear()
        structure = self.scn.structure
        outcomes = tuple(dataclasses.replace(o, earlier=tuple(self._earlier[i]), lost_gpu_s=self._lost[i])
                         if i in self._earlier else o for i, o in enumerate(self.outcomes))
        return results.Run(self.policy.name, outcomes,
                           sum(h.gpus for h in structure.hosts.values()), structure.tiers[0].name)

    def _initial_health(self, now: float) -> None:
        """Conditions, labels and spec.links hold from the start; they never change in a run."""
        found = [obs for node in self.scn.nodes for obs in health.observations_from_node(self.scn.spec, node)]
        self.tracker.update(now, "spec.links", health.observations_from_links(self.scn.spec))
        self.tracker.update(now, "condition", [o for o in found if o.source == "condition"])
        self.tracker.update(now, "label", [o for o in found if o.source == "label"])
        self._sync_health(now)

    def _health(self, now: float, payload: int) -> bool:
        """Apply one events-file row (or a due recovery, payload -1); True when health changed."""
        if payload >= 0:
            event = self.scn.events[payload]
            element = (health.ElementId.node(str(event.node)) if event.kind == "node"
                       else health.ElementId.domain(str(event.tier), str(event.domain)))
            found = [] if event.state is fabric.HealthState.HEALTHY else [health.Observation(
                element, event.state, event.capacity, "event",
                f"events file line {event.line}")]
            self.tracker.update(now, "event", found, scope={element})
        else:
            self.ticks.discard(now)
            self.tracker.tick(now)
        return self._sync_health(now)

    def _sync_health(self, now: float) -> bool:
        """Push the tracker's effective view into the fabric index; rebuild the snapshot if needed."""
        changed = self.index.apply_health(self.tracker.effective())
        if changed:
            self.snapshot = self.index.snapshot().fabric
        due = self.tracker.next_due()
        if due is not None and due > now and due not in self.ticks:
            self.ticks.add(due)
            heapq.heappush(self.heap, (due, _HEALTH, -1, -1))
        return changed

    # -- starts and ends ------------------------------------------------------------------

    def _pass(self, now: float, tried: list[int], queue: list[int]) -> set[int]:
        started: set[int] = set()
        lowest_queued = min((self.scn.jobs[i].rank for i in queue), default=self._lowest)
        failed: dict[tuple[int, _Constraint], int] = {}
        unpreempted: dict[tuple[int, _Constraint, int], int] = {}
        if self.preempter is not None:  # the kube-scheduler's queue: highest priority first
            tried = sorted(tried, key=lambda i: (-self.scn.jobs[i].rank, i))
        for i in tried:
            job = self.scn.jobs[i]
            shape = (job.gpus_per_pod, job.constraint)
            ranks: policies.Placed = None
            if self.free.slots[job.gpus_per_pod] >= job.pods and failed.get(shape, math.inf) > job.pods:
                # The locality clock starts at the hold (the plan), as the extender's.
                held = self.clocks.held(self._keys[i], now)
                if job.rank > lowest_queued:
                    # Never held for locality: it would wait while lower-priority jobs start.
                    held = patience.Held(math.inf, math.inf)
                ranks = self.policy.place(self.snapshot, self.free.gpus, self.traffic, job, held)
                if ranks is None:
                    failed[shape] = min(failed.get(shape, job.pods), job.pods)
            if ranks is None:
                self.clocks.lost_fit(self._keys[i], now)  # its next plan starts a new hold
                key = (*shape, job.rank)
                if self.preempter is None or unpreempted.get(key, math.inf) <= job.pods:
                    continue
                ranks = self._preempt(now, i)
                if ranks is None:
                    unpreempted[key] = min(unpreempted.get(key, job.pods), job.pods)
                    continue
                failed.clear()  # the evictions gave capacity back
                unpreempted.clear()
            if isinstance(ranks, patience.Wait):
                self._hold(now, i, ranks)
                continue
            self._start(now, i, ranks)
            started.add(i)
        return started

    def _hold(self, now: float, i: int, wait: patience.Wait) -> None:
        self.clocks.hold(self._keys[i], now)
        # Strictly later, so a wait that rounds to nothing cannot spin on one timestamp.
        at = max(now + wait.retry_in_s, math.nextafter(now, math.inf))
        if self._wait_over.get(i, -math.inf) <= now:
            self._wait_over[i] = at
            heapq.heappush(self.heap, (at, _WAIT_OVER, i, i))

    def _start(self, now: float, i: int, ranks: tuple[ids.NodeName, ...]) -> None:
        job = self.scn.jobs[i]
        snap = self.snapshot
        if len(ranks) != job.pods:
            raise RuntimeError(f"policy {self.policy.name} gave {len(ranks)} ranks for {job.pods} pods")
        pattern = policies.pattern_of(snap, job)
        slowdown = capacity.comm_slowdown(snap, ranks, job.gpus_per_pod, self.traffic, pattern=pattern)
        degraded = capacity.on_degraded_path(snap, ranks)
        avoidable = degraded and job.pods > 1 and self._healthy_existed(job)
        spanned = {str(snap.tiers[t].name): n for t, n in _spanned(snap, ranks).items()}
        self.free.take(ranks, job.gpus_per_pod)
        self.session.running.start(self._keys[i], snap, ranks, job.gpus_per_pod, pattern)
        end = now + self._left.get(i, job.duration_s) * slowdown
        self.running[i] = _Running(i, ranks, end)
        held = self.clocks.held(self._keys[i], now)  # its hold ends at its start
        self.clocks.forget(self._keys[i])
        self._wait_over.pop(i, None)
        self.outcomes[i] = results.Outcome(
            job=job, start_s=now, end_s=end, placement=ranks, domains_spanned=spanned,
            degraded_path=degraded, comm_slowdown=slowdown,
            floor=self.session.floor(self.scn.structure, job.pods, job.gpus_per_pod, pattern),
            fits_one_leaf=self._fits_one_leaf(job), avoidable_degraded=avoidable,
            down_use=capacity.uses_down(snap, ranks),
            waited_for_locality_s=held.total_s,
            slice_domains=_slice_domains(snap, ranks, job.slices), traffic=pattern)
        if math.isfinite(end):
            heapq.heappush(self.heap, (end, _END, i, i))

    def _end(self, now: float, i: int) -> bool:
        """End job ``i``'s run; False for the end of a run a preemption cut short."""
        if i not in self.running or self.running[i].end_s != now:
            return False
        self._release(i)
        return True

    def _release(self, i: int) -> None:
        gone = self.running.pop(i)
        job = self.scn.jobs[i]
        self.free.give(gone.ranks, job.gpus_per_pod)
        self.session.running.end(self._keys[i], self.snapshot)

    # -- preemption -----------------------------------------------------------------------

    def _preempt(self, now: float, i: int) -> tuple[ids.NodeName, ...] | None:
        """Evict what the policy chooses for job ``i``, which fits nowhere; its ranks, or None."""
        assert self.preempter is not None
        jobs = self.scn.jobs
        running = [preempting.Victim(r.index, jobs[r.index].rank, r.ranks, jobs[r.index].gpus_per_pod,
                                     self.outcomes[r.index].start_s or 0.0,
                                     policies.pattern_of(self.snapshot, jobs[r.index]))
                   for r in self.running.values()]
        job = self.scn.jobs[i]
        if not any(v.priority < job.rank for v in running):
            return None
        eviction = self.preempter.preempt(self.snapshot, self.free.gpus, self.traffic, job, running, now)
        if eviction is None:
            return None
        for v in eviction.victims:
            if jobs[v].rank >= job.rank:  # a broken policy, not a result
                raise RuntimeError(f"policy {self.policy.name} preempted {jobs[v].name} for {job.name}")
            self._evict(now, v, job.name)
        return eviction.ranks

    def _evict(self, now: float, v: int, by: str) -> None:
        """Job ``v`` stops now: it keeps the work up to its last checkpoint and waits again."""
        outcome, job = self.outcomes[v], self.scn.jobs[v]
        start, slowdown = outcome.start_s or 0.0, outcome.comm_slowdown or 1.0
        ran = now - start
        saved = ran if self.checkpoint_s <= 0 else ran // self.checkpoint_s * self.checkpoint_s
        left = self._left.get(v, job.duration_s)
        self._left[v] = max(left - saved / slowdown, 1e-9)
        self._lost[v] = self._lost.get(v, 0.0) + (ran - saved) * job.pods * job.gpus_per_pod
        self._earlier.setdefault(v, []).append(results.Span(start, now, outcome.placement, by))
        self._release(v)
        self.outcomes[v] = dataclasses.replace(outcome, end_s=now)
        self._requeued.append(v)

    # -- figures the summary needs --------------------------------------------------------

    def _healthy_existed(self, job: records.Job) -> bool:
        """Ask the health-aware engine, at this moment, for a plan off degraded paths."""
        gang = policies.gang_request(self.snapshot, job)
        if isinstance(gang, request.NoFit):
            return False
        plan = self.session.place(self.snapshot, self.free.gpus, gang, self.traffic, self._checker)
        return isinstance(plan, request.Plan) and not plan.degraded_path

    def _fits_one_leaf(self, job: records.Job) -> bool:
        g = job.gpus_per_pod
        if g not in self._leaf_slots:
            self._leaf_slots[g] = self.scn.structure.largest_domain(0, g)[1]
        return job.pods <= self._leaf_slots[g]


def _spanned(snap: fabric.Fabric, ranks: tuple[ids.NodeName, ...]) -> dict[int, int]:
    return {t: len({snap.hosts[h].path[t] for h in ranks}) for t in range(len(snap.tiers))}


def _slice_domains(
    snap: fabric.Fabric, ranks: tuple[ids.NodeName, ...], slices: request.Slices | None
) -> tuple[str | None, ...]:
    """The domain of the slice tier holding each slice, slice 0 first; None for a slice split
    over several (a preferred slice the plan gave up, or a policy blind to slices)."""
    if slices is None:
        return ()
    tier = snap.tier_index(slices.tier)
    found: list[str | None] = []
    for first in range(0, len(ranks), slices.pods):
        names = {snap.hosts[h].path[tier] for h in ranks[first:first + slices.pods]}
        found.append(str(next(iter(names))) if len(names) == 1 else None)
    return tuple(found)


def _key(job: int) -> ids.GangKey:
    """The running-traffic key of job ``job`` (trace names need not be unique)."""
    return ids.GangKey(f"job-{job}")


def simulate(
    scn: scenario.Scenario, policy: policies.Policy, progress: Progress | None = None, seed: int = 0,
    checkpoint_s: float = DEFAULT_CHECKPOINT_S,
) -> results.Run:
    return Simulation(scn, policy, seed, checkpoint_s).run(progress)

"""The extender's decisions: filter and prioritize for one pod, and keeping the book current.

Where it sits in the flow: the kube-scheduler sends a pod and the nodes that fit it
(``server``) -> ``Coordinator.filter`` identifies the gang (``gangs``), plans it on the first
pod (``planning`` -> the engine), holds the plan in the book (``reservations``) and writes it
as a FabricPlacement (``placements``) -> every pod of the gang is steered to its rank's node.
A gang that opted in to waiting for locality may be held before its plan is reserved
(``locality``: the engine's own decision, as in the simulator). Cluster changes (pods bound or
ended, Jobs finished) arrive through the state's subscription and move the book (``following``); a
housekeeping tick expires idle reservations.

Every call runs on the event loop thread, as the cluster state requires.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from fabricsched import ids
from fabricsched.api.placement import PlacementPhase
from fabricsched.extender import (
    admission,
    following,
    gangs,
    locality,
    path_health,
    pending,
    placements,
    planning,
    ports,
    reservations,
    verdicts,
)
from fabricsched.placement import patience, request, session
from fabricsched.ports import changes, jobs
from fabricsched.topology import nodes

logger = logging.getLogger(__name__)

PLANNED_SCORE = 10
OTHER_SCORE = 0


@dataclass(frozen=True)
class CoordinatorOptions:
    placement: request.PlacementOptions = field(default_factory=request.PlacementOptions)
    """The engine's options; ``placement.locality_wait`` is the cluster's default wait for
    locality (off unless ``fabricsched run --locality-wait`` sets it), which a gang's
    ``fabricsched.io/locality-wait`` annotation overrides."""
    event_interval_s: float = 60.0
    """At most one Event per gang and reason in this many seconds (the scheduler retries often)."""
    save_timeout_s: float = 2.0
    """How long a new plan's filter call waits for its FabricPlacement to be written."""
    max_reserved_gpus_per_namespace: int = 0
    """Most GPUs one namespace's gangs may hold reserved but unbound (0: no limit)."""


@dataclass(frozen=True)
class FilterAnswer:
    passed: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""


@dataclass(frozen=True)
class Scores:
    """Prioritize's answer: ``planned`` scores ``PLANNED_SCORE``, every other node
    ``OTHER_SCORE``. Kept as the node list and one name, not 10k pairs, so the server can
    encode it in one pass; iterating gives the (node, score) pairs."""

    nodes: Sequence[str]
    planned: str | None

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return ((n, PLANNED_SCORE if n == self.planned else OTHER_SCORE) for n in self.nodes)


class Coordinator:
    """Filter and prioritize on top of the book of plans and the cluster state."""

    def __init__(
        self,
        state: ports.StateView,
        book: reservations.Book,
        writer: placements.PlacementWriter,
        events: ports.EventSink,
        clock: Callable[[], float],
        options: CoordinatorOptions,
        jobs: ports.JobFetcher | None = None,
    ) -> None:
        self.state = state
        self.book = book
        self.writer = writer
        self.events = events
        self.clock = clock
        self.options = options
        self.jobs = jobs
        self.ready = False
        """Set by ``restore``: before it, no decision is made (a reservation could be lost)."""
        self.path_health = path_health.PathHealth(state, book, writer, events, clock)
        """Running gangs' path health follows the fabric (the book's ``annotate`` hook)."""
        book.annotate = self.path_health.annotate
        self.pending = pending.PendingBoard(writer, clock)
        """Gangs without a plan yet: a Pending FabricPlacement says why (rate-limited writes)."""
        self.follower = following.Follower(state, book, writer, clock, self.path_health)
        """Moves the book with the cluster: binds, ends, Jobs, expiry, restore."""
        self._noticed: dict[tuple[ids.GangKey, str], float] = {}
        self._session = session.Session()
        """The placement session: snapshots, locality floors, running gangs' demands."""
        self._clocks = self._session.clocks
        """When gangs held for locality started waiting (from their pods' creation times)."""

    # --- filter and prioritize ----------------------------------------------------------

    async def filter(self, manifest: Mapping[str, Any], node_names: Sequence[str]) -> FilterAnswer:
        if not self.ready:
            return FilterAnswer([], error="fabricsched is starting: its reservations are not restored yet")
        pod = nodes.PodUsage.from_manifest(manifest)
        # NodeName is a NewType of str: the names are used as they came, with no per-node copy.
        candidates = cast(Sequence[ids.NodeName], node_names)
        known = self.book.get(gangs.membership(pod)[0])
        # A planned gang stays in its fabric; a new one goes to the fabric holding most candidates.
        topology = known.topology if known is not None else self.state.topology_holding_most(candidates)
        gang = await self._identify(pod, topology)
        if isinstance(gang, gangs.NotOurs):
            return FilterAnswer(list(node_names))
        if isinstance(gang, gangs.Unresolved):
            reason = f"gang not identified: {gang.reason}"
            return FilterAnswer([], failed=verdicts.every(node_names, reason))
        entry = self.book.get(gang.key)
        snapshot = self.state.snapshot(topology) if topology is not None else None
        if snapshot is None:
            # None of these nodes is in a fabric: nothing to steer, the scheduler decides alone.
            return FilterAnswer(list(node_names))
        if entry is None or entry.phase == PlacementPhase.EXPIRED:
            refused = admission.refusal(
                # Newest first: a gang asking to be planned was just created, so its pods are
                # found among the last ones seen rather than after every older pod.
                gang, pod, entry, list(self.state.pods_in(pod.namespace).values())[::-1], self.book.entries(),
                self.options.max_reserved_gpus_per_namespace,
            )
            if refused:
                return FilterAnswer([], failed=verdicts.every(node_names, refused))
        if entry is None:
            made = self._plan(gang, snapshot, candidates, pod, locality.created_at(manifest))
            if isinstance(made, FilterAnswer):
                return made
            entry = made
            if entry.size > 1:
                # Other ranks are held by this plan alone until their pods bind: make it survive
                # a crash before answering. A single pod's plan is used by this very answer (the
                # bind holds the node), so its object is written in the background.
                await self.writer.save_now(entry.key, self.options.save_timeout_s)
        rank = gang.rank if gang.rank is not None else self._assign(entry, pod)
        if rank is None:
            reason = f"all {entry.size} ranks of gang {entry.display} are taken by other pods"
            return FilterAnswer([], failed=verdicts.every(node_names, reason))
        if rank in entry.bound:
            # The pod asking is unbound, so another live pod holds this rank: a duplicated rank
            # (or a replacement whose predecessor still terminates). Nothing to plan again.
            return FilterAnswer([], failed=verdicts.every(node_names, verdicts.rank_taken(entry, rank)))
        target = entry.ranks[rank]
        if target is None or target not in candidates:
            moved = self._replan(entry, snapshot, candidates, pod)
            if isinstance(moved, FilterAnswer):
                return moved
            entry, target = moved, moved.ranks[rank]
        assert target is not None
        return self._steer(entry, rank, target, snapshot, candidates)

    def prioritize(self, manifest: Mapping[str, Any], node_names: Sequence[str]) -> Scores:
        """The rank's planned node scores 10, every other node 0."""
        return Scores(node_names, self._target(nodes.PodUsage.from_manifest(manifest)))

    def _target(self, pod: nodes.PodUsage) -> ids.NodeName | None:
        key, rank = gangs.membership(pod)
        entry = self.book.get(key)
        if entry is None:
            return None
        if rank is None:
            rank = entry.pod_ranks.get(pod.uid)
        return entry.ranks[rank] if rank is not None and rank < entry.size else None

    async def _identify(self, pod: nodes.PodUsage, topology: ids.TopologyName | None) -> gangs.Identification:
        snapshot = self.state.snapshot(topology) if topology is not None else None
        resource = snapshot.spec.gpu_resource if snapshot is not None else gangs.DEFAULT_GPU_RESOURCE
        owner = gangs.job_reference(pod)
        job = self._job_facts(pod.namespace, owner)
        found = gangs.identify(pod, job, resource)
        if isinstance(found, gangs.Unresolved) and found.job_name and self.jobs is not None:
            # The Job's watch event may trail its pods: ask the API once, on the first pod.
            fetched = await self.jobs.fetch(pod.namespace, found.job_name)
            if fetched is not None:
                found = gangs.identify(pod, _facts(fetched), resource)
        return found

    def _job_facts(self, namespace: str, owner: tuple[str, str] | None) -> gangs.JobFacts | None:
        if owner is None:
            return None
        job = self.state.job_by_uid(namespace, owner[1]) if owner[1] else None
        if job is None:
            job = self.state.jobs.get((namespace, owner[0]))
        return _facts(job) if job is not None else None

    # --- planning -----------------------------------------------------------------------

    def _inputs(
        self,
        snapshot: ports.SnapshotView,
        exclude: ids.GangKey,
        keep: Sequence[ids.NodeName] = (),
        gpus_per_pod: int = 0,
    ) -> planning.Inputs:
        reserved = self.book.reserved_gpus(exclude=exclude)
        for node in keep:
            reserved[node] = reserved.get(node, 0) + gpus_per_pod
        others = [e for e in self.book.entries() if e.key != exclude and e.topology == snapshot.name]
        traffic = planning.traffic(self._session, snapshot.fabric, others)
        return planning.Inputs(self._session, snapshot, reserved, traffic)

    def _plan(
        self,
        gang: gangs.GangIdentity,
        snapshot: ports.SnapshotView,
        candidates: Sequence[ids.NodeName],
        pod: nodes.PodUsage,
        created: float | None,
    ) -> reservations.Entry | FilterAnswer:
        inputs = self._inputs(snapshot, gang.key)
        # The scheduler's names as they came: the engine masks its fabric's hosts with them, so
        # names outside the fabric restrict nothing and need no per-node filtering here.
        made = planning.plan(inputs, gang, candidates, self.options.placement)
        if isinstance(made, request.NoFit):
            self.pending.no_fit(gang, snapshot.name, made)
            return self._no_fit(gang.key, gang.display, gang.tier, gang.required, made, candidates, pod)
        held = self._hold(gang, snapshot, made, candidates, pod, created)
        if isinstance(held, FilterAnswer):
            return held
        made = held
        entry = self.book.reserve(
            planning.new_entry(gang, snapshot.name, snapshot.fabric, made), self.clock()
        )
        self.writer.submit(entry)
        self.pending.planned(entry, created)
        summary = "; ".join(entry.reasons) or "planned"
        if entry.degraded_path:
            self._notice(
                pod,
                entry.key,
                "FabricDegradedPath",
                f"gang {entry.display} placed on a degraded path (comm slowdown "
                f"{entry.comm_slowdown:.2f}): no healthy placement exists now; {summary}",
                True,
            )
        else:
            self._notice(pod, entry.key, "FabricPlanned", f"gang {entry.display}: {summary}", False)
        return entry

    def _hold(
        self,
        gang: gangs.GangIdentity,
        snapshot: ports.SnapshotView,
        made: request.Plan,
        candidates: Sequence[str],
        pod: nodes.PodUsage,
        created: float | None,
    ) -> request.Plan | FilterAnswer:
        """The plan to reserve, or the answer that holds the gang for a plan near its floor.

        A held gang reserves nothing (its FabricPlacement is Pending, with the hold as the
        reason), so other gangs backfill around it. Every candidate fails (not unresolvable):
        the kube-scheduler keeps the pod and asks again on cluster events that may free
        capacity, and at the latest after ``podMaxInUnschedulablePodsDuration``.
        """
        wanted = locality.settings(pod.annotations, self.options.placement.locality_wait)
        if wanted.problems:
            self._notice(
                pod, gang.key, "FabricLocalityWaitInvalid",
                f"gang {gang.display} does not wait for locality: {'; '.join(wanted.problems)}", True,
            )
        if not wanted.wait.enabled:
            return made
        now = self.clock()
        waited = self._clocks.waited(gang.key, created, now)
        decision = locality.decide(self._session, snapshot.fabric, gang, made, waited, wanted.wait)
        if isinstance(decision, patience.Wait):
            message = f"gang {gang.display} is {decision.reason}"
            self.pending.wait(
                gang, snapshot.name, pending.HELD_FOR_LOCALITY, pending.message_of(gang, decision.reason)
            )
            self._notice(pod, gang.key, "FabricWaitingForLocality", message, False)
            return FilterAnswer([], failed=verdicts.every(candidates, message))
        self._clocks.forget(gang.key)
        if decision.reason is None:
            return made
        return dataclasses.replace(made, reasons=(*made.reasons, decision.reason))

    def _replan(
        self,
        entry: reservations.Entry,
        snapshot: ports.SnapshotView,
        candidates: Sequence[ids.NodeName],
        pod: nodes.PodUsage,
    ) -> reservations.Entry | FilterAnswer:
        """Plan again the unbound ranks that lost their node (expired, or not a candidate now)."""
        allowed = set(candidates)
        moving = [r for r in entry.unbound() if entry.ranks[r] is None or entry.ranks[r] not in allowed]
        keep = [n for r, n in entry.held() if r not in moving]
        inputs = self._inputs(snapshot, entry.key, keep, entry.gpus_per_pod)
        moved = planning.replan(inputs, entry, moving, candidates, self.options.placement)
        if isinstance(moved, request.NoFit):
            return self._no_fit(entry.key, entry.display, entry.tier, entry.required, moved, candidates, pod)
        updated = self.book.replan(
            entry.key,
            {r: n for r, n in enumerate(moved.ranks) if r in moving and n is not None},
            self.clock(),
            moved.reasons,
        )
        updated = self.book.put(_with_costs(updated, moved.domains, moved.comm_slowdown, moved.degraded_path))
        self.writer.submit(updated)
        return updated

    def _no_fit(
        self,
        key: ids.GangKey,
        display: str,
        tier: str | None,
        required: bool,
        why: request.NoFit,
        candidates: Sequence[str],
        pod: nodes.PodUsage,
    ) -> FilterAnswer:
        if required or why.unresolvable:
            where = f"one {tier} domain" if required and tier else "this fabric"
            message = f"gang {display} cannot be placed in {where}: {why.reason}"
            self._notice(
                pod, key, "FabricTierUnsatisfiable" if required else "FabricUnplaceable", message, True
            )
            return FilterAnswer([], unresolvable=verdicts.every(candidates, message))
        message = f"gang {display} does not fit now: {why.reason}"
        self._notice(pod, key, "FabricNoFit", message, True)
        return FilterAnswer([], failed=verdicts.every(candidates, message))

    def _assign(self, entry: reservations.Entry, pod: nodes.PodUsage) -> int | None:
        live = (
            [
                p.uid
                for p in self.state.pods_in(pod.namespace).values()
                if gangs.membership(p)[0] == entry.key and not gangs.pod_ended(p)
            ]
            if pod.uid not in entry.pod_ranks
            else []
        )
        return self.book.assign(entry.key, pod.uid, [*live, pod.uid])

    def _steer(
        self,
        entry: reservations.Entry,
        rank: int,
        target: ids.NodeName,
        snapshot: ports.SnapshotView,
        candidates: Sequence[ids.NodeName],
    ) -> FilterAnswer:
        fab = snapshot.fabric
        reserved = self.book.reserved_gpus(exclude=entry.key)
        free = {n: snapshot.free_gpus.get(n, 0) - reserved.get(n, 0) for n in reserved}
        footprint = verdicts.Footprint.of(fab, entry, rank, target)
        holders = verdicts.holders(self.book.entries(), entry.key) if reserved else {}
        failed = verdicts.failed(fab, snapshot.name, candidates, footprint, free, entry.gpus_per_pod, holders)
        return FilterAnswer([target], failed=failed)

    # --- keeping the book current (``following``) ---------------------------------------

    def on_change(self, change: changes.Change) -> None:
        """The state's subscription callback: quick, synchronous, never raises."""
        self.follower.on_change(change)

    def housekeeping(self) -> None:
        """Expire idle reservations, release gangs whose pods all ended, forget old clocks."""
        self.follower.housekeeping()
        self._clocks.prune(self.clock())
        cutoff = self.clock() - self.options.event_interval_s
        self._noticed = {k: t for k, t in self._noticed.items() if t > cutoff}

    async def restore(self) -> None:
        """Rebuild the book from FabricPlacement objects and bound pods (after a restart); from
        then on decisions are made."""
        await self.follower.restore()
        self._warm()
        self.ready = True

    def _warm(self) -> None:
        """Build each fabric's snapshot, engine view and running traffic now, so the first
        request after ready answers as fast as the hundredth."""
        for name in list(self.state.topologies):
            snap = self.state.snapshot(name)
            if snap is not None:
                self._session.snapshot(snap.fabric)
                # Each restored gang's demand on the fabric: computed once here, not by the
                # first plan after ready.
                planning.traffic(self._session, snap.fabric,
                                 [e for e in self.book.entries() if e.topology == name])

    def _notice(
        self, pod: nodes.PodUsage, key: ids.GangKey, reason: str, message: str, warning: bool
    ) -> None:
        now = self.clock()
        last = self._noticed.get((key, reason))
        if last is not None and now - last < self.options.event_interval_s:
            return
        self._noticed[(key, reason)] = now
        self.events.pod_event(pod, reason, message, warning)


def _facts(job: jobs.JobInfo) -> gangs.JobFacts:
    return gangs.JobFacts(job.name, job.uid, job.parallelism, job.completions)


def _with_costs(
    entry: reservations.Entry,
    domains: Mapping[str, tuple[ids.DomainName, ...]],
    slowdown: float,
    degraded: bool,
) -> reservations.Entry:
    return dataclasses.replace(entry, domains=dict(domains), comm_slowdown=slowdown, degraded_path=degraded)


async def run_housekeeping(coordinator: Coordinator, interval_s: float) -> None:
    """Call ``housekeeping`` every ``interval_s`` until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            coordinator.housekeeping()
        except Exception:  # pure book work: only a defect lands here, and expiry must go on
            logger.exception("extender housekeeping failed")

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
    gang_sources,
    gangs,
    locality,
    owners,
    path_health,
    pending,
    placements,
    planning,
    pod_identity,
    ports,
    reservations,
    verdicts,
    workload_refs,
)
from fabricsched.placement import patience, request, session
from fabricsched.ports import changes
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
        owner_fetcher: owners.OwnerFetcher | None = None,
        identity: pod_identity.PodIdentity | None = None,
    ) -> None:
        self.state = state
        self.book = book
        self.writer = writer
        self.events = events
        self.clock = clock
        self.options = options
        self.owners = owners.OwnerCache(state, owner_fetcher, jobs, clock)
        """The owners that size gangs (JobSets, training jobs, PodGroups, unseen Jobs)."""
        self.identity = identity
        """Checks that a request's pod exists with its UID (None: every pod is taken as sent)."""
        self.ready = False
        """Set by ``restore``: before it, no decision is made (a reservation could be lost)."""
        self.path_health = path_health.PathHealth(state, book, writer, events, clock)
        """Running gangs' path health follows the fabric (the book's ``annotate`` hook)."""
        book.annotate = self.path_health.annotate
        self.workloads = workload_refs.Registry()
        """Gang -> its workload object (JobSet, PyTorchJob, ...), the target of its path Events."""
        self.path_health.workload_of = self.workloads.workload_of
        self.pending = pending.PendingBoard(writer, clock)
        """Gangs without a plan yet: a Pending FabricPlacement says why (rate-limited writes)."""
        self.follower = following.Follower(state, book, writer, clock, self.path_health, self.member,
                                           self.owners.key)
        """Moves the book with the cluster: binds, ends, Jobs, expiry, restore."""
        self.on_freed: Callable[[], None] = lambda: None
        """Told when the book or the cluster freed capacity (``wakeup``: waiting gangs retry)."""
        self._reserved_at_tick = 0
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
        if self.identity is not None and (unknown := await self.identity.unknown(pod)):
            return FilterAnswer([], failed=verdicts.every(node_names, unknown))  # forged or gone: no decision
        # NodeName is a NewType of str: the names are used as they came, with no per-node copy.
        candidates = cast(Sequence[ids.NodeName], node_names)
        known = self.book.get(self.owners.key(pod))
        # A planned gang stays in its fabric; a new one goes to the fabric holding most candidates.
        topology = known.topology if known is not None else self.state.topology_holding_most(candidates)
        gang = await self._identify(pod, topology)
        if isinstance(gang, gangs.NotOurs):
            return FilterAnswer(list(node_names))
        if isinstance(gang, gang_sources.Unsized):
            return self._unresolved(pod, gang.reason, node_names)
        entry = self.book.get(gang.key)
        if entry is not None and entry.gpus_per_pod != gang.gpus_per_pod:
            return self._unresolved(pod, admission.mixed_gpus(gang, entry.gpus_per_pod), node_names)
        snapshot = self.state.snapshot(topology) if topology is not None else None
        if snapshot is None:
            # None of these nodes is in a fabric: nothing to steer, the scheduler decides alone.
            return FilterAnswer(list(node_names))
        if entry is None or entry.phase == PlacementPhase.EXPIRED:
            refused = admission.refusal(
                # Newest first: a gang asking to be planned was just created, so its pods are
                # found among the last ones seen rather than after every older pod.
                gang, pod, entry, list(self.state.pods_in(pod.namespace).values())[::-1], self.book.entries(),
                self.options.max_reserved_gpus_per_namespace, self.owners.key, self._resource(topology),
            )
            if isinstance(refused, admission.Mixed):
                return self._unresolved(pod, refused.reason, node_names)
            if refused:
                return FilterAnswer([], failed=verdicts.every(node_names, refused))
        if entry is None:
            made = self._plan(gang, snapshot, candidates, pod, locality.created_at(manifest))
            if isinstance(made, FilterAnswer):
                return made
            entry = made
            if entry.size > 1:
                # Other ranks are held by this plan alone until their pods bind: its object is
                # created now, not after the coalescing delay, but the answer does not wait for
                # it (the scheduler's one loop would). A single pod's plan is used by this very
                # answer (the bind holds the node): its object follows in the background.
                self.writer.save_soon(entry.key, self.options.save_timeout_s)
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
        elif (off := self._move_off(entry, rank, target, snapshot, candidates)) is not None:
            entry, target = off, off.ranks[rank]
        assert target is not None
        # The rank's node alone, and no reason for the others: the kube-scheduler shows filter
        # reasons only when no node passes, and drops them once one does, so 999 of them at
        # 1,000 nodes were JSON built here and decoded there for nothing, on every pod.
        return FilterAnswer([target])

    def prioritize(self, manifest: Mapping[str, Any], node_names: Sequence[str]) -> Scores:
        """The rank's planned node scores 10, every other node 0."""
        pod = nodes.PodUsage.from_manifest(manifest)
        known = self.identity is None or self.identity.known(pod)
        return Scores(node_names, self._target(pod) if known else None)

    def member(self, pod: nodes.PodUsage) -> tuple[ids.GangKey, int | None]:
        """A pod's gang key and own rank: the one key function, for every caller."""
        key = self.owners.key(pod)
        entry = self.book.get(key)
        return self.owners.membership(pod, self._resource(entry.topology if entry is not None else None))

    def _resource(self, topology: ids.TopologyName | None) -> str:
        snapshot = self.state.snapshot(topology) if topology is not None else None
        return snapshot.spec.gpu_resource if snapshot is not None else gangs.DEFAULT_GPU_RESOURCE

    def _unresolved(self, pod: nodes.PodUsage, reason: str, node_names: Sequence[str]) -> FilterAnswer:
        """A known gang that cannot be sized (or mixes GPU requests): never a lone pod."""
        message = f"gang not identified: {reason}"
        self._notice(pod, self.owners.key(pod), "GangUnresolved", message, True)
        return FilterAnswer([], failed=verdicts.every(node_names, message))

    def _target(self, pod: nodes.PodUsage) -> ids.NodeName | None:
        key, rank = self.member(pod)
        entry = self.book.get(key)
        if entry is None:
            return None
        if rank is None:
            rank = entry.pod_ranks.get(pod.uid)
        return entry.ranks[rank] if rank is not None and rank < entry.size else None

    async def _identify(
        self, pod: nodes.PodUsage, topology: ids.TopologyName | None
    ) -> gangs.GangIdentity | gangs.NotOurs | gang_sources.Unsized:
        resource = self._resource(topology)
        if pod.gpus(resource) <= 0:
            return gangs.NotOurs(f"requests no {resource}")
        # The owner that sizes the gang (a JobSet, a Job whose watch event trails its pods) is
        # read once, bounded in time; until it is known the pod waits, named in its reason.
        await self.owners.prepare(pod)
        return gang_sources.identify(pod, {}, self.owners.view(resource), resource)

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
        bound = self.follower.bound_ranks(gang.key, gang.namespace, gang.size)
        lost = 0 < len(bound) < gang.size
        fresh: reservations.Entry | request.NoFit
        if lost:
            # Its plan was lost with pods bound (a stop before the object landed, a deletion):
            # the other ranks go near them, with no locality wait (the gang has started).
            fresh = planning.around(inputs, gang, snapshot.name, bound, candidates, self.options.placement)
        else:
            # The scheduler's names as they came: the engine masks its fabric's hosts with them,
            # so names outside the fabric restrict nothing and need no per-node filtering here.
            made = planning.plan(inputs, gang, candidates, self.options.placement)
            held = made if isinstance(made, request.NoFit) else self._hold(
                gang, snapshot, made, candidates, pod, created)
            if isinstance(held, FilterAnswer):
                return held
            fresh = held if isinstance(held, request.NoFit) else planning.new_entry(
                gang, snapshot.name, snapshot.fabric, held)
        if isinstance(fresh, request.NoFit):
            self.pending.no_fit(gang, snapshot.name, fresh)
            return self._no_fit(gang.key, gang.display, gang.tier, gang.required, fresh, candidates, pod)
        entry = self.book.reserve(fresh, self.clock())
        if lost:
            self.follower.track(entry)  # its bound ranks, from the pods
            entry = self.book.get(entry.key) or entry
        self.writer.submit(entry)
        self.workloads.remember(entry.key, pod, self.owners.pod_group_uid(pod))
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
        return self._commit(entry, moving, moved)

    def _move_off(
        self,
        entry: reservations.Entry,
        rank: int,
        target: ids.NodeName,
        snapshot: ports.SnapshotView,
        candidates: Sequence[ids.NodeName],
    ) -> reservations.Entry | None:
        """A reserved rank whose host degraded or went down after the plan: planned again by
        the gang rule, off that host, when that gives the whole gang a healthy path (off a down
        host: any finite one); None keeps the rank where it is (its host is healthy, or nothing
        better is free)."""
        host = snapshot.fabric.hosts.get(target)
        if entry.size == 1 or host is None or not host.degraded:
            return None  # a lone pod's rule prefers a degraded host: its link carries no gang traffic
        keep = [n for r, n in entry.held() if r != rank]
        inputs = self._inputs(snapshot, entry.key, keep, entry.gpus_per_pod)
        others = [n for n in candidates if n != target]
        moved = planning.replan(inputs, entry, [rank], others, self.options.placement)
        if isinstance(moved, request.NoFit):
            return None
        if moved.degraded_path and not host.down:
            return None  # no healthier place for it now: a degraded host beats a wait
        return self._commit(entry, [rank], moved)

    def _commit(
        self, entry: reservations.Entry, moving: Sequence[int], moved: reservations.Entry
    ) -> reservations.Entry:
        updated = self.book.replan(
            entry.key,
            {r: n for r, n in enumerate(moved.ranks) if r in moving and n is not None},
            self.clock(),
            moved.reasons,
        )
        costed = planning.with_costs(updated, moved.domains, moved.comm_slowdown, moved.degraded_path)
        updated = self.book.put(costed)
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
        # Only pods holding one of the gang's ranks matter (whether they still live frees their
        # rank or not): the UID test comes first, so the gang key is computed for those alone,
        # not for every pod of the namespace (at 1,500 pods that was 8 ms of a single pod's call).
        holders = entry.pod_ranks
        live = (
            [
                p.uid
                for p in self.state.pods_in(pod.namespace).values()
                if p.uid in holders and not gangs.pod_ended(p) and self.owners.key(p) == entry.key
            ]
            if pod.uid not in holders
            else []
        )
        return self.book.assign(entry.key, pod.uid, [*live, pod.uid])

    # --- keeping the book current (``following``) ---------------------------------------

    def on_change(self, change: changes.Change) -> None:
        """The state's subscription callback: quick, synchronous, never raises."""
        self.follower.on_change(change)
        if isinstance(change, changes.PodEnded | changes.JobFinished | changes.JobDeleted):
            self.on_freed()

    def housekeeping(self) -> None:
        """Expire idle reservations, release gangs whose pods all ended, forget old clocks."""
        self.follower.housekeeping()
        self.pending.sweep(self._gangs_with_pods)
        self.workloads.keep({e.key for e in self.book.entries()})
        # Fewer GPUs reserved than at the last tick: plans expired or were released (here, or by
        # the writer for a namespace that is gone); a bind moving a rank to bound counts too.
        reserved = sum(self.book.reserved_gpus().values())
        if reserved < self._reserved_at_tick:
            self.on_freed()
        self._reserved_at_tick = reserved
        self._clocks.prune(self.clock())
        cutoff = self.clock() - self.options.event_interval_s
        self._noticed = {k: t for k, t in self._noticed.items() if t > cutoff}

    async def restore(self) -> None:
        """Rebuild the book from FabricPlacement objects and bound pods (after a restart); from
        then on decisions are made."""
        self.path_health.seed()
        await self.follower.restore(self.pending.adopt)
        for pod in self.state.pods.values() if len(self.book) else ():
            key = self.owners.key(pod)
            if not self.workloads.knows(key) and self.book.get(key) is not None:
                self.workloads.remember(key, pod)
        # The first request after ready answers as fast as the hundredth.
        planning.warm(self._session, self.state, self.book.entries(),
                      lambda snap: self._inputs(snap, planning.WARM_KEY), self.options.placement)
        self.ready = True

    def _gangs_with_pods(self) -> set[ids.GangKey]:
        return {self.owners.key(p) for p in self.state.pods.values() if not gangs.pod_ended(p)}

    def _notice(
        self, pod: nodes.PodUsage, key: ids.GangKey, reason: str, message: str, warning: bool
    ) -> None:
        now = self.clock()
        last = self._noticed.get((key, reason))
        if last is not None and now - last < self.options.event_interval_s:
            return
        self._noticed[(key, reason)] = now
        self.events.pod_event(pod, reason, message, warning)

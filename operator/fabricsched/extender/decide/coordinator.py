"""The extender's decisions: filter and prioritize for one pod, and keeping the book current.

Where it sits in the flow: the kube-scheduler sends a pod and the nodes that fit it
(``server``) -> ``Coordinator.filter`` identifies the gang (``gangs``), plans it on the first
pod (``planning`` -> the engine), holds the plan in the book (``reservations``) and writes it
as a FabricPlacement (``placements``) -> every pod of the gang is steered to its rank's node.
A gang above its floor may be held for locality before its plan is reserved (``locality``:
the engine's own decision, as in the simulator). Cluster changes arrive through
the state's subscription and move the book (``following``); a tick expires idle reservations.

Every call runs on the event loop thread, as the cluster state requires.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from fabricsched import gangs, ids
from fabricsched.api.placement import PlacementPhase
from fabricsched.extender.book import following, path_health, pending, reservations, sink, workloads
from fabricsched.extender.decide import (
    admission,
    eligibility,
    locality,
    notices,
    owners,
    planning,
    pod_identity,
    preempting,
    verdicts,
)
from fabricsched.extender.decide.answers import FilterAnswer, Scores
from fabricsched.extender.decide.asking import PodRequest
from fabricsched.placement import patience, request, session
from fabricsched.ports import changes, views
from fabricsched.topology import nodes

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class CoordinatorOptions:
    placement: request.PlacementOptions = field(default_factory=lambda: request.PlacementOptions(
        locality_wait=patience.DEFAULT_LOCALITY_WAIT))
    """The engine's options; ``placement.locality_wait`` is the cluster's default wait for
    locality (``fabricsched run --locality-wait``), which a gang's annotations override."""
    event_interval_s: float = 60.0
    """At most one Event per gang and reason in this many seconds (the scheduler retries often)."""
    save_timeout_s: float = 2.0
    """How long a new plan's filter call waits for its FabricPlacement to be written."""
    max_reserved_gpus_per_namespace: int = 0
    """Most GPUs one namespace's gangs may hold reserved but unbound (0: no limit)."""


@dataclass(frozen=True)
class Parts:
    """The parts the decisions work with, built by the composition root (``extender.service``)."""

    state: views.StateView
    book: reservations.Book
    writer: sink.PlanSink
    events: sink.EventSink
    owners: owners.OwnerCache
    """The owners that size gangs (JobSets, training jobs, PodGroups, unseen Jobs)."""
    path_health: path_health.PathHealth
    """Running gangs' path health follows the fabric (the book's ``annotate``)."""
    workloads: workloads.Registry
    """Gang -> its workload object (JobSet, PyTorchJob, ...), the target of its path Events."""
    pending: pending.PendingBoard
    """Gangs without a plan yet: a Pending FabricPlacement says why (rate-limited writes)."""
    follower: following.Follower
    """Moves the book with the cluster: binds, ends, Jobs, expiry, restore."""
    session: session.Session
    """The placement session: snapshots, locality floors, running gangs' demands."""
    identity: pod_identity.PodIdentity | None = None
    """Checks that a request's pod exists with its UID (None: every pod is taken as sent)."""
    preempter: preempting.GangPreemption | None = None
    """Preemption's sweep (None: off): its holds, and who preempted whom."""


class Coordinator:
    """Filter and prioritize on top of the book of plans and the cluster state."""

    def __init__(
        self,
        parts: Parts,
        clock: Callable[[], float],
        options: CoordinatorOptions,
        on_freed: Callable[[], None] = lambda: None,
        on_held: Callable[[float], None] = lambda retry_in_s: None,
    ) -> None:
        self.state = parts.state
        self.book = parts.book
        self.writer = parts.writer
        self.events = parts.events
        self.owners = parts.owners
        self.identity = parts.identity
        self.path_health = parts.path_health
        self.workloads = parts.workloads
        self.pending = parts.pending
        self.follower = parts.follower
        self.preempter = parts.preempter
        self.clock = clock
        self.options = options
        self.on_freed = on_freed
        self.on_held = on_held
        """Told the seconds until a held gang's hold ends: the scheduler must retry it then."""
        """Told when the book or the cluster freed capacity (``kube.wakeup``: waiting gangs retry)."""
        self.ready = False
        """Set by ``restore``: before it, no decision is made (a reservation could be lost)."""
        self._reserved_at_tick = 0
        self.notices = notices.Notices(self.events, clock, options.event_interval_s)
        self._session = parts.session
        self._clocks = self._session.clocks
        """When gangs held for locality started waiting (from their pods' creation times)."""

    # --- filter and prioritize ----------------------------------------------------------

    async def filter(self, manifest: Mapping[str, Any], node_names: Sequence[str]) -> FilterAnswer:
        if not self.ready:
            return FilterAnswer([], error="fabricsched is starting: its reservations are not restored yet")
        pod = nodes.PodUsage.from_manifest(manifest)
        if not pod.requests and not pod.claims:
            # No extended resource, no claim: no GPU, whatever the fabric (with DRA fabrics the
            # scheduler sends every pod). Answered before any lookup: pass-through at once.
            return FilterAnswer(list(node_names))
        pod = self.state.counted(pod)
        if self.identity is not None and (unknown := await self.identity.unknown(pod)):
            return FilterAnswer([], failed=verdicts.every(node_names, unknown))  # forged or gone: no decision
        # NodeName is a NewType of str: the names are used as they came, with no per-node copy.
        candidates = cast(Sequence[ids.NodeName], node_names)
        asked = await self._ask(pod, candidates, manifest)
        if asked is None:
            return FilterAnswer(list(node_names))  # no GPU, or no fabric here: the scheduler decides alone
        gang = asked.gang
        if isinstance(gang, gangs.Unsized):
            return self.notices.unresolved(pod, asked.key, gang.reason, node_names)
        entry = asked.entry
        if entry is not None and entry.gpus_per_pod != gang.gpus_per_pod:
            mixed = admission.mixed_gpus(gang, entry.gpus_per_pod)
            return self.notices.unresolved(pod, gang.key, mixed, node_names)
        if entry is None or entry.phase == PlacementPhase.EXPIRED:
            refused = admission.refusal(
                # Newest first: a gang asking to be planned was just created, so its pods are
                # found among the last ones seen rather than after every older pod.
                gang, pod, entry, list(self.state.pods_in(pod.namespace).values())[::-1], self.book.entries(),
                self.options.max_reserved_gpus_per_namespace, self.owners.key, asked.gpu_resource,
            )
            if isinstance(refused, admission.Mixed):
                return self.notices.unresolved(pod, gang.key, refused.reason, node_names)
            if refused:
                return FilterAnswer([], failed=verdicts.every(node_names, refused))
        if entry is None:
            made = self._plan(asked, gang)
            if isinstance(made, FilterAnswer):
                return made
            entry = made
            if entry.size > 1:
                # Other ranks are held by this plan alone until their pods bind: its object is
                # created now, not after the coalescing delay, but the answer does not wait for
                # it (the scheduler's one loop would). A single pod's plan is used by this very
                # answer (the bind holds the node): its object follows in the background.
                self.writer.save_soon(entry.key, self.options.save_timeout_s)
        return self._steer(asked, gang, entry)

    def _steer(self, asked: PodRequest, gang: gangs.GangIdentity, entry: reservations.Entry) -> FilterAnswer:
        """The answer for a pod of a planned gang: its rank's node, planned again if it must move."""
        pod, candidates, snapshot = asked.pod, asked.candidates, asked.snapshot
        rank = gang.rank if gang.rank is not None else self._assign(entry, pod)
        if rank is None:
            reason = f"all {entry.size} ranks of gang {entry.display} are taken by other pods"
            return FilterAnswer([], failed=verdicts.every(candidates, reason))
        if rank in entry.bound:
            # The pod asking is unbound, so another live pod holds this rank: a duplicated rank
            # (or a replacement whose predecessor still terminates). Nothing to plan again.
            return FilterAnswer([], failed=verdicts.every(candidates, verdicts.rank_taken(entry, rank)))
        target = entry.ranks[rank]
        if entry.preemption and entry.preemption.cleared_at is None and target and target not in candidates:
            # Its cleared domain is its own: it waits there for the victims (an expired hold: anywhere).
            why = f"gang {entry.display} waits for the workloads it preempted on {target} to terminate"
            return FilterAnswer([], failed=verdicts.every(candidates, why))
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
        if not pod.requests and not pod.claims:
            return Scores(node_names, None)  # no GPU: nothing planned for it
        known = self.identity is None or self.identity.known(pod)
        return Scores(node_names, self._target(pod) if known else None)

    async def _ask(
        self, pod: nodes.PodUsage, candidates: Sequence[ids.NodeName], manifest: Mapping[str, Any]
    ) -> PodRequest | None:
        """The request, computed once: the pod's gang, its plan, fabric, snapshot and GPU
        resource. None when fabricsched does not steer the pod (no GPU, or no fabric here)."""
        key = self.owners.key(pod)
        known = self.book.get(key)
        # A planned gang stays in its fabric; a new one goes to the fabric holding most candidates.
        topology = known.topology if known is not None else self.state.topology_holding_most(candidates)
        snapshot = self.state.snapshot(topology) if topology is not None else None
        resource = snapshot.spec.gpu_resource if snapshot is not None else gangs.DEFAULT_GPU_RESOURCE
        if pod.uncounted:  # DRA claims whose GPUs cannot be counted: refused, never 0 GPUs
            return PodRequest(pod, candidates, key, gangs.Unsized(gangs.SourceKind.POD, pod.uncounted),
                              known, snapshot, resource, locality.created_at(manifest))
        if pod.gpus(resource) <= 0:
            return None
        # The owner that sizes the gang (a JobSet, a Job whose watch event trails its pods) is
        # read once, bounded in time; until it is known the pod waits, named in its reason.
        await self.owners.prepare(pod)
        gang = gangs.identify(pod, self.owners.view(resource), resource)
        if isinstance(gang, gangs.NotOurs):  # pragma: no cover - its GPUs were counted above
            return None
        if snapshot is None and not isinstance(gang, gangs.Unsized):
            # None of these nodes is in a fabric: nothing to steer, the scheduler decides alone.
            return None
        entry = known if isinstance(gang, gangs.Unsized) or gang.key == key else self.book.get(gang.key)
        return PodRequest(pod, candidates, key, gang, entry, snapshot, resource,
                          locality.created_at(manifest), eligibility.of(manifest))

    def _target(self, pod: nodes.PodUsage) -> ids.NodeName | None:
        entry = self.book.get(self.owners.key(pod))
        if entry is None:
            return None
        rank = self.owners.membership(pod, entry.gpu_resource)[1]
        if rank is None:
            rank = entry.pod_ranks.get(pod.uid)
        return entry.ranks[rank] if rank is not None and rank < entry.size else None

    # --- planning -----------------------------------------------------------------------

    def _inputs(
        self,
        snapshot: views.SnapshotView,
        exclude: ids.GangKey,
        keep: Sequence[ids.NodeName] = (),
        gpus_per_pod: int = 0,
    ) -> planning.Inputs:
        return planning.inputs(self._session, self.book, snapshot, exclude, keep, gpus_per_pod)

    def _plan(self, asked: PodRequest, gang: gangs.GangIdentity) -> reservations.Entry | FilterAnswer:
        pod, snapshot, candidates, created = asked.pod, asked.snapshot, asked.candidates, asked.created
        inputs = self._inputs(snapshot, gang.key)
        bound = self.follower.bound_ranks(gang.key, gang.namespace, gang.size, asked.gpu_resource)
        lost = 0 < len(bound) < gang.size
        fresh: reservations.Entry | request.NoFit
        if lost:
            # Its plan was lost with pods bound: the others go near them, with no locality wait.
            fresh = planning.around(inputs, gang, snapshot.name, bound, candidates, self.options.placement)
        else:
            # The scheduler's names as they came: the engine masks its hosts with them (no filtering here).
            made = planning.plan(inputs, gang, candidates, self.options.placement,
                                 self.follower.released.previous(gang.key, snapshot.name, self.clock()))
            if isinstance(made, request.NoFit):
                self._clocks.lost_fit(gang.key, self.clock())  # a new plan starts a new hold
            held = made if isinstance(made, request.NoFit) else self._hold(asked, gang, made, inputs)
            if isinstance(held, FilterAnswer):
                return held
            fresh = held if isinstance(held, request.NoFit) else planning.new_entry(
                gang, snapshot.name, snapshot.fabric, held, asked.gpu_resource)
        if isinstance(fresh, request.NoFit):
            self.pending.no_fit(gang, snapshot.name, fresh)
            return self.notices.no_fit(
                pod, gang.key, gang.display, gang.tier, gang.required, fresh, candidates)
        entry = self.book.reserve(self.preempter.carry(fresh, pod) if self.preempter else fresh, self.clock())
        if lost:
            self.follower.track(entry)  # its bound ranks, from the pods
            entry = self.book.get(entry.key) or entry
        self.writer.submit(entry)
        self.workloads.remember(entry.key, self.owners.workload_of(pod, asked.gpu_resource))
        self.pending.planned(entry, created)
        summary = "; ".join(entry.reasons) or "planned"
        if entry.degraded_path:
            self.notices.pod(
                pod,
                entry.key,
                "FabricDegradedPath",
                f"gang {entry.display} placed on a degraded path (comm slowdown "
                f"{entry.comm_slowdown:.2f}): no healthy placement exists now; {summary}",
                True,
            )
        else:
            self.notices.pod(pod, entry.key, "FabricPlanned", f"gang {entry.display}: {summary}", False)
        return entry

    def _hold(
        self, asked: PodRequest, gang: gangs.GangIdentity, made: request.Plan, inputs: planning.Inputs
    ) -> request.Plan | FilterAnswer:
        """The plan to reserve, or the answer that holds the gang for a plan near its floor.

        A held gang reserves nothing, so other gangs backfill around it. Every candidate fails (not
        unresolvable): the scheduler asks again on events, wake-ups, and after 5 minutes at the latest.
        """
        pod, fab = asked.pod, inputs.fabric
        wanted = locality.settings(pod.annotations, self.options.placement.locality_wait)
        problems = wanted.problems
        if asked.constraints is None and wanted.wait.enabled:  # its floor would be a guess
            problems = (*problems, "its node selector or affinity is unreadable")
        if problems:
            self.notices.pod(pod, gang.key, "FabricLocalityWaitInvalid",
                             f"gang {gang.display} does not wait for locality: {'; '.join(problems)}", True)
        if not wanted.wait.enabled or asked.constraints is None:
            return made
        eligible = asked.constraints.eligible(fab.hosts, self.state.nodes)
        held = self._clocks.waited(gang.key, self.clock())  # from the hold, as the simulator
        lower = lambda: locality.lower_priority_pending(self.state.unbound_pods.values(), pod)  # noqa: E731
        decision = locality.decide(
            self._session, fab, gang, made, held, wanted.wait, inputs.free, eligible, lower)
        if isinstance(decision, patience.Wait):
            message = f"gang {gang.display} is {decision.reason}"
            why = pending.message_of(gang, decision.reason)
            self.pending.wait(gang, asked.snapshot.name, pending.HELD_FOR_LOCALITY, why)
            self.notices.pod(pod, gang.key, "FabricWaitingForLocality", message, False)
            self.on_held(decision.retry_in_s)
            return FilterAnswer([], failed=verdicts.every(asked.candidates, message))
        self._clocks.forget(gang.key)
        if decision.reason is None:
            return made
        return dataclasses.replace(made, reasons=(*made.reasons, decision.reason))

    def _replan(
        self,
        entry: reservations.Entry,
        snapshot: views.SnapshotView,
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
            return self.notices.no_fit(
                pod, entry.key, entry.display, entry.tier, entry.required, moved, candidates)
        return self._commit(entry, moving, moved)

    def _move_off(
        self,
        entry: reservations.Entry,
        rank: int,
        target: ids.NodeName,
        snapshot: views.SnapshotView,
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

    def _assign(self, entry: reservations.Entry, pod: nodes.PodUsage) -> int | None:
        # Only pods holding one of the gang's ranks matter (whether they still live frees their
        # rank or not): with none yet no pod is read, else the UID test comes first, so the gang
        # key is computed for those alone (at 1,500 pods every key was 8 ms of a single pod's call).
        holders = entry.pod_ranks
        live = (
            [
                p.uid
                for p in self.state.pods_in(pod.namespace).values()
                if p.uid in holders and not gangs.pod_ended(p) and self.owners.key(p) == entry.key
            ]
            if holders and pod.uid not in holders
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
        if self.preempter is not None:
            self.preempter.clear()
        self.pending.sweep(self._gangs_with_pods)
        self.workloads.keep({e.key for e in self.book.entries()})
        # Fewer GPUs reserved than at the last tick: plans expired or were released (here, or by
        # the writer for a namespace that is gone); a bind moving a rank to bound counts too.
        reserved = sum(self.book.reserved_gpus().values())
        if reserved < self._reserved_at_tick:
            self.on_freed()
        self._reserved_at_tick = reserved
        self._clocks.prune(self.clock())
        self.notices.prune()

    def restore(self, stored: Iterable[reservations.Entry]) -> None:
        """Rebuild the book from the stored plans (the FabricPlacement objects, read by the
        composition root) and the bound pods (after a restart); from then on decisions are made."""
        self.path_health.seed()
        stored = list(stored)
        if self.preempter is not None:
            self.preempter.restore(stored)
        self.follower.restore(stored, self.pending.adopt)
        for pod in self.state.pods.values() if len(self.book) else ():
            key = self.owners.key(pod)
            if not self.workloads.knows(key) and (entry := self.book.get(key)) is not None:
                self.workloads.remember(key, self.owners.workload_of(pod, entry.gpu_resource))
        # The first request after ready answers as fast as the hundredth.
        planning.warm(self._session, self.state, self.book.entries(),
                      lambda snap: self._inputs(snap, planning.WARM_KEY), self.options.placement)
        self.ready = True

    def _gangs_with_pods(self) -> set[ids.GangKey]:
        return {self.owners.key(p) for p in self.state.pods.values() if not gangs.pod_ended(p)}

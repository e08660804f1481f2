"""Topology-aware gang preemption, the extender's half (docs/preemption.md).

A gang that fits nowhere on a full fabric never reaches ``/filter``: the kube-scheduler's own
filters find no node for its pods and stop before the extender. So preemption is a sweep of
the cluster state (``GangPreemption.run``, every ``interval_s`` on the leader): a gang whose
pods all exist, none bound, with no plan in the book, and for which the engine finds no plan on
the whole fabric, is given one by

1. "reservations yield first" (``placement.preemption.yielding``): unbound lower-priority
   reservations are released, nothing is evicted; else
2. ``placement.preemption.choose`` on a snapshot of every GPU workload on the fabric's hosts
   (whole gangs by ``gangs.key_of``, lone pods), with PodDisruptionBudgets, Kueue and the
   namespace opt-out as the engine's flags (``budgets``).

Either way the preemptor's plan is reserved and written at once, with ``status.preemption``
(the victims' pod UIDs): the book holds the victims' GPUs as they free and its expiry clock
starts only once the last of them is gone (``clear``), or their longest grace period and a
margin have passed (``preempted.TERMINATION_MARGIN_S``); a restart or a new leader resumes from
the object, so there is never a second round. Then the victims' plans are released (reason
Preempted, the preemptor named on their objects), their pods evicted through the Eviction API
(a refusal, such as a 429 from a budget, stops the round: what was evicted stays evicted and
the preemptor plans again from the new state) and Events say who preempted whom.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from fabricsched import gangs, ids, parsing
from fabricsched.api import schedconfig
from fabricsched.api.placement import PlacementPhase
from fabricsched.extender.book import following, pending, preempted, reservations, sink, workloads
from fabricsched.extender.decide import admission, budgets, laps, owners, planning, running
from fabricsched.extender.decide.preemption_options import PreemptionCalls, PreemptionOptions
from fabricsched.placement import preemption, request, session, snapshot
from fabricsched.ports import errors, views
from fabricsched.topology import nodes

logger = logging.getLogger(__name__)

MAX_REMEMBERED = 10_000
"""Victim gangs whose preemptor is remembered for their next plan (oldest forgotten first)."""
PREEMPTED = "Preempted"
"""The reason on a victim's plan, pods and workload."""
SAVE_TIMEOUT_S = 5.0
"""How long a round waits for its preemptor's FabricPlacement before evicting anything."""
_ABOVE_ALL = 2**63
"""A priority above every workload's: ``warm`` builds every candidate."""


class GangPreemption:
    """The sweep that finds gangs to preempt for, and runs their rounds (one at a time)."""

    def __init__(
        self,
        state: views.StateView,
        book: reservations.Book,
        follower: following.Follower,
        writer: sink.PlanSink,
        events: sink.EventSink,
        owner_cache: owners.OwnerCache,
        board: pending.PendingBoard,
        registry: workloads.Registry,
        calls: PreemptionCalls,
        placing: session.Session,
        clock: Callable[[], float],
        options: PreemptionOptions,
        leading: Callable[[], bool] = lambda: True,
        on_round: Callable[[int, float], None] = lambda victims, lost: None,
        on_planned: Callable[[], None] = lambda: None,
    ) -> None:
        self.state, self.book, self.follower, self.writer = state, book, follower, writer
        self.events, self.owners, self.board, self.registry = events, owner_cache, board, registry
        self.calls, self.session, self.clock, self.options = calls, placing, clock, options
        self.leading, self.on_round = leading, on_round
        """Told (victims evicted, GPU-seconds of progress lost) after every eviction round (metrics)."""
        self.on_planned = on_planned
        """Told when reservations yielded: no cluster event makes the kube-scheduler retry the
        preemptor's pods it refused (``kube.wakeup``)."""
        self.remembered: dict[ids.GangKey, preempted.PreemptedRecord] = {}
        """Victim gang -> who preempted it (bounded by ``MAX_REMEMBERED``, oldest forgotten)."""
        self.decided_s = 0.0
        """How long the last round's decision took (from the fit check to the choice; logged)."""
        self.laps = laps.Laps()
        """Where ``decided_s`` went (the log line's ms)."""
        self.waited_s = 0.0
        """Of ``decided_s``, the time ``calls`` spent in API reads of budgets and namespaces:
        none while their watches are current, an API read per namespace otherwise. Counted by
        the calls, not around them: a read from memory that the OS paused is no API wait."""
        self._started: list[float] = []
        """When the rounds of the last minute started (the rate limit)."""
        self.running = running.RunningIndex(owner_cache)
        self._warmed_at = -1
        """The state's ``placed_pods_version`` the index was last made for ahead of a decision."""
        self._frozen_at = 0
        """``running.whole_builds`` when the index was last taken out of the collector's sight."""

    # --- the sweep --------------------------------------------------------------------

    async def run(self, ready: Callable[[], bool]) -> None:
        while True:
            await asyncio.sleep(self.options.interval_s)
            if not (ready() and self.options.enabled and self.leading()):
                continue
            try:
                await self.sweep()
                await self.warm()
            except Exception:  # a defect must not stop the sweep
                logger.exception("preemption sweep failed")

    async def warm(self) -> None:
        """The running workloads indexed ahead of the next decision, in slices that hand the loop
        back, whenever a pod on a node changed (at 5,000 nodes a decision that built them paid
        up to a second for 30,000 keys and 25,000 candidates, tens of ms for the pass alone)."""
        for name in sorted(self.state.topologies):
            snap = self.state.snapshot(name)
            if snap is not None:
                version = self.state.placed_pods_version
                if version == self._warmed_at:
                    return
                held = await self.running.warm(self.state.pods, snap.fabric.hosts, snap.spec.gpu_resource,
                                               version, changed=self.state.placed_pods_since)
                if held and version == self.state.placed_pods_version:  # else: at the next tick
                    await self._running(snap, _ABOVE_ALL)
                    self.running.kept()
                    self._warmed_at = version
                    self._freeze_whole_index()
                return

    def _freeze_whole_index(self) -> None:
        """An index made whole is long-lived, like the initial listings (``controller.handlers``):
        out of the cyclic collector's sight, no later full collection walks its tens of
        thousands of objects again (at 5,000 nodes such a walk, 120 ms, fell in the first decision)."""
        if self.running.whole_builds != self._frozen_at:
            self._frozen_at = self.running.whole_builds
            gc.freeze()

    async def sweep(self) -> None:
        """One pass: every waiting gang, highest priority first, at most one round each."""
        for pod in self._waiting_pods():
            now = self.clock()
            self._started = [t for t in self._started if now - t < 60.0]
            if len(self._started) >= self.options.rounds_per_minute:
                return
            if await self._consider(pod):
                self._started.append(now)
            # Each gang costs an engine run over the fabric: hand the loop back between them, so a
            # /filter call waits for one gang's check, not for the whole sweep.
            await asyncio.sleep(0)

    def _waiting_pods(self) -> list[nodes.PodUsage]:
        """One unbound pod per gang without a plan, highest priority first."""
        seen: set[ids.GangKey] = set()
        out = []
        for pod in self.state.unbound_pods.values():
            if pod.node is not None or gangs.pod_ended(pod) or pod.terminating or pod.gated:
                continue  # a gated pod is not looked at by the scheduler yet: nothing to clear room for
            if pod.scheduler_name != schedconfig.SCHEDULER_NAME or not pod.asks_gpus():
                continue
            key = self.owners.key(pod)
            if key in seen or self.book.get(key) is not None:
                continue
            seen.add(key)
            out.append(pod)
        return sorted(out, key=lambda p: -p.priority)

    async def _consider(self, pod: nodes.PodUsage) -> bool:
        """Yield or preempt for ``pod``'s gang when it fits nowhere; True when a round ran."""
        for name in sorted(self.state.topologies):
            snap = self.state.snapshot(name)
            if snap is None or pod.gpus(snap.spec.gpu_resource) <= 0:
                continue
            resource = snap.spec.gpu_resource
            await self.owners.prepare(pod)
            gang = gangs.identify(pod, self.owners.view(resource), resource)
            if not isinstance(gang, gangs.GangIdentity) or self.book.get(gang.key) is not None:
                return False
            if self._refused(gang, pod, resource):
                return False
            return await self._for_gang(pod, gang, snap)
        return False

    def _refused(self, gang: gangs.GangIdentity, pod: nodes.PodUsage, resource: str) -> bool:
        pods = list(self.state.pods_in(pod.namespace).values())
        return admission.refusal(gang, pod, None, pods, (), 0, self.owners.key, resource) is not None

    async def _for_gang(
        self, pod: nodes.PodUsage, gang: gangs.GangIdentity, snap: views.SnapshotView
    ) -> bool:
        started, self.waited_s, self.laps = time.perf_counter(), 0.0, laps.Laps()
        waited_from = self.calls.api_waited_s
        inputs = planning.inputs(self.session, self.book, snap, gang.key)
        ask = planning.gang_request(gang, snap.fabric)
        if isinstance(ask, request.NoFit):
            return False
        fit = inputs.place(ask, self.options.placement, list(snap.fabric.hosts))
        if isinstance(fit, request.Plan):
            return False  # it fits: the scheduler places it (preemption never improves a placement)
        self.laps.lap("fit check")
        priority, policy = self._rank(pod)
        preemptor = preemption.Preemptor(ask, priority, policy)
        options = preemption.Options(self.options.placement, self.options.evict_kueue)
        own = await self._opted_out(pod.namespace)
        free = inputs.free()
        if not own:
            held = self._reservations(snap.name, gang.key)
            gave = preemption.yielding(self._snapshot(inputs), free, held, preemptor, inputs.traffic, options,
                                       known=fit)
            if isinstance(gave, preemption.Choice):
                self.decided_s = time.perf_counter() - started
                self.waited_s = self.calls.api_waited_s - waited_from
                self._yield(pod, gang, snap, gave, priority)
                return True
        self.laps.lap("yield")
        running = await self._running(snap, preemptor.priority)
        self.laps.lap("workloads")
        chosen: preemption.Choice | preemption.NoVictims
        if own:
            chosen = preemption.NoVictims(f"namespace {pod.namespace} opts out of preemption",
                                          preemption.Why.NEVER)
        else:
            chosen = preemption.choose(self._snapshot(inputs), free, [c.workload for c in running], preemptor,
                                       self.clock(), inputs.traffic, options, kept=self.running.kept(),
                                       known=fit)
        if isinstance(chosen, preemption.NoVictims):
            if chosen.why not in (preemption.Why.FITS, preemption.Why.UNRESOLVABLE):
                self.board.wait(gang, snap.name, "PreemptionBlocked",
                                pending.message_of(gang, f"no plan, and no preemption: {chosen.reason}"))
            return False
        self.decided_s = time.perf_counter() - started
        self.waited_s = self.calls.api_waited_s - waited_from
        self.laps.lap("choice")
        chosen_keys = {v.key for v in chosen.victims}
        await self._evict(pod, gang, snap, chosen, priority,
                          {c.workload.key: c.pods for c in running if c.workload.key in chosen_keys})
        return True

    @staticmethod
    def _snapshot(inputs: planning.Inputs) -> snapshot.Snapshot:
        return inputs.session.snapshot(inputs.fabric, owner=inputs.snapshot.name)

    def _rank(self, pod: nodes.PodUsage) -> tuple[int, preemption.PreemptionPolicy]:
        """The gang's priority and policy: its PodGroup's when it sets them, else its pods'."""
        priority, policy = pod.priority, pod.preemption_policy
        if pod.pod_group:
            try:
                facts = self.owners.view().pod_group(pod.namespace, pod.pod_group)
            except parsing.Invalid:
                facts = None
            if facts is not None:
                priority = facts.priority if facts.priority is not None else priority
                policy = facts.preemption_policy or policy
        return priority, preemption.PreemptionPolicy(policy)

    async def _opted_out(self, namespace: str) -> bool:
        try:
            return budgets.opted_out(await self.calls.namespace_labels(namespace))
        except errors.ApiError as e:
            logger.warning("cannot read namespace %s (taken as opted out of preemption): %s", namespace, e)
            return True

    # --- what runs, and what is reserved -------------------------------------------------

    def _reservations(self, topology: ids.TopologyName, exclude: ids.GangKey) -> list[preemption.Reservation]:
        return [
            preemption.Reservation(e.key, e.priority, tuple((n, e.gpus_per_pod) for _, n in e.held()),
                                   bound=bool(e.bound))
            for e in self.book.entries()
            if e.key != exclude and e.topology == topology and e.phase == PlacementPhase.RESERVED
            and e.preemption is None
        ]

    async def _running(self, snap: views.SnapshotView, below: int) -> list[running.Candidate]:
        """Every GPU workload on the fabric's hosts of priority below ``below``, whole
        (``gangs.key_of``: a gang with one pod at or above it is left out), with its flags."""
        resource = snap.spec.gpu_resource
        version = self.state.placed_pods_version
        groups = self.running.groups(self.state.pods, snap.fabric.hosts, resource, version,
                                     self.state.placed_pods_since)
        patterns = {e.key: e.pattern for e in self.book.entries()}
        return await self.running.candidates(groups, below, self._namespace, patterns, snap.fabric, resource)

    async def _namespace(self, namespace: str) -> tuple[Sequence[budgets.Budget], bool]:
        """(its budgets, opted out); an unreadable namespace protects its workloads."""
        try:
            listed = await self.calls.budgets(namespace)
        except errors.ApiError as e:
            logger.warning("cannot read the PodDisruptionBudgets of %s (its workloads are protected): %s",
                           namespace, e)
            return (), True
        return listed, await self._opted_out(namespace)

    # --- a round ---------------------------------------------------------------------------

    def _domain(self, snap: views.SnapshotView, choice: preemption.Choice) -> str:
        tier, name = choice.domain
        tiers = snap.fabric.tiers
        return f"{tiers[tier].name}/{name}" if tier < len(tiers) else "fabric"

    def _reserve(self, pod: nodes.PodUsage, gang: gangs.GangIdentity, snap: views.SnapshotView,
                 choice: preemption.Choice, priority: int, hold: preempted.PreemptionHold | None,
                 reason: str) -> reservations.Entry:
        """The preemptor's plan, reserved and written at once (before any eviction)."""
        fresh = planning.new_entry(gang, snap.name, snap.fabric, choice.plan, snap.spec.gpu_resource)
        fresh = dataclasses.replace(fresh, priority=priority, preemption=hold,
                                    reasons=(*fresh.reasons, reason))
        entry = self.book.reserve(fresh, self.clock())
        self.writer.submit(entry)
        self.registry.remember(entry.key, self.owners.workload_of(pod, snap.spec.gpu_resource))
        self.board.planned(entry, None)
        return entry

    def _yield(self, pod: nodes.PodUsage, gang: gangs.GangIdentity, snap: views.SnapshotView,
               choice: preemption.Choice, priority: int) -> None:
        names = []
        for victim in choice.victims:
            entry = self.book.get(victim.key)
            if entry is not None:
                names.append(entry.display)
                self.follower.release(victim.key, f"reservation yielded to gang {gang.display} (priority "
                                      f"{priority} > {victim.priority}); it plans again")
        reason = (f"reservations of {', '.join(names)} (highest priority {choice.highest_priority}) yielded "
                  f"in {self._domain(snap, choice)}; nothing evicted")
        entry = self._reserve(pod, gang, snap, choice, priority, None, reason)
        if entry.size > 1:
            self.writer.save_soon(entry.key, SAVE_TIMEOUT_S)
        self.on_planned()
        self.events.pod_event(pod, "FabricReservationsYielded", f"gang {gang.display}: {reason}", False)
        logger.info("gang %s (priority %d) %s (decided in %.1f ms, %.1f of them waiting for the API; %s)",
                    gang.display, priority, reason, self.decided_s * 1000, self.waited_s * 1000,
                    self.laps.text())

    async def _evict(self, pod: nodes.PodUsage, gang: gangs.GangIdentity, snap: views.SnapshotView,
                     choice: preemption.Choice, priority: int,
                     pods_of: Mapping[ids.GangKey, list[nodes.PodUsage]]) -> None:
        domain, now = self._domain(snap, choice), self.clock()
        victims = tuple(
            preempted.EvictedWorkload(v.key, pods_of[v.key][0].namespace, self._name(v.key, pods_of[v.key]),
                                      v.priority, v.gpus, tuple(p.uid for p in pods_of[v.key]))
            for v in choice.victims
        )
        grace = max((p.grace_s for v in choice.victims for p in pods_of[v.key]), default=0)
        hold = preempted.PreemptionHold(victims, domain, now, grace_s=grace)
        plural = "s" if len(victims) != 1 else ""
        reason = (f"preempts {len(victims)} workload{plural} ({choice.gpus_evicted} GPUs, priority <= "
                  f"{choice.highest_priority}) to clear {domain}")
        entry = self._reserve(pod, gang, snap, choice, priority, hold, reason)
        if not await self.writer.save_whole(entry.key, SAVE_TIMEOUT_S):
            # Evicting with no durable record would let a restart start a second round.
            self.follower.release(entry.key, "its FabricPlacement could not be written: nothing evicted")
            return
        self.events.pod_event(pod, "FabricPreempting", f"gang {gang.display}: {reason}", False)
        record = preempted.PreemptedRecord(gang.display, priority, domain, now)
        evicted = 0
        for victim in victims:
            done = await self._evict_pods(pods_of[victim.key], record)
            if done:  # a victim whose eviction was refused outright keeps its placement
                self._release_victim(victim, record)
            evicted += done == len(victim.pod_uids)
            if done < len(victim.pod_uids):
                # A refusal (a budget's 429, a failure) ends the round: what was evicted stays
                # evicted; the preemptor plans again on the new state, as a new round.
                self.follower.release(entry.key, f"eviction of {victim.namespace}/{victim.name} refused: "
                                      "plans again")
                break
        self.on_round(evicted, choice.progress_lost_gpu_s)
        logger.info("gang %s (priority %d) %s (decided in %.1f ms, %.1f of them waiting for the API; %s)",
                    gang.display, priority, reason, self.decided_s * 1000, self.waited_s * 1000,
                    self.laps.text())

    def _name(self, key: ids.GangKey, pods: Sequence[nodes.PodUsage]) -> str:
        entry = self.book.get(key)
        return entry.name if entry is not None else key.split("/", 1)[-1].split("@", 1)[0] or pods[0].name

    def _release_victim(self, victim: preempted.EvictedWorkload, record: preempted.PreemptedRecord) -> None:
        entry = self.book.get(victim.key)
        if entry is not None:
            # Put with the record first so the Released object names the preemptor (explain reads it).
            self.book.put(dataclasses.replace(entry, preempted_by=record))
            self.follower.release(victim.key, f"{PREEMPTED}: {record.sentence()}")
        self._remember(victim.key, record)

    def _remember(self, key: ids.GangKey, record: preempted.PreemptedRecord) -> None:
        self.remembered.pop(key, None)
        self.remembered[key] = record
        while len(self.remembered) > MAX_REMEMBERED:
            del self.remembered[next(iter(self.remembered))]

    async def _evict_pods(self, pods: Sequence[nodes.PodUsage], record: preempted.PreemptedRecord) -> int:
        message = f"{record.sentence()}"
        done = 0
        for pod in pods:
            try:
                await self.calls.evict(pod.namespace, pod.name, pod.uid)
            except errors.ApiError as e:
                logger.warning("eviction of pod %s/%s refused: %s", pod.namespace, pod.name, e)
                return done
            done += 1
            self.events.pod_event(pod, PREEMPTED, message, True)
        workload = self.owners.workload_of(pods[0], gangs.DEFAULT_GPU_RESOURCE) if pods else None
        if workload is not None:
            self.events.object_event(workload, PREEMPTED, message, True)
        return done

    # --- the hold ----------------------------------------------------------------------------

    def clear(self) -> None:
        """Housekeeping: a preemptor whose victims' pods are all gone starts its expiry clock."""
        holding = [e for e in self.book.entries()
                   if e.preemption is not None and e.preemption.cleared_at is None]
        if not holding:
            return
        # A victim holds its GPUs until its containers stop, not from its deletion: evicted, it
        # is terminating at once and runs through its grace period (``gangs.pod_ended``, which
        # frees a rank at deletion, would start the clock right after the eviction).
        holders = {p.uid for p in self.state.pods.values() if p.active}
        now = self.clock()
        for entry in holding:
            assert entry.preemption is not None
            if not entry.preemption.pod_uids & holders and (kept := self.book.clear_hold(entry.key, now)):
                self.writer.submit(kept)

    def carry(self, entry: reservations.Entry, pod: nodes.PodUsage) -> reservations.Entry:
        """A new plan with its gang's priority; a victim's keeps who preempted it (for explain)."""
        record = self.remembered.get(entry.key)
        return dataclasses.replace(entry, priority=self._rank(pod)[0],
                                   preempted_by=record if record is not None else entry.preempted_by)

    def restore(self, stored: Iterable[reservations.Entry]) -> None:
        """Who preempted whom, from the stored objects (Released ones included)."""
        for entry in stored:
            if entry.preempted_by is not None:
                self._remember(entry.key, entry.preempted_by)

"""Keeping the book of plans current with the cluster: the coordinator's other half.

Where it sits in the flow: the cluster state's subscription (``ports.changes.Change``) ->
``Follower.on_change`` -> a bound pod marks its rank bound, an ended pod frees it, a finished
or deleted Job releases its gang's plan -> every changed entry is submitted to the
FabricPlacement writer. ``housekeeping`` (every second) expires idle reservations and releases
gangs without a Job once all their pods ended (told by the pods' ends, and checked again every
``SWEEP_S`` for each such gang, so a missed event cannot keep GPUs reserved); ``restore``
rebuilds the book after a restart.

Every call runs on the event loop thread, as the cluster state requires.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable

from fabricsched import gangs, ids
from fabricsched.api.placement import PlacementPhase
from fabricsched.extender.book import path_health as path_health_module
from fabricsched.extender.book import released as released_module
from fabricsched.extender.book import reservations, sink
from fabricsched.ports import changes, jobs, views
from fabricsched.topology import nodes

logger = logging.getLogger(__name__)

RankOf = Callable[[nodes.PodUsage, str], int | None]
"""(pod, GPU resource of its gang's fabric) -> the pod's own rank, or None (the book assigns one)."""

SWEEP_S = 10.0
"""How often every gang without a Job is checked for a pod left, whatever pod event was
missed: such a gang has nothing else (no Job's end) to release it."""


class Follower:
    """Moves the book as pods bind and end and Jobs finish."""

    def __init__(
        self,
        state: views.StateView,
        book: reservations.Book,
        writer: sink.PlanSink,
        clock: Callable[[], float],
        key: Callable[[nodes.PodUsage], ids.GangKey],
        rank: RankOf,
        path_health: path_health_module.PathHealth | None = None,
        released: released_module.Releases | None = None,
    ) -> None:
        self.key = key
        """The process's one key function (``gangs.key_of`` over the owners the extender read)."""
        self.rank = rank
        """A member pod's own rank (``gangs.membership``), given its gang's GPU resource."""
        self.state = state
        self.path_health = path_health
        self.released = released if released is not None else released_module.Releases()
        """Where released gangs ran, for a while: a group restarted as a whole goes back there."""
        self.book = book
        self.writer = writer
        self.clock = clock
        self._bound: dict[ids.GangKey, dict[str, tuple[int | None, ids.NodeName]]] = {}
        """Live bound pods of gangs in the book: pod UID -> (own rank, node)."""
        self._ended_check: set[ids.GangKey] = set()
        """Gangs without a Job that lost a pod: released at the next housekeeping if none is left."""
        self._next_sweep = clock() + SWEEP_S
        self._swept: set[ids.GangKey] = set()
        """Gangs without a Job at the last sweep: checked at the next one (a plan is at least a
        sweep old, so a pod the watch has not delivered yet is never taken for a gone one)."""

    def on_change(self, change: changes.Change) -> None:
        """The state's subscription callback: quick, synchronous, never raises."""
        match change:
            case changes.PodBound(pod=pod):
                self._pod_changed(pod, ended=not pod.active)
            case changes.PodEnded(pod=pod, deleted=deleted):
                self._pod_changed(pod, ended=not pod.active or deleted)
            case changes.JobFinished(job=job) | changes.JobDeleted(job=job):
                self._job_ended(job)
            case changes.HealthChanged(topology=topology, change=moved):
                # Plans read health from the next snapshot; running gangs follow it here.
                if self.path_health is not None:
                    self.path_health.on_health(topology, moved, self.book, self.writer)
            case changes.TopologyChanged():
                pass  # read from the next snapshot when a gang is planned

    def _job_ended(self, job: jobs.JobInfo) -> None:
        if not (job.finished or job.deleted):
            return
        verb = "finished" if job.finished and not job.deleted else "deleted"
        for entry in self.book.entries():
            if entry.namespace == job.namespace and entry.job_uid and entry.job_uid == job.uid:
                self.release(entry.key, f"Job {job.namespace}/{job.name} {verb}")

    def _pod_changed(self, pod: nodes.PodUsage, ended: bool) -> None:
        if not len(self.book):
            return  # no plans (as while the initial listings arrive): no gang to follow
        key = self.key(pod)
        entry = self.book.get(key)
        if entry is None:
            return
        members = self._bound.setdefault(key, {})
        if ended or pod.node is None:
            members.pop(pod.uid, None)
            if not entry.job_name:
                self._ended_check.add(key)  # a gang with a Job is released by the Job's end
        else:
            members[pod.uid] = (self.rank(pod, entry.gpu_resource), pod.node)
        self._sync_bound(entry)

    def _sync_bound(self, entry: reservations.Entry) -> None:
        bound: dict[int, ids.NodeName] = {}
        for uid, (own, node) in self._bound.get(entry.key, {}).items():
            rank = own if own is not None else entry.pod_ranks.get(uid)
            if rank is None:
                rank = next((r for r, n in enumerate(entry.ranks) if n == node and r not in bound), None)
            if rank is not None and rank < entry.size:
                bound[rank] = node
        changed = self.book.set_bound(entry.key, bound, self.clock())
        if changed is not None:
            self.writer.submit(changed)

    def release(self, key: ids.GangKey, reason: str) -> None:
        """Drop the gang's plan; its final (``Released``) entry is written."""
        final = self.book.release(key, reason)
        self._bound.pop(key, None)
        if final is not None:
            self.released.remember(final, self.clock())
            self.writer.submit(final)

    def housekeeping(self) -> None:
        """Expire idle reservations; release gangs whose namespace is gone, and gangs without a
        Job once all their pods ended."""
        for key, reason in self.writer.take_gone():
            self.release(key, reason)
        now = self.clock()
        for entry in self.book.expire(now):
            self.writer.submit(entry)
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_S
            jobless = {e.key for e in self.book.entries() if not e.job_name}
            self._ended_check |= jobless & self._swept
            self._swept = jobless
        if not self._ended_check:
            return
        waiting, self._ended_check = self._ended_check, set()
        entries = [e for key in waiting if (e := self.book.get(key)) is not None]
        # Only the pods of their namespaces: a gang's pods share its namespace.
        live = {
            self.key(p)
            for namespace in {e.namespace for e in entries}
            for p in self.state.pods_in(namespace).values()
            if not gangs.pod_ended(p)
        }
        for entry in entries:
            if entry.key not in live:
                self.release(entry.key, "all pods ended")

    def adopt(self, entry: reservations.Entry) -> None:
        """A plan another replica's extender made (the FabricPlacement watch, ``mirroring``),
        booked as ``restore`` books one: its bound ranks re-derived from the pods here."""
        entry = self._with_resource(entry)
        job = self.state.job_by_uid(entry.namespace, entry.job_uid) if entry.job_name else None
        if job is not None and (job.finished or job.deleted):
            return  # over already; the other replica's Released write follows
        if entry.phase == PlacementPhase.RESERVED and not entry.expires_at:
            self.book.reserve(entry, self.clock())
        else:
            self.book.put(entry)
        self.track(entry)
        # Queued as this replica's newest word on the gang: the Lease holder writes its status
        # (the planner may not hold the Lease), and a standby's older queued entry never
        # outlives the plan it follows now.
        latest = self.book.get(entry.key)
        if latest is not None:
            self.writer.submit(latest)

    def bound_ranks(
        self, key: ids.GangKey, namespace: str, size: int, gpu_resource: str
    ) -> dict[int, ids.NodeName]:
        """Ranks of gang ``key`` whose pods are bound and live (the book may have no plan for it:
        one lost before its object landed, or deleted). A pod with no rank of its own takes the
        lowest rank left; pods beyond ``size`` are left out."""
        found: dict[int, ids.NodeName] = {}
        loose: list[ids.NodeName] = []
        for pod in self.state.pods_in(namespace).values():
            if pod.node is None or gangs.pod_ended(pod):
                continue
            if self.key(pod) != key:
                continue
            rank = self.rank(pod, gpu_resource)
            if rank is not None and 0 <= rank < size and rank not in found:
                found[rank] = pod.node
            else:
                loose.append(pod.node)
        free = [r for r in range(size) if r not in found]
        found.update(zip(free, loose, strict=False))
        return found

    def track(self, entry: reservations.Entry) -> None:
        """Follow a gang booked with pods already bound (adopted, or planned around them): its
        bound ranks re-derived from the pods here."""
        members = self._bound[entry.key] = {}
        for pod in self.state.pods_in(entry.namespace).values():
            if pod.active and pod.node is not None and self.key(pod) == entry.key:
                members[pod.uid] = (self.rank(pod, entry.gpu_resource), pod.node)
        if not entry.job_name:
            self._ended_check.add(entry.key)
        booked = self.book.get(entry.key)
        if booked is not None:
            self._sync_bound(booked)

    def restore(
        self,
        stored: Iterable[reservations.Entry],
        pending: Callable[[reservations.Entry], None] | None = None,
    ) -> None:
        """Rebuild the book from the entries the FabricPlacement objects hold and the bound pods
        (after a restart); every Pending entry is also given to ``pending``."""
        for stored_entry in stored:
            entry = self._with_resource(stored_entry)
            if entry.phase == PlacementPhase.PENDING:
                self.writer.replaces_pending(entry.key)
                if pending is not None:
                    pending(entry)
            if not entry.active:
                self.released.restore(entry, self.clock())  # its gang may come back (``released``)
                continue
            if entry.phase == PlacementPhase.RESERVED and not entry.expires_at:
                # Created by a plan whose status write never landed: held for a full TTL from now.
                kept = self.book.reserve(entry, self.clock())
            else:
                kept = self.book.put(entry)
            if path_health_module.path_moved(entry, kept):
                # The path's health moved while fabricsched was away: the object says so now.
                self.writer.submit(kept)
        for pod in self.state.pods.values() if len(self.book) else ():
            if pod.active and pod.node is not None:
                key = self.key(pod)
                if (booked := self.book.get(key)) is not None:
                    self._bound.setdefault(key, {})[pod.uid] = (self.rank(pod, booked.gpu_resource), pod.node)
        for entry in self.book.entries():
            self._sync_bound(entry)
            job = self.state.job_by_uid(entry.namespace, entry.job_uid) if entry.job_name else None
            if entry.job_name and (job is None or job.finished or job.deleted):
                self.release(
                    entry.key, f"Job {entry.namespace}/{entry.job_name} gone while fabricsched was away"
                )
            elif not entry.job_name:
                self._ended_check.add(entry.key)
        logger.info("restored %d gang reservations", len(self.book))

    def _with_resource(self, entry: reservations.Entry) -> reservations.Entry:
        """A stored entry with its fabric's GPU resource (the object does not carry it)."""
        snapshot = self.state.snapshot(entry.topology)
        resource = snapshot.spec.gpu_resource if snapshot is not None else gangs.DEFAULT_GPU_RESOURCE
        return entry if resource == entry.gpu_resource else dataclasses.replace(entry, gpu_resource=resource)

"""What the owners of a gang's pods say, read from the API server and kept in a bounded cache.

Where it sits in the flow: ``Coordinator.filter`` calls ``OwnerCache.prepare`` for the pod it
is asked about -> the owner the pod names (its JobSet, PyTorchJob, MPIJob, PodGroup, or a Job
the cluster state has not seen) is read once with a GET, bounded in time, and kept ->
``gangs`` sizes and ranks the gang through ``OwnerCache.view`` (the ``OwnerLookup``
port), synchronously, on the event loop. A read that takes longer than ``fetch_timeout_s``
goes on in the background (the next filter call for that pod finds its answer); the pod
meanwhile fails every node with "waiting for JobSet NS/NAME", never a lone-pod placement.

An owner is read again after ``refresh_s`` (a resized JobSet), at once when a pod names a UID
the cache does not hold (a recreated owner), and a missing or unreadable one after
``retry_s``. At most ``max_owners`` owners are kept (the least recently used go first).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from fabricsched import gangs, ids, parsing
from fabricsched.ports import errors, jobs, notices, views
from fabricsched.topology import nodes

logger = logging.getLogger(__name__)

OwnerId = tuple[str, str, str]
"""(kind, namespace, name)."""


class JobFetcher(Protocol):
    """Reads one Job from the API when the state has not seen it yet (``kube.store.ApiJobFetcher``)."""

    async def fetch(self, namespace: str, name: str) -> jobs.JobInfo | None:
        """The Job, or None when it does not exist; raises ``ApiError`` when the API fails."""
        ...


class OwnerFetcher(Protocol):
    """Reads one owner object; None when it does not exist, ``ApiError`` when the API fails."""

    async def get(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None: ...


@dataclass(frozen=True)
class CacheOptions:
    fetch_timeout_s: float = 1.0
    """How long a filter call waits for an owner's read (the read itself may go on)."""
    refresh_s: float = 30.0
    retry_s: float = 2.0
    """A missing or unreadable owner is asked again after this long, not on every retry."""
    max_owners: int = 4096


@dataclass
class _Cached:
    fetched_at: float
    manifest: Mapping[str, Any] | None = None
    """``kind``, ``metadata`` (name, uid) and ``spec`` of the object; None: it does not exist."""
    error: str = ""
    parsed: dict[str, object] = field(default_factory=dict)
    """gpu resource -> facts, or the ``parsing.Invalid`` that reading them raised."""


class OwnerCache:
    """The owners of gang pods, read on demand; ``view`` is ``gangs.OwnerLookup``."""

    def __init__(
        self,
        state: views.StateView,
        fetcher: OwnerFetcher | None,
        job_fetcher: JobFetcher | None,
        clock: Callable[[], float],
        options: CacheOptions | None = None,
    ) -> None:
        self.state = state
        self.fetcher = fetcher
        self.job_fetcher = job_fetcher
        self.clock = clock
        self.options = options or CacheOptions()
        self._owners: collections.OrderedDict[OwnerId, _Cached] = collections.OrderedDict()
        self._jobs: collections.OrderedDict[tuple[str, str], jobs.JobInfo] = collections.OrderedDict()
        """Jobs read because the state had not seen them yet (their watch event trails)."""
        self._reads: dict[OwnerId, asyncio.Task[None]] = {}
        self._views: dict[str, _View] = {}
        self._default_view = self.view()
        """The view ``key`` reads (the key does not depend on the GPU resource): asked per pod."""
        self.version = 0
        """Moves whenever an owner is stored or dropped: what a PodGroup says of its pods' gang
        keys may have changed (``decide.running`` keeps keys until then)."""

    def workload_of(self, pod: nodes.PodUsage, gpu_resource: str) -> notices.ObjectRef | None:
        """The object a user submitted for the pod's gang (``gangs.workload_of``), with the
        PodGroup's UID when the cache holds it (the pod does not carry it)."""
        try:
            facts = self.view().pod_group(pod.namespace, pod.pod_group) if pod.pod_group else None
        except parsing.Invalid:  # an unreadable PodGroup has no usable UID
            facts = None
        return gangs.workload_of(pod, self.view(gpu_resource), facts.uid if facts is not None else "")

    def view(self, gpu_resource: str = gangs.DEFAULT_GPU_RESOURCE) -> gangs.OwnerLookup:
        found = self._views.get(gpu_resource)
        if found is None:
            found = self._views[gpu_resource] = _View(self, gpu_resource)
        return found

    def key(self, pod: nodes.PodUsage) -> ids.GangKey:
        """The process's one gang key function (``gangs.key_of`` over this cache)."""
        return gangs.key_of(pod, self._default_view)

    def membership(self, pod: nodes.PodUsage, gpu_resource: str) -> tuple[ids.GangKey, int | None]:
        return gangs.membership(pod, self.view(gpu_resource), gpu_resource)

    # --- reads ------------------------------------------------------------------------

    async def prepare(self, pod: nodes.PodUsage) -> None:
        """Read the owner ``pod``'s gang source names (``gangs.Source.owner``) when the cache
        lacks it, waiting at most ``fetch_timeout_s``. Never raises."""
        if pod.pod_group:
            # The PodGroup's policy decides whether it is the pod's source: read it first; then
            # the Workload it came from, whose template may carry the topology key.
            await self._read(("PodGroup", pod.namespace, pod.pod_group), "")
            with contextlib.suppress(parsing.Invalid):
                group = self.view().pod_group(pod.namespace, pod.pod_group)
                if group is not None and group.workload is not None and group.topology_key is None:
                    await self._read(("Workload", pod.namespace, group.workload[0]), "")
        needed = gangs.source_of(pod, self.view()).owner(pod)
        if needed is None:
            return
        kind, name, uid = needed
        if kind == "Job":
            await self._prepare_job(pod.namespace, name)
        else:
            await self._read((kind, pod.namespace, name), uid)

    async def _prepare_job(self, namespace: str, job_name: str) -> None:
        if self.job_fetcher is None or self._job(namespace, job_name) is not None:
            return
        try:
            fetched = await asyncio.wait_for(
                self.job_fetcher.fetch(namespace, job_name), self.options.fetch_timeout_s
            )
        except (errors.ApiError, TimeoutError) as e:
            logger.debug("Job %s/%s not read: %s", namespace, job_name, e)
            return
        if fetched is not None:
            self._jobs[(namespace, job_name)] = fetched
            while len(self._jobs) > self.options.max_owners:
                self._jobs.popitem(last=False)

    async def _read(self, owner: OwnerId, uid: str) -> None:
        if self.fetcher is None or not self._stale(owner, uid):
            return
        task = self._reads.get(owner)
        if task is None:
            task = self._reads[owner] = asyncio.create_task(self._fetch(owner))
            task.add_done_callback(lambda _: self._reads.pop(owner, None))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), self.options.fetch_timeout_s)

    def _stale(self, owner: OwnerId, uid: str) -> bool:
        cached = self._owners.get(owner)
        if cached is None:
            return True
        age = self.clock() - cached.fetched_at
        if cached.manifest is None:
            return age >= self.options.retry_s
        held = (cached.manifest.get("metadata") or {}).get("uid")
        return age >= self.options.refresh_s or bool(uid and held != uid and age >= self.options.retry_s / 4)

    async def _fetch(self, owner: OwnerId) -> None:
        assert self.fetcher is not None
        kind, namespace, name = owner
        try:
            found = await self.fetcher.get(kind, namespace, name)
        except errors.ApiError as e:
            old = self._owners.get(owner)
            if old is not None and old.manifest is not None:
                old.fetched_at = self.clock() - self.options.refresh_s + self.options.retry_s
                return  # keep what was read before; ask again soon
            self._store(owner, _Cached(self.clock(), error=parsing.excerpt(str(e), 64)))
            return
        except Exception:  # a defect in a read must not kill the task silently
            logger.exception("reading %s %s/%s failed", kind, namespace, name)
            return
        kept = None
        if found is not None:
            kept = {
                "kind": found.get("kind") or kind,
                "metadata": {k: (found.get("metadata") or {}).get(k) for k in ("name", "uid")},
                "spec": found.get("spec"),
            }
        self._store(owner, _Cached(self.clock(), kept))

    def _store(self, owner: OwnerId, cached: _Cached) -> None:
        self.version += 1
        self._owners[owner] = cached
        self._owners.move_to_end(owner)
        while len(self._owners) > self.options.max_owners:
            self._owners.popitem(last=False)

    # --- what the view reads ----------------------------------------------------------

    def _job(self, namespace: str, name: str) -> jobs.JobInfo | None:
        return self.state.jobs.get((namespace, name)) or self._jobs.get((namespace, name))

    def _lookup(self, kind: str, namespace: str, name: str, gpu_resource: str) -> object:
        """The owner's facts; None when not read yet. Raises ``parsing.Invalid`` naming the
        owner when it does not exist, could not be read, or does not read as its kind."""
        cached = self._owners.get((kind, namespace, name))
        if cached is None:
            return None
        shown = f"{kind} {namespace}/{parsing.excerpt(name)}"
        if cached.error:
            raise parsing.Invalid(f"{shown} could not be read: {cached.error}")
        if cached.manifest is None:
            raise parsing.Invalid(f"{shown} does not exist")
        facts = self._facts(cached, kind, gpu_resource)
        if isinstance(facts, parsing.Invalid):
            raise parsing.Invalid(f"{shown} is unreadable: {facts}")
        return facts

    @staticmethod
    def _facts(cached: _Cached, kind: str, gpu_resource: str) -> object:
        if cached.manifest is None:
            return None
        if gpu_resource not in cached.parsed:
            try:
                parsed = gangs.facts_of(kind, cached.manifest, gpu_resource)
            except parsing.Invalid as e:
                parsed = e
            cached.parsed[gpu_resource] = parsed
        return cached.parsed[gpu_resource]


class _View:
    """``gangs.OwnerLookup`` over the cache, for one GPU resource name."""

    def __init__(self, cache: OwnerCache, gpu_resource: str) -> None:
        self._cache = cache
        self._resource = gpu_resource

    def job(self, namespace: str, name: str) -> jobs.JobInfo | None:
        return self._cache._job(namespace, name)

    def jobset(self, namespace: str, name: str) -> gangs.JobSetFacts | None:
        found = self._cache._lookup("JobSet", namespace, name, self._resource)
        return found if isinstance(found, gangs.JobSetFacts) else None

    def training_job(self, namespace: str, kind: str, name: str) -> gangs.TrainingJobFacts | None:
        found = self._cache._lookup(kind, namespace, name, self._resource)
        return found if isinstance(found, gangs.TrainingJobFacts) else None

    def pod_group(self, namespace: str, name: str) -> gangs.PodGroupFacts | None:
        found = self._cache._lookup("PodGroup", namespace, name, self._resource)
        if not isinstance(found, gangs.PodGroupFacts):
            return None
        if found.workload is None or found.topology_key is not None:
            return found
        try:
            workload = self._cache._lookup("Workload", namespace, found.workload[0], self._resource)
        except parsing.Invalid:
            return found  # no Workload (or an unreadable one): the PodGroup's own facts
        if not isinstance(workload, gangs.WorkloadFacts):
            return found
        return dataclasses.replace(found, template_topology_key=workload.template_keys.get(found.workload[1]))

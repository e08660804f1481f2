"""What the owners of a gang's pods say, read from the API server and kept in a bounded cache.

Where it sits in the flow: ``Coordinator.filter`` calls ``OwnerCache.prepare`` for the pod it
is asked about -> the owner the pod names (its JobSet, PyTorchJob, MPIJob, PodGroup, or a Job
the cluster state has not seen) is read once with a GET, bounded in time, and kept ->
``gang_sources`` sizes and ranks the gang through ``OwnerCache.view`` (the ``OwnerLookup``
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
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes import client

from fabricsched import ids, parsing
from fabricsched.extender import gang_sources, gangs, ports
from fabricsched.ports import errors, jobs
from fabricsched.topology import nodes

logger = logging.getLogger(__name__)

RESOURCES: Mapping[str, tuple[str, str, str]] = {
    "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "MPIJob": ("kubeflow.org", "v2beta1", "mpijobs"),
    "PodGroup": ("scheduling.k8s.io", "v1beta1", "podgroups"),
}
"""The owner kinds read (group, version, plural): the chart grants get/list/watch on them."""

OwnerId = tuple[str, str, str]
"""(kind, namespace, name)."""


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
    """The owners of gang pods, read on demand; ``view`` is ``gang_sources.OwnerLookup``."""

    def __init__(
        self,
        state: ports.StateView,
        fetcher: OwnerFetcher | None,
        job_fetcher: ports.JobFetcher | None,
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

    def pod_group_uid(self, pod: nodes.PodUsage) -> str:
        """The UID of the PodGroup the pod names, when the cache holds it (for Events)."""
        try:
            facts = self.view().pod_group(pod.namespace, pod.pod_group) if pod.pod_group else None
        except ValueError:  # parsing.Invalid: an unreadable PodGroup has no usable UID
            facts = None
        return facts.uid if facts is not None else ""

    def view(self, gpu_resource: str = gangs.DEFAULT_GPU_RESOURCE) -> gang_sources.OwnerLookup:
        found = self._views.get(gpu_resource)
        if found is None:
            found = self._views[gpu_resource] = _View(self, gpu_resource)
        return found

    def key(self, pod: nodes.PodUsage) -> ids.GangKey:
        """The process's one gang key function (``gang_sources.gang_key`` over this cache)."""
        return gang_sources.gang_key(pod, self.view())

    def membership(self, pod: nodes.PodUsage, gpu_resource: str) -> tuple[ids.GangKey, int | None]:
        return gang_sources.membership(pod, self.view(gpu_resource), gpu_resource)

    # --- reads ------------------------------------------------------------------------

    async def prepare(self, pod: nodes.PodUsage) -> None:
        """Read the owners ``pod`` names that the cache lacks, waiting at most
        ``fetch_timeout_s`` for them. Never raises."""
        labels = pod.labels
        if gangs.GANG_LABEL in labels:
            await self._prepare_job(pod)
            return
        if pod.pod_group:
            await self._read(("PodGroup", pod.namespace, pod.pod_group), "")
            cached = self._owners.get(("PodGroup", pod.namespace, pod.pod_group))
            facts = self._facts(cached, "PodGroup", "") if cached is not None else None
            if not isinstance(facts, gang_sources.PodGroupFacts) or facts.gang_min_count is not None:
                return  # a gang PodGroup (or not read yet): the PodGroup decides
        if labels.get(gang_sources.JOBSET_NAME):
            owner = ("JobSet", pod.namespace, labels[gang_sources.JOBSET_NAME])
            await self._read(owner, labels.get(gang_sources.JOBSET_UID, ""))
        elif labels.get(gang_sources.KUBEFLOW_JOB_NAME):
            if pod.owner is not None and pod.owner[0] in gang_sources.TRAINING_KINDS:
                await self._read((pod.owner[0], pod.namespace, pod.owner[1]), pod.owner[2])
        elif not labels.get(gang_sources.LWS_NAME):
            await self._prepare_job(pod)

    async def _prepare_job(self, pod: nodes.PodUsage) -> None:
        _, job_name, _ = gangs.key_parts(pod)
        if not job_name or self.job_fetcher is None or self._job(pod.namespace, job_name) is not None:
            return
        try:
            fetched = await asyncio.wait_for(
                self.job_fetcher.fetch(pod.namespace, job_name), self.options.fetch_timeout_s
            )
        except (errors.ApiError, TimeoutError) as e:
            logger.debug("Job %s/%s not read: %s", pod.namespace, job_name, e)
            return
        if fetched is not None:
            self._jobs[(pod.namespace, job_name)] = fetched
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
                parsed: object
                if kind == "JobSet":
                    parsed = gang_sources.jobset_facts(cached.manifest, gpu_resource)
                elif kind == "PodGroup":
                    parsed = gang_sources.pod_group_facts(cached.manifest)
                else:
                    parsed = gang_sources.training_job_facts(cached.manifest, gpu_resource)
            except parsing.Invalid as e:
                parsed = e
            cached.parsed[gpu_resource] = parsed
        return cached.parsed[gpu_resource]


class _View:
    """``gang_sources.OwnerLookup`` over the cache, for one GPU resource name."""

    def __init__(self, cache: OwnerCache, gpu_resource: str) -> None:
        self._cache = cache
        self._resource = gpu_resource

    def job(self, namespace: str, name: str) -> gangs.JobFacts | None:
        job = self._cache._job(namespace, name)
        return None if job is None else gangs.JobFacts(job.name, job.uid, job.parallelism, job.completions)

    def jobset(self, namespace: str, name: str) -> gang_sources.JobSetFacts | None:
        found = self._cache._lookup("JobSet", namespace, name, self._resource)
        return found if isinstance(found, gang_sources.JobSetFacts) else None

    def training_job(self, namespace: str, kind: str, name: str) -> gang_sources.TrainingJobFacts | None:
        found = self._cache._lookup(kind, namespace, name, self._resource)
        return found if isinstance(found, gang_sources.TrainingJobFacts) else None

    def pod_group(self, namespace: str, name: str) -> gang_sources.PodGroupFacts | None:
        found = self._cache._lookup("PodGroup", namespace, name, self._resource)
        return found if isinstance(found, gang_sources.PodGroupFacts) else None


class ApiOwnerFetcher:
    """``OwnerFetcher`` through the API server (one GET in a worker thread, bounded)."""

    def __init__(self, api_client: client.ApiClient, timeout_s: float = 5.0) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self._timeout_s = timeout_s

    async def get(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        group, version, plural = RESOURCES[kind]
        try:
            found = await asyncio.to_thread(
                errors.call, self._api.get_namespaced_custom_object, group, version, namespace, plural,
                name, _request_timeout=self._timeout_s,
            )
        except errors.NotFound:
            return None
        if not isinstance(found, Mapping):
            raise errors.ApiError(f"{kind} {namespace}/{parsing.excerpt(name)} is not an object")
        return found

"""The extender's few API calls: FabricPlacement objects, a Job lookup, pod Events.

The Kubernetes client is synchronous; every call runs in a worker thread (FabricPlacement
writes in threads of their own, the rest through ``asyncio.to_thread``) so the event loop,
which serves the scheduler, never blocks on it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from concurrent import futures
from typing import Any

from kubernetes import client

from fabricsched.api import placement as api
from fabricsched.ports import errors, jobs, notices
from fabricsched.topology import nodes

_MERGE = "application/merge-patch+json"
MAX_REMEMBERED = 100_000
"""Objects whose last written generation is kept (oldest forgotten first)."""
WRITE_THREADS = 6
"""Placement writes in flight: the writer's background ones, and room for a new plan's."""


class ApiPlacementStore:
    """FabricPlacement objects through ``CustomObjectsApi`` (status is a subresource).

    Only fabricsched writes these objects, so the store remembers the last version the API
    server returned for each and diffs against it instead of reading the object before every
    write: a new plan costs a create and a status patch, a bind one status patch. When the
    memory is wrong (the object was deleted, by the Job's garbage collection, or edited
    meanwhile) the API server says so (404, 409) and the write starts over from a read.
    """

    def __init__(self, api_client: client.ApiClient) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self._known: dict[tuple[str, str], dict[str, Any]] = {}
        """(namespace, name) -> the object as last returned by the API server."""
        self._generations: dict[tuple[str, str], int] = {}
        """(namespace, name) -> the highest generation this replica wrote (``covers``)."""
        self._writing: set[tuple[str, str]] = set()
        """Objects with a write in flight (their watch events may overtake the answer)."""
        self.listed_version: str | None = None
        """The resourceVersion of the last ``load``: the FabricPlacement watch starts there, so
        the objects the restore has just read are not listed (and delivered) a second time."""
        # Threads of its own: a plan's write, which a filter call waits for, must not queue
        # behind Event posts and Job reads in the loop's default executor.
        self._threads = futures.ThreadPoolExecutor(max_workers=WRITE_THREADS, thread_name_prefix="placement")

    async def load(self) -> list[dict[str, Any]]:
        listed = await asyncio.to_thread(
            errors.call, self._api.list_cluster_custom_object, api.GROUP, api.VERSION, api.PLURAL
        )
        if not isinstance(listed, dict):
            return []
        version = (listed.get("metadata") or {}).get("resourceVersion")
        self.listed_version = str(version) if version else None
        return list(listed.get("items") or [])

    async def create(self, manifest: dict[str, Any]) -> None:
        async with self._in_flight(manifest):
            await asyncio.get_running_loop().run_in_executor(self._threads, self._create, manifest)

    async def save(self, manifest: dict[str, Any]) -> None:
        async with self._in_flight(manifest):
            await asyncio.get_running_loop().run_in_executor(self._threads, self._save, manifest)

    @contextlib.asynccontextmanager
    async def _in_flight(self, manifest: dict[str, Any]) -> AsyncIterator[None]:
        key = (manifest["metadata"]["namespace"], manifest["metadata"]["name"])
        self._writing.add(key)
        try:
            yield
        finally:
            self._writing.discard(key)

    def _create(self, manifest: dict[str, Any]) -> None:
        metadata = manifest["metadata"]
        key = (metadata["namespace"], metadata["name"])
        if key in self._known:
            return
        body = {k: v for k, v in manifest.items() if k != "status"}
        try:
            self._remember(key, errors.call(
                self._api.create_namespaced_custom_object, api.GROUP, api.VERSION, key[0], api.PLURAL, body
            ))
        except errors.Conflict:
            # An object of that name exists. A live plan of this very gang was made by another
            # replica's extender (the create is the guard: two plans never both win); any other
            # (a Job recreated under the same name) is replaced by the next ``save``.
            existing = self._read(key)
            if existing is not None and existing.get("spec") == manifest["spec"]:
                self._remember(key, existing)  # our own create, its answer lost on the way
            elif existing is not None and _live_plan_of(existing, manifest["spec"]):
                raise errors.Conflict(f"FabricPlacement {key[0]}/{key[1]} holds a live plan of this gang",
                                      409) from None

    def covers(self, namespace: str, name: str, generation: int) -> bool:
        """Whether this replica wrote the object's plan at ``generation`` or later, or is writing
        it now: a watch event it does not cover carries a plan made elsewhere."""
        if (namespace, name) in self._writing:
            return True
        return self._generations.get((namespace, name), 0) >= generation

    def _remember(self, key: tuple[str, str], obj: dict[str, Any]) -> None:
        self._known[key] = obj
        generation = (obj.get("metadata") or {}).get("generation")
        if isinstance(generation, int):
            # Kept after a release too (``_known`` is not): late watch events of a gang this
            # replica released must not bring its plan back.
            # Popped and set again: the key moves to the end, so the oldest is forgotten first.
            # The highest generation stays: an object read back (an older memory, or the other
            # replica's) must not make an echo of this replica's newer write look foreign.
            self._generations[key] = max(generation, self._generations.pop(key, 0))
            if len(self._generations) > MAX_REMEMBERED:
                del self._generations[next(iter(self._generations))]

    def _save(self, manifest: dict[str, Any]) -> None:
        metadata = manifest["metadata"]
        key = (metadata["namespace"], metadata["name"])
        status = manifest.get("status") or {}
        released = status.get("phase") == api.PlacementPhase.RELEASED
        if released and not metadata.get("ownerReferences"):
            self._known.pop(key, None)
            self._delete(key)
            return
        try:
            self._write(key, manifest, self._known.get(key))
        except (errors.NotFound, errors.Conflict):
            # What we remembered is stale: read the object and write again, once.
            self._known.pop(key, None)
            self._write(key, manifest, self._read(key))
        if released:
            self._known.pop(key, None)  # nothing is written for a gang after its release

    def _write(self, key: tuple[str, str], manifest: dict[str, Any], existing: dict[str, Any] | None) -> None:
        namespace, name = key
        metadata = manifest["metadata"]
        status = manifest.get("status") or {}
        where = (api.GROUP, api.VERSION, namespace, api.PLURAL, name)
        if existing is None:
            if status.get("phase") == api.PlacementPhase.RELEASED:
                return  # gone already (the Job's garbage collection): nothing left to release
            body = {k: v for k, v in manifest.items() if k != "status"}
            existing = errors.call(
                self._api.create_namespaced_custom_object, api.GROUP, api.VERSION, namespace, api.PLURAL, body
            )
        elif existing.get("spec") != manifest["spec"] or _owners(existing) != metadata.get("ownerReferences"):
            # Replace, not merge: a merge patch would keep keys the new plan no longer has. The
            # resourceVersion of what we remember makes a stale memory fail (409), not overwrite.
            body = dict(existing)
            body["spec"] = manifest["spec"]
            body["metadata"] = {
                **existing["metadata"],
                "ownerReferences": metadata.get("ownerReferences") or [],
            }
            existing = errors.call(self._api.replace_namespaced_custom_object, *where, body)
        self._remember(key, existing)
        old_status = existing.get("status") or {}
        if old_status != status:
            # Keys the new status leaves out are removed (null in a merge patch).
            patch = {"status": {**dict.fromkeys(old_status), **status}}
            self._remember(key, errors.call(
                self._api.patch_namespaced_custom_object_status, *where, patch, _content_type=_MERGE
            ))

    def _read(self, key: tuple[str, str]) -> dict[str, Any] | None:
        namespace, name = key
        try:
            found: dict[str, Any] = errors.call(
                self._api.get_namespaced_custom_object, api.GROUP, api.VERSION, namespace, api.PLURAL, name
            )
        except errors.NotFound:
            return None
        return found

    def _delete(self, key: tuple[str, str]) -> None:
        namespace, name = key
        with contextlib.suppress(errors.NotFound):
            errors.call(self._api.delete_namespaced_custom_object, api.GROUP, api.VERSION, namespace,
                 api.PLURAL, name)


class ApiJobFetcher:
    """Reads a Job the state has not seen yet (its watch event can trail its pods)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._api = client.BatchV1Api(api_client)

    async def fetch(self, namespace: str, name: str) -> jobs.JobInfo | None:
        try:
            job = await asyncio.to_thread(errors.call, self._api.read_namespaced_job, name, namespace)
        except errors.NotFound:
            return None
        # The same JSON a watch event carries, read by the same parser as the state's Jobs.
        body = self._api.api_client.sanitize_for_serialization(job)
        try:
            return jobs.JobInfo.from_manifest(body)
        except (KeyError, TypeError, ValueError) as e:
            raise errors.ApiError(f"Job {namespace}/{name} is unreadable: {e}"[: errors.MAX_DETAIL]) from e


class RecorderEvents:
    """``ports.EventSink`` over the operator's Event recorder."""

    def __init__(self, recorder: notices.Recorder, clock: Callable[[], float]) -> None:
        self._recorder = recorder
        self._clock = clock

    def pod_event(self, pod: nodes.PodUsage, reason: str, message: str, warning: bool) -> None:
        ref = notices.ObjectRef("v1", "Pod", pod.name, pod.uid, pod.namespace)
        self.object_event(ref, reason, message, warning)

    def object_event(self, ref: notices.ObjectRef, reason: str, message: str, warning: bool) -> None:
        self._recorder.record(
            ref, notices.Notice("Warning" if warning else "Normal", reason, message), self._clock()
        )


def _live_plan_of(obj: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Whether ``obj`` is a Reserved or Bound plan of the gang ``spec`` describes."""
    theirs = obj.get("spec") or {}
    phase = (obj.get("status") or {}).get("phase")
    same_gang = theirs.get("gang") == spec.get("gang") and theirs.get("jobUID") == spec.get("jobUID")
    return bool(same_gang and theirs.get("ranks") and phase in (None, api.PlacementPhase.RESERVED,
                                                                api.PlacementPhase.BOUND))


def _owners(obj: dict[str, Any]) -> Any:
    return (obj.get("metadata") or {}).get("ownerReferences")

"""The extender's few API calls: FabricPlacement objects, a Job lookup, pod Events.

The Kubernetes client is synchronous; every call runs in a worker thread (FabricPlacement
writes in threads of their own, the rest through ``asyncio.to_thread``) so the event loop,
which serves the scheduler, never blocks on it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from concurrent import futures
from typing import Any

from kubernetes import client
from kubernetes.client import exceptions

from fabricsched.api import placement as api
from fabricsched.extender import ports
from fabricsched.topology import nodes

_MERGE = "application/merge-patch+json"
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

    def __init__(self, api_client: Any) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self._known: dict[tuple[str, str], dict[str, Any]] = {}
        """(namespace, name) -> the object as last returned by the API server."""
        # Threads of its own: a plan's write, which a filter call waits for, must not queue
        # behind Event posts and Job reads in the loop's default executor.
        self._threads = futures.ThreadPoolExecutor(max_workers=WRITE_THREADS, thread_name_prefix="placement")

    async def load(self) -> list[dict[str, Any]]:
        listed = await asyncio.to_thread(
            self._api.list_cluster_custom_object, api.GROUP, api.VERSION, api.PLURAL
        )
        items = listed.get("items") if isinstance(listed, dict) else None
        return list(items or [])

    async def create(self, manifest: dict[str, Any]) -> None:
        await asyncio.get_running_loop().run_in_executor(self._threads, self._create, manifest)

    async def save(self, manifest: dict[str, Any]) -> None:
        await asyncio.get_running_loop().run_in_executor(self._threads, self._save, manifest)

    def _create(self, manifest: dict[str, Any]) -> None:
        metadata = manifest["metadata"]
        key = (metadata["namespace"], metadata["name"])
        if key in self._known:
            return
        body = {k: v for k, v in manifest.items() if k != "status"}
        try:
            self._known[key] = self._call(
                self._api.create_namespaced_custom_object, api.GROUP, api.VERSION, key[0], api.PLURAL, body
            )
        except exceptions.ApiException as e:
            if e.status != 409:
                raise
            # An object of that name exists (a Job recreated under the same name): the next
            # ``save`` reads it and replaces its plan.

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
        except exceptions.ApiException as e:
            if e.status not in (404, 409):
                raise
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
            body = {k: v for k, v in manifest.items() if k != "status"}
            existing = self._call(
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
            existing = self._call(self._api.replace_namespaced_custom_object, *where, body)
        self._known[key] = existing
        old_status = existing.get("status") or {}
        if old_status != status:
            # Keys the new status leaves out are removed (null in a merge patch).
            patch = {"status": {**dict.fromkeys(old_status), **status}}
            self._known[key] = self._call(
                self._api.patch_namespaced_custom_object_status, *where, patch, _content_type=_MERGE
            )

    def _read(self, key: tuple[str, str]) -> dict[str, Any] | None:
        namespace, name = key
        try:
            found: dict[str, Any] = self._call(
                self._api.get_namespaced_custom_object, api.GROUP, api.VERSION, namespace, api.PLURAL, name
            )
        except exceptions.ApiException as e:
            if e.status != 404:
                raise
            return None
        return found

    def _delete(self, key: tuple[str, str]) -> None:
        namespace, name = key
        try:
            self._call(self._api.delete_namespaced_custom_object, api.GROUP, api.VERSION, namespace,
                       api.PLURAL, name)
        except exceptions.ApiException as e:
            if e.status != 404:
                raise

    @staticmethod
    def _call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except exceptions.ApiException as e:
            if e.status in (400, 422):
                raise ports.Rejected(f"{e.status} {e.reason}: {e.body}") from e
            raise


@dataclasses.dataclass(frozen=True)
class FetchedJob:
    """A Job read from the API (satisfies ``ports.JobView``)."""

    namespace: str
    name: str
    uid: str
    parallelism: int
    completions: int | None
    finished: bool
    deleted: bool


class ApiJobFetcher:
    """Reads a Job the state has not seen yet (its watch event can trail its pods)."""

    def __init__(self, api_client: Any) -> None:
        self._api = client.BatchV1Api(api_client)

    async def fetch(self, namespace: str, name: str) -> FetchedJob | None:
        try:
            job = await asyncio.to_thread(self._api.read_namespaced_job, name, namespace)
        except exceptions.ApiException as e:
            if e.status == 404:
                return None
            raise
        spec, status, metadata = job.spec, job.status, job.metadata
        if spec is None or metadata is None:
            return None
        finished = (
            any(c.type in ("Complete", "Failed") and c.status == "True" for c in (status.conditions or ()))
            if status is not None
            else False
        )
        return FetchedJob(
            namespace=namespace,
            name=name,
            uid=str(metadata.uid or ""),
            parallelism=int(spec.parallelism if spec.parallelism is not None else 1),
            completions=int(spec.completions) if spec.completions is not None else None,
            finished=finished,
            deleted=metadata.deletion_timestamp is not None,
        )


class RecorderEvents:
    """``ports.EventSink`` over the operator's event recorder (duck-typed: the extender does not
    import the controller; ``record`` reads the attributes of these two small records)."""

    def __init__(self, recorder: Any, clock: Callable[[], float]) -> None:
        self._recorder = recorder
        self._clock = clock

    def pod_event(self, pod: nodes.PodUsage, reason: str, message: str, warning: bool) -> None:
        ref = _ObjectRef("v1", "Pod", pod.name, pod.uid, pod.namespace)
        self._recorder.record(
            ref, _Notice("Warning" if warning else "Normal", reason, message), self._clock()
        )


@dataclasses.dataclass(frozen=True)
class _ObjectRef:
    api_version: str
    kind: str
    name: str
    uid: str
    namespace: str | None


@dataclasses.dataclass(frozen=True)
class _Notice:
    type: str
    reason: str
    message: str


def _owners(obj: dict[str, Any]) -> Any:
    return (obj.get("metadata") or {}).get("ownerReferences")

"""Reads of single objects the decisions ask for: a gang's owner, a Job, a pod's UID.

Each is one GET in a worker thread (the client is synchronous), bounded in time, through
``ports.errors.call``; the Protocols they implement are the decisions' (``decide.owners``,
``decide.pod_identity``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kubernetes import client

from fabricsched import gangs, parsing
from fabricsched.ports import errors


class ApiOwnerFetcher:
    """``OwnerFetcher`` through the API server (one GET in a worker thread, bounded)."""

    def __init__(self, api_client: client.ApiClient, timeout_s: float = 5.0) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self._timeout_s = timeout_s

    async def get(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        kind_of = gangs.OWNER_KINDS[kind]
        group, version, plural = kind_of.group, kind_of.version, kind_of.plural
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


class ApiPodLookup:
    """``PodLookup`` through ``CoreV1Api`` (a worker thread: the client is synchronous)."""

    def __init__(self, api_client: client.ApiClient, timeout_s: float = 2.0) -> None:
        self._api = client.CoreV1Api(api_client)
        self._timeout_s = timeout_s

    async def uid_of(self, namespace: str, name: str) -> str | None:
        try:
            pod: Any = await asyncio.to_thread(
                errors.call, self._api.read_namespaced_pod, name, namespace, _request_timeout=self._timeout_s
            )
        except errors.NotFound:
            return None
        except errors.Rejected:
            return None  # a name the API server cannot even hold: no such pod
        return str(pod.metadata.uid or "") if pod.metadata is not None else ""

"""The FabricPlacement watch behind ``book.mirror``: the other replica's plans as they are written.

A thread lists (only without a version to start from, or after a 410) and watches the objects;
each event reaches the event loop, where ``book.mirror.PlanMirror`` applies it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch

from fabricsched.api import placement as api
from fabricsched.extender.book import mirror
from fabricsched.ports import errors

logger = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 10
"""Server-side timeout of one watch call: how often the thread looks whether it should stop."""
RETRY_S = 1.0


class ApiPlacementFeed:
    """List and watch FabricPlacement objects in a thread of its own; events reach the loop."""

    def __init__(self, api_client: client.ApiClient, covers: mirror.Covers,
                 since: Callable[[], str | None] = lambda: None) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self.covers = covers
        self._since = since
        """The version the objects were last listed at (the restore's), read when the watch starts."""

    async def follow(self, on_event: mirror.OnEvent) -> None:
        """Deliver every change since ``since`` (without it: every object first) to
        ``on_event`` until cancelled."""
        loop = asyncio.get_running_loop()
        stop = threading.Event()

        def deliver(kind: str, obj: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(on_event, kind, obj)

        thread = threading.Thread(target=self._stream, args=(deliver, stop), name="fabricplacement-watch",
                                  daemon=True)
        thread.start()
        try:
            await asyncio.Event().wait()
        finally:
            stop.set()

    def _stream(self, deliver: mirror.OnEvent, stop: threading.Event) -> None:
        version = self._since()
        while not stop.is_set():
            try:
                if version is None:
                    version = self._list(deliver)
                version = self._watch(deliver, stop, version)
            except Exception as e:  # the thread must outlive any failure; the loop never sees one
                gone = getattr(e, "status", None) == 410
                version = None if gone else version
                if not gone:
                    logger.warning("FabricPlacement watch failed (retrying): %s", str(e)[:200])
                    time.sleep(RETRY_S)

    def _list(self, deliver: mirror.OnEvent) -> str:
        listed = errors.call(self._api.list_cluster_custom_object, api.GROUP, api.VERSION, api.PLURAL)
        for item in listed.get("items") or ():
            deliver("ADDED", item)
        return str(listed["metadata"]["resourceVersion"])

    def _watch(self, deliver: mirror.OnEvent, stop: threading.Event, version: str) -> str | None:
        stream = watch.Watch()  # type: ignore[no-untyped-call]
        events = stream.stream(  # type: ignore[no-untyped-call]
            self._api.list_cluster_custom_object, api.GROUP, api.VERSION, api.PLURAL,
            resource_version=version, timeout_seconds=WATCH_TIMEOUT_S,
        )
        try:
            for event in events:
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    return None if obj.get("code") == 410 else version
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                deliver(str(event.get("type")), obj)
                if stop.is_set():
                    break
        finally:
            stream.stop()  # type: ignore[no-untyped-call]
        return version

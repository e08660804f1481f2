"""Kubernetes Events: what the operator tells ``kubectl describe`` readers, posted in the background.

Handlers and the health path must never wait on the API server, so ``EventRecorder.record`` only
queues; ``EventRecorder.run`` posts from a task (the sync client runs in a thread). A full queue
drops the newest Event and counts it: Events are evidence, not state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from fabricsched.api import rfc3339
from fabricsched.ports import errors
from fabricsched.ports.notices import Notice, ObjectRef
from fabricsched.topology import health

logger = logging.getLogger(__name__)

COMPONENT = "fabricsched"

Post = Callable[[str, Mapping[str, Any]], None]
"""Create one core/v1 Event in a namespace (sync; raises ``errors.ApiError`` on failure)."""

Outcome = Callable[[str], None]
"""Told ``posted``, ``failed`` or ``dropped`` for each Event (metrics)."""


class EventRecorder:
    """Queues Events and posts them from ``run``; ``default_namespace`` hosts cluster-scoped ones."""

    def __init__(self, post: Post, default_namespace: str = "default", capacity: int = 1000,
                 outcome: Outcome | None = None, dedupe_s: float = 30.0) -> None:
        self._post = post
        self._namespace = default_namespace
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue(maxsize=capacity)
        self._outcome = outcome or (lambda _: None)
        self._dedupe_s = dedupe_s
        self._recent: dict[tuple[str, str, str, str, str], float] = {}
        self.leading: Callable[[], bool] = lambda: True
        """Whether this replica writes (``election.LeaseElector.leading``); a standby's Events are
        dropped (counted ``standby``): the leader tells the same story."""

    def record(self, ref: ObjectRef, notice: Notice, now: float) -> None:
        """Queue an Event; the same message about the same object within ``dedupe_s`` is dropped
        (a scheduler retrying a waiting gang every few seconds must not flood the namespace)."""
        if not self.leading():
            self._outcome("standby")
            return
        key = (ref.kind, ref.namespace or "", ref.name, notice.reason, notice.message)
        last = self._recent.get(key)
        if last is not None and now - last < self._dedupe_s:
            self._outcome("deduplicated")
            return
        if len(self._recent) > 10_000:
            self._recent = {k: t for k, t in self._recent.items() if now - t < self._dedupe_s}
        self._recent[key] = now
        namespace = ref.namespace or self._namespace
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{ref.name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": ref.api_version,
                "kind": ref.kind,
                "name": ref.name,
                **({"uid": ref.uid} if ref.uid else {}),
                **({"namespace": ref.namespace} if ref.namespace else {}),
            },
            "type": notice.type,
            "reason": notice.reason,
            "message": notice.message[:1024],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT,
            "firstTimestamp": rfc3339.format_epoch(now),
            "lastTimestamp": rfc3339.format_epoch(now),
            "count": 1,
        }
        try:
            self._queue.put_nowait((namespace, body))
        except asyncio.QueueFull:
            self._outcome("dropped")
            logger.warning("event queue full, dropped: %s %s", notice.reason, notice.message)

    async def run(self) -> None:
        """Post queued Events until cancelled."""
        while True:
            namespace, body = await self._queue.get()
            try:
                await asyncio.to_thread(self._post, namespace, body)
                self._outcome("posted")
            except errors.ApiError as e:
                # The API server may be briefly away; losing one Event is better than blocking.
                self._outcome("failed")
                logger.warning("could not post event %s: %s", body["reason"], e)

    async def drain(self, timeout_s: float) -> None:
        """Post what is queued (at shutdown), for at most ``timeout_s``."""
        async def _drain() -> None:
            while not self._queue.empty():
                namespace, body = self._queue.get_nowait()
                try:
                    await asyncio.to_thread(self._post, namespace, body)
                    self._outcome("posted")
                except errors.ApiError:
                    self._outcome("failed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_drain(), timeout_s)


# --- what health changes say ------------------------------------------------------------

_NOUN = {"node": "fabric link", "domain": "uplinks"}


def subject(element: health.ElementId) -> str:
    """``node gpu-017 fabric link`` / ``leaf l07 uplinks`` (rail appended when set)."""
    base = f"node {element.name}" if element.kind == "node" else f"{element.tier} {element.name}"
    if element.rail is not None:
        base += f" rail {element.rail}"
    return f"{base} {_NOUN[element.kind]}"


def health_notice(change: health.HealthChange, recover_after_s: float) -> Notice:
    """The Event for one effective health change, e.g.
    ``node gpu-017 fabric link degraded: FabricLinkDegraded: symbol errors on mlx5_2``."""
    reasons = "; ".join(o.reason or o.source for o in change.sources)
    what = subject(change.element)
    if change.kind == "down":
        return Notice("Warning", "FabricDown", f"{what} down: {reasons}".rstrip(": "))
    if change.kind == "degraded":
        text = f"{what} degraded (capacity {change.new_capacity:.2f}): {reasons}"
        return Notice("Warning", "FabricDegraded", text.rstrip(": "))
    if change.kind == "recovered":
        return Notice("Normal", "FabricRecovered", f"{what} recovered (was {change.old.value})")
    if change.kind == "capacity":
        text = (f"{what} {change.new.value}, capacity {change.old_capacity:.2f} -> "
                f"{change.new_capacity:.2f}: {reasons}")
        kind = "Warning" if change.new_capacity < change.old_capacity else "Normal"
        return Notice(kind, "FabricCapacityChanged", text.rstrip(": "))
    if change.kind == "recovering":
        return Notice("Normal", "FabricRecovering",
                      f"{what} looks healthy; counts as healthy after {recover_after_s:g}s "
                      f"without a new problem (still {change.new.value})")
    return Notice("Warning", "FabricRecoveryCancelled",
                  f"{what} worsened again while recovering; stays {change.new.value}: {reasons}".rstrip(": "))


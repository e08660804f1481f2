"""Whether the pod a scheduler request names exists: the extender acts only for real pods.

Anyone who can reach the extender's port can post a ``/filter`` body. Its pod is checked
against the API server before any decision: the pod must exist there, under the same
namespace and name, with the same UID. A pod the cluster state holds with that UID is known
at no cost (the watch delivered it); any other is looked up once (``PodLookup``, a bounded
wait) and the answer is remembered for a short while, so a scheduler that asks again (it does,
several times a second) or a flood of forged names costs one read each, at most
``MAX_LOOKUPS`` at a time. A forged, deleted or recreated pod gets every node failed with
"unknown pod": nothing is reserved and nothing is written for it.

Pods that request no extended resource are never checked: the state does not hold them and
fabricsched steers none of them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from fabricsched import parsing
from fabricsched.ports import errors, views
from fabricsched.topology import nodes

logger = logging.getLogger(__name__)

MAX_LOOKUPS = 4
"""Pod reads in flight at once; more requests for unknown pods wait their turn."""
WHO_CHARS = 80
"""A reason names the pod in at most this many characters (the name came in the request)."""
MAX_REMEMBERED = 4096
"""Answers kept; the oldest is dropped first (forged names cannot grow the memory)."""


class PodLookup(Protocol):
    """Reads one pod's UID from the API server (``kube.fetchers.ApiPodLookup``)."""

    async def uid_of(self, namespace: str, name: str) -> str | None:
        """The UID of the pod, or None when no such pod exists; raises ``ApiError`` otherwise."""
        ...


@dataclass(frozen=True)
class IdentityOptions:
    lookup_timeout_s: float = 2.0
    """How long one lookup may take; after it the pod counts as unverified for this call."""
    unknown_ttl_s: float = 5.0
    """How long "no such pod" is remembered (a pod created just after still schedules soon)."""
    known_ttl_s: float = 60.0
    """How long a looked-up pod stays verified without the watch delivering it."""

    def __post_init__(self) -> None:
        if min(self.lookup_timeout_s, self.unknown_ttl_s, self.known_ttl_s) <= 0:
            raise ValueError("pod identity timeouts must be positive")


class PodIdentity:
    """``unknown(pod)``: None for a real pod, else the reason every node fails."""

    def __init__(
        self,
        state: views.StateView,
        lookup: PodLookup,
        clock: Callable[[], float],
        options: IdentityOptions = IdentityOptions(),
    ) -> None:
        self.state = state
        self.lookup = lookup
        self.clock = clock
        self.options = options
        self._answers: OrderedDict[tuple[str, str, str], tuple[bool, float]] = OrderedDict()
        """(namespace, name, uid) -> (exists, until when the answer holds)."""
        self._inflight: dict[tuple[str, str, str], asyncio.Future[bool]] = {}
        self._gate = asyncio.Semaphore(MAX_LOOKUPS)

    def known(self, pod: nodes.PodUsage) -> bool:
        """True when the pod needs no check or is verified already (no I/O: prioritize)."""
        if not pod.requests or self._watched(pod):
            return True
        answer = self._answers.get((pod.namespace, pod.name, pod.uid))
        return answer is not None and answer[0] and answer[1] > self.clock()

    async def unknown(self, pod: nodes.PodUsage) -> str | None:
        """None when the pod exists with its UID (or is not a GPU pod); else why not."""
        if not pod.requests or self._watched(pod):
            return None
        who = parsing.excerpt(f"{pod.namespace}/{pod.name}", WHO_CHARS)
        if not pod.uid:
            return f"unknown pod {who}: the request carries no UID"
        key = (pod.namespace, pod.name, pod.uid)
        now = self.clock()
        answer = self._answers.get(key)
        if answer is None or answer[1] <= now:
            try:
                exists = await asyncio.wait_for(asyncio.shield(self._ask(key)), self.options.lookup_timeout_s)
            except (TimeoutError, errors.ApiError) as e:
                detail = "timed out" if isinstance(e, TimeoutError) else parsing.excerpt(str(e))
                return f"unknown pod {who}: could not look it up ({detail})"
        else:
            exists = answer[0]
        return None if exists else f"unknown pod {who}: no pod of that name and UID exists"

    def _watched(self, pod: nodes.PodUsage) -> bool:
        seen = self.state.pods.get((pod.namespace, pod.name))
        return seen is not None and bool(pod.uid) and seen.uid == pod.uid

    def _ask(self, key: tuple[str, str, str]) -> asyncio.Future[bool]:
        # Concurrent requests for one pod share one read.
        running = self._inflight.get(key)
        if running is None:
            running = asyncio.ensure_future(self._read(key))
            self._inflight[key] = running
            running.add_done_callback(lambda _: self._inflight.pop(key, None))
        return running

    async def _read(self, key: tuple[str, str, str]) -> bool:
        namespace, name, uid = key
        async with self._gate:
            found = await self.lookup.uid_of(namespace, name)
        exists = found == uid
        ttl = self.options.known_ttl_s if exists else self.options.unknown_ttl_s
        self._remember(key, exists, self.clock() + ttl)
        if not exists:
            logger.info("filter request for unknown pod %s refused", parsing.excerpt(f"{namespace}/{name}"))
        return exists

    def _remember(self, key: tuple[str, str, str], exists: bool, until: float) -> None:
        self._answers[key] = (exists, until)
        self._answers.move_to_end(key)
        while len(self._answers) > MAX_REMEMBERED:
            self._answers.popitem(last=False)

"""Answers too costly to compute per request (a gang's diagnosis: API reads and Prometheus
queries): computed on demand, once at a time per key, cached, and rate-limited per group (a
gang) and overall.

- A fresh answer (younger than ``ttl_s``) is served from the cache (``max_entries``, least
  recently asked goes first), whatever its status: a failure is not retried on every click.
- A request for a key being computed waits for that computation (one per key at a time).
- Otherwise a new computation needs: no other one of the same group started in the last
  ``group_interval_s`` (else 429: the gang was just diagnosed, e.g. over another window), a
  token of the overall bucket (``per_minute``, else 429) and a free slot (``max_running``,
  else 503). Both carry ``Retry-After``.
- A computation runs in its own task (a client that goes away does not cancel it; its answer
  is cached for the next one), within ``timeout_s`` (else 504), and whatever it raises becomes
  a 500 answer: the process serving the page never fails with it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Reply:
    status: int
    body: Mapping[str, Any]
    """JSON-ready."""
    retry_after_s: float | None = None
    age_s: float = 0.0
    """How old the cached answer is (0 when computed for this request)."""


@dataclass(frozen=True)
class Limits:
    ttl_s: float = 30.0
    max_entries: int = 64
    group_interval_s: float = 10.0
    per_minute: int = 12
    max_running: int = 2
    timeout_s: float = 60.0


DEFAULT_LIMITS = Limits()


@dataclass
class _Bucket:
    """``capacity`` tokens, refilled evenly over a minute."""

    capacity: int
    tokens: float = field(init=False)
    at: float = field(default=-math.inf)

    def __post_init__(self) -> None:
        self.tokens = float(self.capacity)

    def take(self, now: float) -> float | None:
        """None when a token was taken; else the seconds until one is there."""
        if self.at > -math.inf:
            self.tokens = min(float(self.capacity), self.tokens + (now - self.at) * self.capacity / 60.0)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) * 60.0 / self.capacity


class OnDemand(Generic[K]):
    def __init__(self, compute: Callable[[K], Awaitable[Reply]], limits: Limits = DEFAULT_LIMITS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.compute = compute
        self.limits = limits
        self.clock = clock
        self._cache: collections.OrderedDict[K, tuple[float, Reply]] = collections.OrderedDict()
        self._running: dict[K, asyncio.Task[Reply]] = {}
        self._started: dict[Hashable, float] = {}
        """Group -> when its last computation started (only the recent ones are kept)."""
        self._bucket = _Bucket(limits.per_minute)

    async def get(self, key: K, group: Hashable) -> Reply:
        now = self.clock()
        cached = self._cache.get(key)
        if cached is not None and now - cached[0] < self.limits.ttl_s:
            self._cache.move_to_end(key)
            return Reply(cached[1].status, cached[1].body, age_s=now - cached[0])
        task = self._running.get(key)
        if task is None:
            refused = self._admit(group, now)
            if refused is not None:
                return refused
            task = asyncio.create_task(self._compute(key), name="on-demand answer")
            self._running[key] = task
        return await asyncio.shield(task)

    def _admit(self, group: Hashable, now: float) -> Reply | None:
        limits = self.limits
        last = self._started.get(group)
        if last is not None and now - last < limits.group_interval_s:
            wait = limits.group_interval_s - (now - last)
            return _refused(429, "this gang was diagnosed moments ago; its answer is cached for "
                            f"{limits.ttl_s:g} s per window, or ask again in {math.ceil(wait)} s", wait)
        if len(self._running) >= limits.max_running:
            return _refused(503, f"{limits.max_running} diagnoses are running; ask again in a few "
                            "seconds", 5.0)
        empty_for = self._bucket.take(now)
        if empty_for is not None:
            return _refused(429, f"more than {limits.per_minute} diagnoses a minute; ask again in "
                            f"{math.ceil(empty_for)} s", empty_for)
        self._started = {g: t for g, t in self._started.items() if now - t < limits.group_interval_s}
        self._started[group] = now
        return None

    async def _compute(self, key: K) -> Reply:
        try:
            answer = await asyncio.wait_for(self.compute(key), self.limits.timeout_s)
        except TimeoutError:
            answer = Reply(504, {"error": f"not answered within {self.limits.timeout_s:g} s"})
        except asyncio.CancelledError:
            raise
        except Exception as e:
            logger.exception("an on-demand answer failed")
            answer = Reply(500, {"error": f"failed: {type(e).__name__}"})
        finally:
            self._running.pop(key, None)
        self._cache[key] = (self.clock(), answer)
        self._cache.move_to_end(key)
        while len(self._cache) > self.limits.max_entries:
            self._cache.popitem(last=False)
        return answer

    async def close(self) -> None:
        """Cancel what is running (the server stops)."""
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


def _refused(status: int, message: str, retry_after_s: float) -> Reply:
    return Reply(status, {"error": message}, retry_after_s=max(1.0, retry_after_s))

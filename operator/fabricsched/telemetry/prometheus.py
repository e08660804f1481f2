"""The Prometheus HTTP API, the one call telemetry needs: an instant query (``/api/v1/query``).

Every failure becomes a ``TelemetryError`` naming what went wrong (unreachable, an HTTP status,
a PromQL error, an unreadable answer), so the poller can report it in the
``TelemetryUnavailable`` condition without knowing aiohttp. ``Backoff`` spaces retries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from fabricsched.telemetry import rules

ErrorKind = Literal["unreachable", "http", "query", "response"]


class TelemetryError(Exception):
    """A query that produced no result: Prometheus unreachable, or the query refused."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class PrometheusClient:
    """Instant queries over one aiohttp session (``close`` it, or use ``async with``)."""

    def __init__(self, session: aiohttp.ClientSession | None = None) -> None:
        self._session = session
        self._own = session is None

    async def __aenter__(self) -> PrometheusClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own and self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def query(self, base_url: str, promql: str, timeout_s: float) -> list[rules.Sample]:
        """The query's result at the server's now: a vector (one sample per series) or a scalar
        (one sample without labels). Raises ``TelemetryError``."""
        url = base_url.rstrip("/") + "/api/v1/query"
        # POST with a form body: long PromQL would not fit a URL, and Prometheus accepts both.
        form = {"query": promql, "timeout": f"{timeout_s:g}s"}
        try:
            async with self._client().post(url, data=form,
                                           timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                try:
                    body = await resp.json(content_type=None)
                except ValueError:
                    body = None
                if resp.status >= 400 and not _is_error_body(body):
                    raise TelemetryError("http", f"{url}: HTTP {resp.status} {resp.reason or ''}".strip())
        except TelemetryError:
            raise
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise TelemetryError("unreachable", f"{url}: {_describe(e)}") from e
        return parse_response(body)


def _is_error_body(body: Any) -> bool:
    return isinstance(body, Mapping) and body.get("status") == "error"


def _describe(e: BaseException) -> str:
    if isinstance(e, TimeoutError | asyncio.TimeoutError):
        return "timed out"
    return str(e) or type(e).__name__


def parse_response(body: Any) -> list[rules.Sample]:
    """The samples of a ``/api/v1/query`` answer; a PromQL error or a malformed answer raises."""
    if not isinstance(body, Mapping):
        raise TelemetryError("response", "the answer is not a JSON object")
    if body.get("status") == "error":
        kind = body.get("errorType") or "error"
        raise TelemetryError("query", f"{kind}: {body.get('error') or 'no message'}")
    data = body.get("data")
    if body.get("status") != "success" or not isinstance(data, Mapping):
        raise TelemetryError("response", "the answer has no data")
    result_type = data.get("resultType")
    result: Any = data.get("result")
    try:
        if result_type == "vector":
            return [rules.Sample({str(k): str(v) for k, v in (item.get("metric") or {}).items()},
                                 _number(item["value"][1])) for item in result]
        if result_type == "scalar":
            return [rules.Sample({}, _number(result[1]))]
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
        raise TelemetryError("response", f"unreadable {result_type} result: {e}") from e
    raise TelemetryError("response", f"a rule query must return an instant vector, got {result_type}")


def _number(text: Any) -> float:
    # Prometheus writes sample values as strings: "1.5", "NaN", "+Inf", "-Inf"; float() reads all.
    return float(str(text))


@dataclass(frozen=True)
class Backoff:
    """Delay before the next attempt after ``failures`` consecutive failed rounds: the interval
    doubled per failure, capped; so a Prometheus that is away is asked less and less often, and
    one that comes back is used again within ``cap_s``."""

    interval_s: float
    cap_s: float = 300.0

    def delay(self, failures: int) -> float:
        if failures <= 0:
            return self.interval_s
        return min(max(self.cap_s, self.interval_s), self.interval_s * 2.0 ** min(failures - 1, 30))

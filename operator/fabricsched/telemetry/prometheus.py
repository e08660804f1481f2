"""The Prometheus HTTP API: an instant query (``/api/v1/query``, the rules) and a range query
(``/api/v1/query_range``, ``fabricsched diagnose``).

``PrometheusClient.endpoint`` turns a topology's ``spec.health.prometheus`` into an
``access.Endpoint`` under the operator's ``access.AccessPolicy`` (allowed URLs, credential files);
``query`` asks it. Every failure becomes a ``TelemetryError`` naming what went wrong (not
allowed, credentials unreadable, unreachable, refused with 401/403, another HTTP status, a
PromQL error, an unreadable answer) in a bounded, printable message, so the poller can report it
in the ``TelemetryUnavailable`` condition without knowing aiohttp. ``Backoff`` spaces retries.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from fabricsched.api import topology as api
from fabricsched.telemetry import access, rules

MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""Bound on one range query's answer (``fabricsched diagnose``, a process of its own)."""
MAX_RULE_ANSWER_BYTES = 16 * 1024 * 1024
"""Bound on one rule query's answer, read in ``fabricsched run`` beside the loop that answers the
scheduler: one sample per host, rail or domain (10,000 hosts x 8 rails is about 10 MB of JSON).
Decoding holds the interpreter lock: a 50 MB answer accepted under the old 64 MiB bound stalled
``/filter`` for 2.4 s per round (tests/integration/test_hostile_prometheus.py)."""

ErrorKind = Literal["config", "unreachable", "auth", "http", "query", "response"]
"""config: the policy refuses the URL or a credential file is unreadable (nothing was sent);
auth: Prometheus answered 401 or 403."""


class TelemetryError(Exception):
    """A query that produced no result: not allowed, Prometheus unreachable, or the query refused."""

    def __init__(self, kind: ErrorKind, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.reason = reason
        """CamelCase condition reason for ``config`` errors (``access.Reason``)."""


class PrometheusClient:
    """Instant queries over one aiohttp session (``close`` it, or use ``async with``)."""

    def __init__(self, policy: access.AccessPolicy | None = None,
                 session: aiohttp.ClientSession | None = None,
                 resolver: access.Resolver | None = None) -> None:
        self._resolver = resolver or access.Resolver(policy or access.AccessPolicy())
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
            # No proxy from the environment, no cookies kept between topologies.
            self._session = aiohttp.ClientSession(trust_env=False, cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    def endpoint(self, prom: api.PrometheusHealthSpec) -> access.Endpoint:
        """Where and how to ask this topology's Prometheus; raises ``TelemetryError`` (kind
        ``config``) when the policy refuses it or a credentials file cannot be read."""
        try:
            return self._resolver.endpoint(prom)
        except access.AccessError as e:
            raise TelemetryError("config", e.message, e.reason) from e

    async def query(self, endpoint: access.Endpoint, promql: str, timeout_s: float) -> list[rules.Sample]:
        """The query's result at the server's now: a vector (one sample per series) or a scalar
        (one sample without labels). Raises ``TelemetryError``."""
        form = {"query": promql, "timeout": f"{timeout_s:g}s"}
        return parse_response(await self._post(endpoint, "/api/v1/query", form, timeout_s,
                                               MAX_RULE_ANSWER_BYTES))

    async def query_range(self, endpoint: access.Endpoint, promql: str, span: RangeSpan,
                          timeout_s: float) -> list[RangeSeries]:
        """The query evaluated every ``span.step_s`` from ``span.start`` to ``span.end`` (a
        matrix: one series per label set). Raises ``TelemetryError``."""
        form = {"query": promql, "start": f"{span.start:.3f}", "end": f"{span.end:.3f}",
                "step": f"{span.step_s:g}", "timeout": f"{timeout_s:g}s"}
        return parse_range_response(await self._post(endpoint, "/api/v1/query_range", form, timeout_s,
                                                     MAX_ANSWER_BYTES))

    async def _post(self, endpoint: access.Endpoint, path: str, form: Mapping[str, str],
                    timeout_s: float, max_bytes: int) -> Any:
        url = endpoint.url + path
        # POST with a form body: long PromQL would not fit a URL, and Prometheus accepts both.
        try:
            # No redirects: an allowed Prometheus must not bounce the operator to another host.
            async with self._client().post(url, data=dict(form), headers=dict(endpoint.headers),
                                           ssl=endpoint.tls if endpoint.tls is not None else True,
                                           allow_redirects=False,
                                           timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                if 300 <= resp.status < 400 or resp.status in (401, 403):
                    raise _status_error(url, resp.status, resp.reason)
                raw = await _read_bounded(resp, url, max_bytes)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                if resp.status >= 400 and not _is_error_body(body):
                    raise _status_error(url, resp.status, resp.reason)
        except TelemetryError:
            raise
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise TelemetryError("unreachable", f"{url}: {_describe(e)}") from e
        return body

    def forget_credentials(self) -> None:
        """Re-read every credentials file on the next round (after a 401: a rotated Secret)."""
        self._resolver.forget()


async def _read_bounded(resp: aiohttp.ClientResponse, url: str, max_bytes: int) -> bytes:
    """The whole body, at most ``max_bytes`` (a longer one is refused, the rest unread); one
    ``read(n)`` returns only what has arrived so far, so a large answer comes in several chunks."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > max_bytes:
            raise TelemetryError("response", f"{url}: the answer is larger than {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _status_error(url: str, status: int, phrase: str | None) -> TelemetryError:
    text = f"{url}: HTTP {status} {access.clean(phrase or '', 60)}".strip()
    if status in (401, 403):
        return TelemetryError("auth", f"{text}: check spec.health.prometheus.access and the mounted "
                              "credentials")
    if 300 <= status < 400:
        return TelemetryError("http", f"{text}: redirects are not followed; name the final URL")
    return TelemetryError("http", text)


def _is_error_body(body: Any) -> bool:
    return isinstance(body, Mapping) and body.get("status") == "error"


def _describe(e: BaseException) -> str:
    if isinstance(e, TimeoutError | asyncio.TimeoutError):
        return "timed out"
    return access.clean(str(e) or type(e).__name__, 300)


def parse_response(body: Any) -> list[rules.Sample]:
    """The samples of a ``/api/v1/query`` answer; a PromQL error or a malformed answer raises."""
    data = _data(body)
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


@dataclass(frozen=True)
class RangeSpan:
    """The times of a range query: Unix seconds, and the resolution step."""

    start: float
    end: float
    step_s: float


@dataclass(frozen=True)
class RangeSeries:
    """One series of a range query's matrix: its labels and (time, value) points, oldest first."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


def parse_range_response(body: Any) -> list[RangeSeries]:
    """The series of a ``/api/v1/query_range`` answer; a PromQL error or a malformed answer raises."""
    data = _data(body)
    if data.get("resultType") != "matrix":
        raise TelemetryError("response", f"a range query must return a matrix, got {data.get('resultType')}")
    result: Any = data.get("result")
    try:
        return [RangeSeries({str(k): str(v) for k, v in (item.get("metric") or {}).items()},
                            tuple((float(t), _number(v)) for t, v in item["values"])) for item in result]
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
        raise TelemetryError("response", f"unreadable matrix result: {access.clean(str(e), 200)}") from e


def _data(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise TelemetryError("response", "the answer is not a JSON object")
    if body.get("status") == "error":
        kind = access.clean(str(body.get("errorType") or "error"), 40)
        raise TelemetryError("query", f"{kind}: {access.clean(str(body.get('error') or 'no message'), 300)}")
    data = body.get("data")
    if body.get("status") != "success" or not isinstance(data, Mapping):
        raise TelemetryError("response", "the answer has no data")
    return data


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

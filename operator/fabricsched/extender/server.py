"""The HTTP face of the extender: ``POST /filter``, ``POST /prioritize`` (kube-scheduler extender
v1 wire format, ``nodeCacheCapable``), and ``GET /openapi.json``.

A request the scheduler could not have meant (malformed, truncated or oversized body) gets
HTTP 400 with a JSON ``{"error": ...}`` and the server keeps serving; the decision itself is
the coordinator's.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pydantic
from aiohttp import web

from fabricsched.api import extender as wire
from fabricsched.extender import coordinator, openapi

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
"""A 10k-node NodeNames list is ~200 KiB; a whole NodeList (nodeCacheCapable off) far more."""


class Decider(Protocol):
    """What the server asks (``coordinator.Coordinator``; the benchmarks pass a stand-in)."""

    async def filter(
        self, manifest: Mapping[str, Any], node_names: Sequence[str]
    ) -> coordinator.FilterAnswer: ...

    def prioritize(self, manifest: Mapping[str, Any], node_names: Sequence[str]) -> list[tuple[str, int]]: ...


_MAX_BODY = web.AppKey("max_body_bytes", int)

Observer = Callable[[str, float, str], None]
"""Told (verb, seconds, outcome) after each call: ``ok``, ``bad-request`` or ``error`` (metrics)."""


@dataclass(frozen=True)
class ServerOptions:
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1024:
            raise ValueError(f"max body size {self.max_body_bytes} is too small for any pod")


class BadRequest(Exception):
    """The body is not a request the scheduler could have sent."""


def make_app(decider: Decider, options: ServerOptions, observe: Observer | None = None) -> web.Application:
    app = web.Application(client_max_size=options.max_body_bytes)
    app[_MAX_BODY] = options.max_body_bytes
    handlers = _Handlers(decider, observe or (lambda *_: None))
    app.router.add_post("/filter", handlers.filter)
    app.router.add_post("/prioritize", handlers.prioritize)
    document = json.dumps(openapi.document(), indent=2).encode()

    async def published(_: web.Request) -> web.Response:
        return web.Response(body=document, content_type="application/json")

    app.router.add_get("/openapi.json", published)
    return app


class _Handlers:
    def __init__(self, decider: Decider, observe: Observer) -> None:
        self._decider = decider
        self._observe = observe

    async def filter(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            args = await _args(request)
        except BadRequest as e:
            self._observe("filter", time.perf_counter() - started, "bad-request")
            return _error(400, str(e))
        try:
            answer = await self._decider.filter(args.pod, args.candidate_names())
        except Exception as e:
            logger.exception("filter failed for pod %s", _pod_name(args.pod))
            self._observe("filter", time.perf_counter() - started, "error")
            return _json(wire.ExtenderFilterResult.failure(f"fabricsched filter failed: {e}").to_wire())
        if answer.error:
            result = wire.ExtenderFilterResult.failure(answer.error)
        else:
            result = wire.ExtenderFilterResult.answering(
                args, answer.passed, answer.failed, answer.unresolvable
            )
        self._observe("filter", time.perf_counter() - started, "ok")
        return _json(result.to_wire())

    async def prioritize(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            args = await _args(request)
        except BadRequest as e:
            self._observe("prioritize", time.perf_counter() - started, "bad-request")
            return _error(400, str(e))
        try:
            scores = self._decider.prioritize(args.pod, args.candidate_names())
        except Exception:
            # A prioritize failure only loses our preference; the filter already steered.
            logger.exception("prioritize failed for pod %s", _pod_name(args.pod))
            self._observe("prioritize", time.perf_counter() - started, "error")
            return _error(500, "fabricsched prioritize failed")
        self._observe("prioritize", time.perf_counter() - started, "ok")
        return _json([{"Host": host, "Score": score} for host, score in scores])


async def _args(request: web.Request) -> wire.ExtenderArgs:
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge as e:
        raise BadRequest(f"body larger than {request.app[_MAX_BODY]} bytes") from e
    except Exception as e:  # the client hung up mid-body: a truncated request
        raise BadRequest(f"could not read the body: {e}") from e
    if request.content_length is not None and len(body) < request.content_length:
        raise BadRequest(f"truncated body: {len(body)} of {request.content_length} bytes")
    try:
        decoded = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRequest(f"body is not JSON: {e}") from e
    if not isinstance(decoded, dict):
        raise BadRequest("body must be a JSON object (ExtenderArgs)")
    try:
        args = wire.ExtenderArgs.model_validate(decoded)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise BadRequest(f"invalid ExtenderArgs at {where}: {first['msg']}") from e
    if args.node_names is None and args.nodes is None:
        raise BadRequest("ExtenderArgs has neither NodeNames nor Nodes")
    return args


def _pod_name(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace', 'default')}/{metadata.get('name', '?')}"


def _json(payload: Any) -> web.Response:
    return web.Response(
        body=json.dumps(payload, separators=(",", ":")).encode(), content_type="application/json"
    )


def _error(status: int, message: str) -> web.Response:
    body = json.dumps({"error": message}).encode()
    return web.Response(status=status, body=body, content_type="application/json")

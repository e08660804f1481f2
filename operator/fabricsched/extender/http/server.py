"""The HTTP face of the extender: ``POST /filter``, ``POST /prioritize`` (kube-scheduler extender
v1 wire format, ``nodeCacheCapable``), and ``GET /openapi.json``.

A request the scheduler could not have meant (malformed, truncated or oversized body) gets
HTTP 400 with a JSON ``{"error": ...}`` and the server keeps serving; the decision itself is
the coordinator's.

Bodies carry every node that fits the pod (10k names in, 10k reasons or scores out), so the
per-call JSON work is kept to single passes in compiled code: the request is parsed and
validated by pydantic straight from the bytes (``ExtenderArgs.model_validate_json``), and the
usual answers (``NodeNames`` form, scores) are encoded from plain dicts and strings with
``pydantic_core.to_json`` instead of dumping response models (the rare ones, errors and the
``Nodes`` form, still go through the wire models). ``encode_scores`` and ``encode_filter`` are
shared with the benchmark's pass-through server, so both pay the same encoding.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import pydantic
import pydantic_core
from aiohttp import http_exceptions, web, web_protocol

from fabricsched import parsing
from fabricsched.api import extender as wire
from fabricsched.extender.decide import answers
from fabricsched.extender.http import openapi
from fabricsched.ports import errors

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
"""A 10k-node NodeNames list is ~200 KiB; a whole NodeList (nodeCacheCapable off) far more."""


class Decider(Protocol):
    """What the server asks (``decide.coordinator.Coordinator``; the benchmarks pass a stand-in)."""

    async def filter(
        self, manifest: Mapping[str, Any], node_names: Sequence[str]
    ) -> answers.FilterAnswer: ...

    def prioritize(
        self, manifest: Mapping[str, Any], node_names: Sequence[str]
    ) -> answers.Scores | Iterable[tuple[str, int]]: ...


_MAX_BODY = web.AppKey("max_body_bytes", int)
_UNREADABLE = (
    OSError, aiohttp.ClientError, http_exceptions.HttpProcessingError, web_protocol.PayloadAccessError,
)
"""What reading a request body raises when the client's bytes stop short or break the framing."""

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


Answer = tuple[web.Response, str]
"""A verb's response and its outcome for the observer (``ok`` or ``error``)."""


class _Handlers:
    """Both verbs share the frame (``_serve``): parse the body or answer 400, decide, time it,
    tell the observer; each verb says only how it decides and how it fails."""

    def __init__(self, decider: Decider, observe: Observer) -> None:
        self._decider = decider
        self._observe = observe

    async def filter(self, request: web.Request) -> web.Response:
        return await self._serve("filter", request, self._filter, _filter_failed)

    async def prioritize(self, request: web.Request) -> web.Response:
        return await self._serve("prioritize", request, self._prioritize, _prioritize_failed)

    async def _serve(
        self,
        verb: str,
        request: web.Request,
        decide: Callable[[wire.ExtenderArgs], Awaitable[Answer]],
        failed: Callable[[str], web.Response],
    ) -> web.Response:
        started = time.perf_counter()
        try:
            args = await _args(request)
        except BadRequest as e:
            response, outcome = _error(400, str(e)), "bad-request"
        else:
            try:
                response, outcome = await decide(args)
            except parsing.Invalid as e:  # a pod field of the wrong JSON type: no scheduler sent it
                response, outcome = _error(400, f"invalid pod: {e}"), "bad-request"
            except Exception:
                # The one last resort of the request path: a defect in a decision answers this
                # request with an error and the server goes on answering the scheduler.
                logger.exception("%s failed for pod %s", verb, _pod_name(args.pod))
                response, outcome = failed(f"fabricsched {verb} failed"), "error"
        self._observe(verb, time.perf_counter() - started, outcome)
        return response

    async def _filter(self, args: wire.ExtenderArgs) -> Answer:
        try:
            answer = await self._decider.filter(args.pod, args.candidate_names())
        except errors.ApiError as e:
            # A lookup the decision needed failed (the pod's Job): the scheduler asks again.
            logger.warning("filter for pod %s could not reach the API server: %s", _pod_name(args.pod), e)
            return _filter_failed(f"fabricsched filter failed: {e}"), "error"
        if answer.error:
            body = _dumps(wire.ExtenderFilterResult.failure(answer.error).to_wire())
        elif args.node_cache_capable or args.nodes is None:
            body = encode_filter(answer.passed, answer.failed, answer.unresolvable)
        else:
            body = _dumps(
                wire.ExtenderFilterResult.answering(args, answer.passed, answer.failed, answer.unresolvable)
                .to_wire()
            )
        return _body(body), "ok"

    async def _prioritize(self, args: wire.ExtenderArgs) -> Answer:
        # A prioritize failure (answered by ``_serve``) only loses our preference: the filter steered.
        scores = self._decider.prioritize(args.pod, args.candidate_names())
        return _body(encode_scores(scores)), "ok"


def _filter_failed(message: str) -> web.Response:
    # The scheduler reads a filter's failure from the Error field of a 200 answer.
    return _json(wire.ExtenderFilterResult.failure(message).to_wire())


def _prioritize_failed(message: str) -> web.Response:
    return _error(500, message)


def encode_filter(passed: list[str], failed: Mapping[str, str], unresolvable: Mapping[str, str]) -> bytes:
    """An ``ExtenderFilterResult`` in the ``NodeNames`` form, as ``to_wire`` would give it."""
    return pydantic_core.to_json(
        {"NodeNames": passed, "FailedNodes": failed, "FailedAndUnresolvableNodes": unresolvable, "Error": ""}
    )


_HOST = '{"Host":"'
_SCORE = '","Score":'


def encode_scores(scores: answers.Scores | Iterable[tuple[str, int]]) -> bytes:
    """A ``HostPriorityList``. For ``Scores`` whose names need no JSON escaping (node names
    never do: they are DNS names) the array is one ``str.join``, the planned node's entry
    then swapped; anything else is encoded entry by entry."""
    if isinstance(scores, answers.Scores):
        names = "".join(scores.nodes)
        if names.isprintable() and '"' not in names and "\\" not in names:
            if not scores.nodes:
                return b"[]"
            other = f"{_SCORE}{answers.OTHER_SCORE}}}"
            text = f"[{_HOST}" + f"{other},{_HOST}".join(scores.nodes) + f"{other}]"
            if scores.planned is not None:
                text = text.replace(
                    f"{_HOST}{scores.planned}{other}",
                    f"{_HOST}{scores.planned}{_SCORE}{answers.PLANNED_SCORE}}}",
                )
            return text.encode()
    return pydantic_core.to_json([{"Host": host, "Score": score} for host, score in scores])


async def _args(request: web.Request) -> wire.ExtenderArgs:
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge as e:
        raise BadRequest(f"body larger than {request.app[_MAX_BODY]} bytes") from e
    except _UNREADABLE as e:  # the client hung up mid-body, or sent a broken chunk: a truncated request
        raise BadRequest(f"could not read the body: {e}") from e
    if request.content_length is not None and len(body) < request.content_length:
        raise BadRequest(f"truncated body: {len(body)} of {request.content_length} bytes")
    try:
        # Parsed and validated in one pass from the bytes (no intermediate json.loads tree).
        args = wire.ExtenderArgs.model_validate_json(body)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        if first["type"] == "json_invalid":
            raise BadRequest(f"body is not JSON: {first['msg']}") from e
        if first["type"] == "model_type" and not first["loc"]:
            raise BadRequest("body must be a JSON object (ExtenderArgs)") from e
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise BadRequest(f"invalid ExtenderArgs at {where}: {first['msg']}") from e
    if args.node_names is None and args.nodes is None:
        raise BadRequest("ExtenderArgs has neither NodeNames nor Nodes")
    return args


def _pod_name(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace', 'default')}/{metadata.get('name', '?')}"


def _dumps(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def _body(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="application/json")


def _json(payload: Any) -> web.Response:
    return _body(_dumps(payload))


def _error(status: int, message: str) -> web.Response:
    body = json.dumps({"error": message}).encode()
    return web.Response(status=status, body=body, content_type="application/json")

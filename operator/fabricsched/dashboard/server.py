"""The fabric page over HTTP (``fabricsched run --dashboard-address``, 127.0.0.1:8082 by default).

- ``/``: the page (``static/index.html``); ``/static/{app.js,style.css}``: its script and style.
- ``/api/state``: the page's JSON document (``document.build``), with an ETag. The page asks
  again every second with ``If-None-Match`` and gets a 304 while nothing moved.
- ``/api/diagnose?gang=NS/NAME[&since=DURATION]``: one gang's diagnosis (``diagnosis``), when
  the process was given a ``diagnosis.Diagnose`` (404 otherwise): on demand, cached and
  rate-limited per gang.
- anything else: 404.

Cheap for the process: a request compares the source's version (``view.PageSource.version``) with
the last one seen; only when it moved are the facts read again. Each topology's fabric part
(host rows, domains, their JSON) is built once per version, whatever the query; a query adds
only its filtered gang list, and the last ``MAX_CACHED`` answers are kept (least recently
asked goes first). Nothing here calls the API server.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from fabricsched.dashboard import assets, diagnosis, document, query, view

logger = logging.getLogger(__name__)

STATIC = {"app.js": "text/javascript", "style.css": "text/css"}
MIN_REBUILD_S = 1.0
MAX_CACHED = 32
"""Selections kept per version (the page asks for one; a few tabs for a few more)."""
_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    # The page loads its own script and style and nothing else, from nowhere else.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                               "base-uri 'none'; frame-ancestors 'none'",
}


@dataclass(frozen=True)
class DashboardOptions:
    address: str = "127.0.0.1:8082"
    """host:port of the page (``--dashboard-address``); empty: no page."""

    def __post_init__(self) -> None:
        if self.address:
            split_address(self.address)

    @property
    def enabled(self) -> bool:
        return bool(self.address)


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` ([::1]:8082 for IPv6) -> (host, port); raises ValueError when malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit() and len(port) <= 5) or int(port) > 65535:
        raise ValueError(f"expected host:port, got {address[:80]!r}")
    return host.strip("[]"), int(port)


class Documents:
    """The serialised document per selection at the source's current version."""

    def __init__(self, source: view.PageSource, min_rebuild_s: float = MIN_REBUILD_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.min_rebuild_s = min_rebuild_s
        """While the cluster moves, the document is rebuilt at most this often (the page asks
        once a second): the event loop the extender answers on pays for one build per period."""
        self.clock = clock
        self._version: Hashable = object()
        self._generation = 0
        self._snapshot: view.PageSnapshot | None = None
        self._bodies: collections.OrderedDict[document.Selection, tuple[str, bytes]] = \
            collections.OrderedDict()
        self._fabrics: dict[str, dict[str, Any]] = {}
        self._fabric_texts: dict[str, str] = {}
        self._rows = document.Rows()
        self._built_at = -math.inf

    def get(self, selection: document.Selection) -> tuple[str, bytes]:
        """(ETag, JSON body) of ``selection`` now."""
        now = self.clock()
        if self._snapshot is None or (now - self._built_at >= self.min_rebuild_s
                                      and (version := self.source.version()) != self._version):
            self._version = self.source.version() if self._snapshot is None else version
            self._generation += 1
            self._built_at = now
            self._snapshot = self.source.snapshot()
            self._rows.forget_other({str(f.name) for f in self._snapshot.fabrics})
            self._bodies.clear()
            self._fabrics.clear()
            self._fabric_texts.clear()
        found = self._bodies.get(selection)
        if found is not None:
            self._bodies.move_to_end(selection)
            return found
        # The fabric part (its rows, domains and their JSON) is built once per version and
        # topology; a new query only filters the gangs and joins the parts.
        doc = document.build(self._snapshot, selection, self._rows, self._fabrics)
        doc["version"] = self._generation
        body = document.dumps(doc, self._rows, self._fabric_texts)
        tag = hashlib.blake2s(repr(selection).encode(), digest_size=6).hexdigest()
        found = (f'"{self._generation}-{tag}"', body)
        if len(self._bodies) >= MAX_CACHED:
            self._bodies.popitem(last=False)
        self._bodies[selection] = found
        return found


Settle = Callable[[], Awaitable[None]]
"""Awaited before a query reads the source: the front process waits there for fresh facts
after a quiet spell (``app.front_wire.Received.settle``)."""


async def _settled() -> None:
    return None


def make_app(source: view.PageSource, min_rebuild_s: float = MIN_REBUILD_S,
             diagnose: diagnosis.Diagnose | None = None, settle: Settle = _settled) -> web.Application:
    documents = Documents(source, min_rebuild_s)
    diagnoses = diagnosis.Diagnoses(source, diagnose) if diagnose is not None else None
    page = assets.read("index.html").encode()
    statics = {name: assets.read(name).encode() for name in STATIC}

    async def index(_: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html", charset="utf-8", headers=_HEADERS)

    async def static(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in statics:
            raise web.HTTPNotFound(text="not found\n")
        return web.Response(body=statics[name], content_type=STATIC[name], charset="utf-8", headers=_HEADERS)

    async def state(request: web.Request) -> web.Response:
        try:
            selection = query.parse(request.query_string, request.query.items())
        except query.BadQuery as e:
            return web.json_response({"error": str(e)}, status=400, headers=_HEADERS)
        await settle()
        tag, body = documents.get(selection)
        if tag in request.headers.get("If-None-Match", ""):
            return web.Response(status=304, headers={**_HEADERS, "ETag": tag})
        return web.Response(body=body, content_type="application/json", headers={**_HEADERS, "ETag": tag})

    async def diagnose_gang(request: web.Request) -> web.Response:
        if diagnoses is None:
            return web.json_response({"error": "diagnosis is not served by this process"}, status=404,
                                     headers=_HEADERS)
        await settle()
        answer = await diagnoses.answer(request.query_string, request.query.items())
        headers = {**_HEADERS, "Age": str(int(answer.age_s))}
        if answer.retry_after_s is not None:
            headers["Retry-After"] = str(math.ceil(answer.retry_after_s))
        return web.json_response(dict(answer.body), status=answer.status, headers=headers)

    async def close(_: web.Application) -> None:
        if diagnoses is not None:
            await diagnoses.close()

    app = web.Application()
    app.on_cleanup.append(close)
    app.router.add_get("/", index)
    app.router.add_get("/static/{name}", static)
    app.router.add_get("/api/state", state)
    app.router.add_get("/api/diagnose", diagnose_gang)
    return app


async def serve(source: view.PageSource, options: DashboardOptions,
                listening: asyncio.Event | None = None, diagnose: diagnosis.Diagnose | None = None,
                settle: Settle = _settled) -> None:
    """Serve the page on ``options.address`` until cancelled; ``listening`` is set once it
    listens, or once it gave up (it cannot listen: logged, the rest goes on)."""
    host, port = split_address(options.address)
    runner = web.AppRunner(make_app(source, diagnose=diagnose, settle=settle), access_log=None)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as e:
            # The page is an extra: the operator and the extender go on without it.
            logger.error("fabric page not served: cannot listen on %s: %s", options.address, e)
            return
        finally:
            if listening is not None:
                listening.set()
        logger.info("fabric page on http://%s:%d/", host, port)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()

"""List, then watch, one kind of object: the one list-and-watch of the process.

The cluster state follows its kinds with it (``controller.informer``) and the extender follows
FabricPlacement objects with it (``extender.kube.feed``). Why not kopf's handlers or the client's
``watch``: kopf gives every object of an initial listing its own worker and readiness toggle, and
every toggle dropped wakes every waiting worker to check all toggles again, so the time to the
first decision grew with the square of the cluster (minutes at 5,000 nodes); the synchronous
client needs a thread per watch. Here a kind is listed in pages (``limit``/``continue``), every
object is applied as the page arrives, and the watch resumes from the last version applied. A
watch that expired (410 Gone, as a status or as an ERROR event) lists again and drops what the
new listing no longer holds: one way to handle 410 for every follower. A kind the cluster may
not serve (``Kind.optional``: DRA before its API version, a CRD not installed) that answers 404
(or 403: not to us) counts as listed, holding nothing, and is asked again every
``NOT_SERVED_RETRY_S``.

Flow per kind: ``Informer.follow`` -> ``_relist`` (pages -> ``Kind.apply``) -> ``on_listed`` ->
``_watch`` (events -> ``Kind.apply`` / ``Kind.delete``) until it ends or expires, forever;
``Kind.settle`` after each page and each event.
Everything runs on the event loop thread; a page is parsed and applied between two awaits, so
the loop answering the scheduler waits for at most one page.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import pydantic_core

from fabricsched import parsing

logger = logging.getLogger(__name__)

PAGE_SIZE = 500
"""Objects per list request: bounds the memory and the loop time one page takes."""
WATCH_TIMEOUT_S = 300
"""The API server ends each watch after this long; it is then resumed from the last version."""
RETRY_S = (0.5, 1.0, 2.0, 5.0)
"""Waits before retrying a failed list or watch (the last one repeats)."""
MAX_LINE_BYTES = 16 * 1024 * 1024
"""Longest watch event accepted (an object the API server stores is at most about 1.5 MiB)."""
NOT_SERVED_RETRY_S = 60.0
"""How often an optional kind the API server does not serve (404) is asked for again."""

Key = tuple[str, str]
"""(namespace, name); the namespace is "" for cluster-scoped kinds."""


@dataclass(frozen=True)
class Kind:
    """One watched kind and what the state does with its objects."""

    name: str
    """For logs and metrics (``node``, ``pod``, ...)."""
    path: str
    """The collection's URL path, e.g. ``/api/v1/nodes``."""
    apply: Callable[[Mapping[str, Any]], None]
    delete: Callable[[Key], None]
    known: Callable[[], Iterable[Key]]
    """Keys the state holds of this kind: after a relist, those not listed are deleted."""
    settle: Callable[[], None] = lambda: None
    """Called after each listing page and each watch event: work the applies left for later,
    once per page (one recount for 500 objects, not 500), once per event while watching."""
    optional: bool = False
    """The API server may not serve it (an API version or CRD a cluster lacks): a 404 (or a 403)
    counts as a listing of nothing (readiness does not wait for it), asked for again every
    ``NOT_SERVED_RETRY_S``."""
    rejects: tuple[type[Exception], ...] = ()
    """What ``apply`` raises for a malformed object: skipped with a one-line warning (no
    traceback) and counted as failed; the watch goes on."""


class Expired(Exception):
    """The resource version to resume from is too old (410 Gone): list again."""


class ApiFailure(Exception):
    """A list or watch request answered with an error status."""


class NotServed(ApiFailure):
    """The API server does not serve the collection (404: its API or CRD is not there), or not to
    this process (403: its RBAC lacks the rule)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _failure(status: int, message: str) -> ApiFailure:
    return NotServed(message, status) if status in (403, 404) else ApiFailure(message)


def _parse(data: bytes) -> Any:
    """JSON of a listing page or a watch event. pydantic's parser (compiled, already a dependency)
    reads a 4 KB pod event in 16 us where ``json.loads`` takes 41: during a round of binds the
    pod events were 14% of the loop thread's time. Invalid JSON raises ``ValueError``, as
    ``json.loads`` does."""
    return pydantic_core.from_json(data)


def key_of(body: Mapping[str, Any]) -> Key:
    metadata = body.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


class ServerAccess(Protocol):
    """Where the API server is and how to log in (``kopf.ConnectionInfo`` has these fields)."""

    @property
    def server(self) -> str: ...
    @property
    def ca_path(self) -> str | None: ...
    @property
    def insecure(self) -> bool | None: ...
    @property
    def certificate_path(self) -> str | None: ...
    @property
    def private_key_path(self) -> str | None: ...
    @property
    def token(self) -> str | None: ...
    @property
    def scheme(self) -> str | None: ...
    @property
    def username(self) -> str | None: ...
    @property
    def password(self) -> str | None: ...


@dataclass(frozen=True)
class Login:
    """``ServerAccess`` read from a kubernetes client's configuration (``login_of``)."""

    server: str
    ca_path: str | None = None
    insecure: bool | None = None
    certificate_path: str | None = None
    private_key_path: str | None = None
    token: str | None = None
    scheme: str | None = None
    username: str | None = None
    password: str | None = None


def login_of(config: Any) -> Login:
    """The credentials of a ``kubernetes.client.Configuration`` (files already written by the
    client: certificates are read by path)."""
    token = scheme = None
    header = (config.api_key or {}).get("authorization") or (config.api_key or {}).get("BearerToken")
    if header:
        scheme, _, token = str(header).partition(" ")
        if not token:
            scheme, token = "Bearer", scheme
    return Login(
        server=config.host, ca_path=config.ssl_ca_cert or None, insecure=not config.verify_ssl,
        certificate_path=config.cert_file or None, private_key_path=config.key_file or None,
        token=token, scheme=scheme, username=config.username or None, password=config.password or None,
    )


class Observer(Protocol):
    """Told what an informer applied (the operator's metrics); ``None`` observes nothing."""

    def applied(self, kind: str, seconds: float) -> None: ...

    def deleted(self, kind: str) -> None: ...

    def failed(self, kind: str) -> None:
        """Applying or deleting one object raised (a defect, logged with its traceback)."""
        ...


class Connection:
    """GET requests to the API server with the process's credentials.

    ``compression`` False (the default) asks for listings as they are (``Accept-Encoding:
    identity``), as the kube-scheduler and kube-controller-manager do: aiohttp asks for gzip by
    default, and the API server then compresses every page over 128 KiB, CPU it and this process
    spend on every listing for a network a cluster's own control plane seldom lacks."""

    def __init__(self, login: Callable[[], ServerAccess], compression: bool = False) -> None:
        self._login = login
        self._encoding = "gzip" if compression else "identity"
        self._session: aiohttp.ClientSession | None = None
        self._server = ""

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            info = self._login()
            context = ssl.create_default_context(cafile=info.ca_path) if info.ca_path else \
                ssl.create_default_context()
            if info.insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if info.certificate_path and info.private_key_path:
                context.load_cert_chain(info.certificate_path, info.private_key_path)
            headers = {"Accept": "application/json", "Accept-Encoding": self._encoding}
            if info.token:
                headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
            auth = aiohttp.BasicAuth(info.username, info.password or "") if info.username else None
            self._server = info.server.rstrip("/")
            self._session = aiohttp.ClientSession(
                headers=headers, auth=auth, connector=aiohttp.TCPConnector(ssl=context),
                read_bufsize=1 << 20, max_line_size=MAX_LINE_BYTES, max_field_size=MAX_LINE_BYTES,
            )
        return self._session

    async def _forget_on_401(self, status: int) -> None:
        if status == 401 and self._session is not None:  # a rotated token: log in again next time
            await self.close()

    async def get(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        session = self._open()
        timeout = aiohttp.ClientTimeout(total=60)
        async with session.get(self._server + path, params=params, timeout=timeout) as response:
            if response.status == 410:
                raise Expired(path)
            if response.status >= 400:
                await self._forget_on_401(response.status)
                raise _failure(response.status,
                               f"GET {path}: {response.status} {(await response.text())[:300]}")
            body = await response.read()
        parsed = _parse(body)
        if not isinstance(parsed, dict):
            raise ApiFailure(f"GET {path}: not a JSON object")
        return parsed

    async def stream(self, path: str, params: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        """The events of one watch request, parsed, until the server ends it."""
        session = self._open()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=WATCH_TIMEOUT_S + 30)
        async with session.get(self._server + path, params=params, timeout=timeout) as response:
            if response.status == 410:
                raise Expired(path)
            if response.status >= 400:
                await self._forget_on_401(response.status)
                raise _failure(response.status,
                               f"watch {path}: {response.status} {(await response.text())[:300]}")
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                if len(buffer) > MAX_LINE_BYTES:
                    raise ApiFailure(f"watch {path}: an event longer than {MAX_LINE_BYTES} bytes")
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        event = _parse(line)
                        if isinstance(event, dict):
                            yield event

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


class Informer:
    """Keeps one kind current for its ``Kind``: ``follow`` runs until cancelled."""

    def __init__(self, connection: Connection, kind: Kind, observer: Observer | None = None,
                 on_listed: Callable[[], None] = lambda: None, page_size: int = PAGE_SIZE,
                 since: str | None = None) -> None:
        self.connection = connection
        self.kind = kind
        self.observer = observer
        self.on_listed = on_listed
        """Called once, when the first listing is applied in full."""
        self.page_size = page_size
        self.version: str | None = since or None
        """Where the watch starts: ``since`` (a listing the caller made already), else a listing."""
        """The resourceVersion of the last event applied (or of the listing): a watch that
        breaks resumes from it, not from an older version the API server may have let go of
        (410: a full listing again, seconds at 50,000 pods)."""
        self._listed = False
        self.served = True
        """False while an optional kind answers 404 (logged once each time it goes)."""

    async def follow(self) -> None:
        failures = 0
        while True:
            try:
                if self.version is None:
                    self.version = await self._relist()
                    self._mark_listed()
                await self._watch()
                failures = 0
            except Expired:
                logger.info("the %s watch expired; listing again", self.kind.name)
                self.version = None
            except (TimeoutError, aiohttp.ClientError, ApiFailure, ValueError, OSError) as e:
                if isinstance(e, NotServed) and self.kind.optional:
                    failures = 0
                    await self._not_served(e.status)
                    continue
                wait = RETRY_S[min(failures, len(RETRY_S) - 1)]
                failures += 1
                logger.warning("%s list/watch failed (retrying in %.1f s): %s", self.kind.name, wait, e)
                await asyncio.sleep(wait)

    def _mark_listed(self) -> None:
        if not self.served:
            self.served = True
            logger.info("%s is served now", self.kind.path)
        if not self._listed:
            self._listed = True
            self.on_listed()

    async def _not_served(self, status: int) -> None:
        """An optional kind answered 404 (or 403): it holds nothing (a CRD deleted takes its
        objects with it), readiness does not wait for it, and it is asked for again later.
        Logged once each time it goes, not per retry; a 403 as a warning (the RBAC lacks a rule
        the chart grants)."""
        if self.served:
            self.served = False
            if status == 403:
                logger.warning("%s is forbidden to this process (403: its RBAC lacks list/watch); "
                               "going on without it, asking again every %g s", self.kind.path,
                               NOT_SERVED_RETRY_S)
            else:
                logger.info("%s is not served (404: an API or CRD this cluster does not have); "
                            "asking again every %g s", self.kind.path, NOT_SERVED_RETRY_S)
        for gone in list(self.kind.known()):
            self._delete(gone)
        self._settle()
        self.version = None
        if not self._listed:
            self._listed = True
            self.on_listed()
        await asyncio.sleep(NOT_SERVED_RETRY_S)

    async def _relist(self) -> str:
        started = time.monotonic()
        seen: set[Key] = set()
        params = {"limit": str(self.page_size)}
        while True:
            page = await self.connection.get(self.kind.path, params)
            for item in page.get("items") or ():
                if isinstance(item, Mapping):
                    seen.add(key_of(item))
                    self._apply(item)
            self._settle()
            metadata = page.get("metadata") or {}
            del page  # freed now, not frozen below
            # What a listing applies lives as long as the process: out of the collector's
            # sight, it is not walked again by every collection the next pages' parsing sets
            # off (at 50,000 pods those collections were 7 of the 9 s spent parsing).
            gc.freeze()
            token = metadata.get("continue")
            if not token:
                break
            params = {"limit": str(self.page_size), "continue": str(token)}
            await asyncio.sleep(0)  # let the loop answer between two pages
        for gone in [k for k in self.kind.known() if k not in seen]:
            self._delete(gone)
        self._settle()
        logger.info("listed %d of %s in %.1f s", len(seen), self.kind.path, time.monotonic() - started)
        return str(metadata.get("resourceVersion") or "")

    async def _watch(self) -> None:
        params = {"watch": "1", "resourceVersion": self.version or "", "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(WATCH_TIMEOUT_S)}
        async for event in self.connection.stream(self.kind.path, params):
            kind, body = event.get("type"), event.get("object")
            if not isinstance(body, Mapping):
                continue
            if kind == "ERROR":
                if body.get("code") == 410:
                    raise Expired(self.kind.path)
                raise ApiFailure(f"watch {self.kind.path}: {str(body.get('message'))[:300]}")
            if kind in ("ADDED", "MODIFIED"):
                self._apply(body)
                self._settle()
            elif kind == "DELETED":
                self._delete(key_of(body))
                self._settle()
            self.version = str((body.get("metadata") or {}).get("resourceVersion") or self.version)

    def _apply(self, body: Mapping[str, Any]) -> None:
        started = time.perf_counter()
        try:
            self.kind.apply(body)
        except self.kind.rejects as e:  # malformed (a forged or future object): skipped, said why
            if self.observer is not None:
                self.observer.failed(self.kind.name)
            logger.warning("ignoring %s %s: %s", self.kind.name, parsing.excerpt(key_of(body)[1], 80),
                           str(e)[:500])
            return
        except Exception:  # an object no parser foresaw must not stop the watch of all others
            if self.observer is not None:
                self.observer.failed(self.kind.name)
            logger.exception("cannot apply %s %s", self.kind.name, "/".join(p for p in key_of(body) if p))
            return
        if self.observer is not None:
            self.observer.applied(self.kind.name, time.perf_counter() - started)

    def _delete(self, key: Key) -> None:
        try:
            self.kind.delete(key)
        except Exception:  # as above: one object never stops the watch
            if self.observer is not None:
                self.observer.failed(self.kind.name)
            logger.exception("cannot delete %s %s", self.kind.name, "/".join(p for p in key if p))
            return
        if self.observer is not None:
            self.observer.deleted(self.kind.name)

    def _settle(self) -> None:
        try:
            self.kind.settle()
        except Exception:  # as above: the follow-up work of one page never stops the watch
            if self.observer is not None:
                self.observer.failed(self.kind.name)
            logger.exception("cannot settle the %ss applied", self.kind.name)

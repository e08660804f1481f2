"""/healthz, /readyz and /metrics of ``fabricsched run`` (127.0.0.1:8081 by default).

- /healthz: the process and its event loop answer (liveness: restart only a hung process).
- /readyz: the initial listings of nodes, pods, Jobs and FabricTopologies are applied, and
  every other part given (``views.Readiness``: the extender, once its reservations are
  restored; the status reporter, after its first pass) is ready; before that the state is
  partial, and so would be any placement.
- /metrics: Prometheus text format of the process's registry.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from fabricsched.controller import runtime
from fabricsched.ports import views

CONTENT_TYPE_LATEST = "text/plain; version=0.0.4; charset=utf-8"


def app(rt: runtime.Runtime, parts: Sequence[views.Readiness] = ()) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if not rt.state.synced:
            return web.Response(status=503, text="initial listings not applied yet\n")
        for part in parts:
            reason = part.not_ready()
            if reason is not None:
                return web.Response(status=503, text=f"{reason}\n")
        return web.Response(text="ok\n")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=rt.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    application = web.Application()
    application.router.add_get("/healthz", healthz)
    application.router.add_get("/readyz", readyz)
    application.router.add_get("/metrics", metrics)
    return application


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:8081`` for IPv6) -> (host, port); raises ValueError when malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit() and len(port) <= 5) or not host:
        raise ValueError(f"expected host:port, got {address!r}")
    return host.strip("[]"), int(port)


async def start(rt: runtime.Runtime, parts: Sequence[views.Readiness] = ()) -> web.AppRunner:
    """Listen on ``rt.options.health_address``; the caller cleans the runner up at shutdown."""
    host, port = split_address(rt.options.health_address)
    runner = web.AppRunner(app(rt, parts), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner

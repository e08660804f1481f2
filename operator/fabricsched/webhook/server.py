"""The webhook's HTTPS server: ``POST /scheduler-name`` answered by ``review.answer``.

Served without kopf (kopf's admission server kept a record per uid of every review that was
not a CREATE, and never freed it), in the front process of ``fabricsched run``
(``app.front``), away from the event loop that answers the kube-scheduler. Bounds:

- a body of at most ``MAX_BODY_BYTES`` (8 MiB: a pod object reaches about 1.5 MiB in etcd and
  3 MiB in a request the API server accepts; an UPDATE review would carry two of them), else 413;
- at most ``MAX_PARSING`` reviews read and decoded at once, the others wait their turn;
- at most ``MAX_WAITING`` requests in the house; beyond, 503 at once.

Every error answer (400, 413, 503) admits the pod unchanged (``failurePolicy: Ignore``). The
certificate files are read again when they change (a renewed Secret needs no restart). With
``client_ca`` only clients showing a certificate it signed complete the TLS handshake.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

from aiohttp import web

from fabricsched.api import admission
from fabricsched.webhook import options as webhook_options
from fabricsched.webhook import review

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_PARSING = 4
MAX_WAITING = 64
RELOAD_EVERY_S = 10.0


def make_app(options: webhook_options.WebhookOptions) -> web.Application:
    gate = asyncio.Semaphore(MAX_PARSING)
    inside = 0

    async def scheduler_name(request: web.Request) -> web.Response:
        nonlocal inside
        if inside >= MAX_WAITING:
            return web.Response(status=503, text="busy\n")
        inside += 1
        try:
            async with gate:
                raw = await request.read()  # over client_max_size: 413 from aiohttp
                answer = review.answer(raw, options)
                del raw
        except review.BadReview as e:
            return web.Response(status=400, text=f"not an AdmissionReview: {e}\n")
        finally:
            inside -= 1
        if answer.patched:
            logger.debug("a GPU pod's CREATE answered with schedulerName set")
        return web.Response(body=answer.body, content_type="application/json")

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post(admission.PATH, scheduler_name)
    return app


class Certificates:
    """The serving context, its certificate read again when the files change."""

    def __init__(self, options: webhook_options.WebhookOptions) -> None:
        self.options = options
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        if options.client_ca is not None:
            self.context.verify_mode = ssl.CERT_REQUIRED
            self.context.load_verify_locations(cafile=str(options.client_ca))
        self._seen = self._stamp()
        self.context.load_cert_chain(str(options.cert_file), str(options.key_file))

    def _stamp(self) -> tuple[float, ...]:
        return tuple(_mtime(p) for p in (self.options.cert_file, self.options.key_file))

    def reload_if_changed(self) -> bool:
        stamp = self._stamp()
        if stamp == self._seen:
            return False
        try:
            self.context.load_cert_chain(str(self.options.cert_file), str(self.options.key_file))
        except (OSError, ssl.SSLError) as e:  # half-written files: the next round reads them again
            logger.warning("webhook certificate not reloaded: %s", str(e)[:200])
            return False
        self._seen = stamp
        logger.info("webhook certificate reloaded from %s", self.options.cert_file)
        return True


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


async def serve(options: webhook_options.WebhookOptions, listening: asyncio.Event | None = None) -> None:
    """Serve the webhook on ``options.address`` until cancelled; raises OSError when it cannot listen."""
    certificates = Certificates(options)
    runner = web.AppRunner(make_app(options), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, options.host, options.port, ssl_context=certificates.context).start()
        logger.info("namespace opt-in webhook on https://%s%s", options.address, admission.PATH)
        if listening is not None:
            listening.set()
        while True:
            await asyncio.sleep(RELOAD_EVERY_S)
            certificates.reload_if_changed()
    finally:
        await runner.cleanup()

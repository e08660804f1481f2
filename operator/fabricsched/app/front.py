"""The front process of ``fabricsched run``: the namespace opt-in webhook and the fabric page,
in a child process, away from the event loop that answers the kube-scheduler.

    python -m fabricsched.app.front     (started by ``front_link.Front``, never by hand)

Why a process and not a thread: decoding a 0.9 MB AdmissionReview holds the interpreter's lock
for milliseconds, and a flood of them (or of page queries) would stall ``/filter``. Here it
stalls only this process, which has its own loop, its own body and concurrency limits
(``webhook.server``, ``dashboard.query``) and its own memory; its allocator is told to give
large blocks back (``MALLOC_MMAP_THRESHOLD_``, set by the parent), so a burst's memory returns.

It reads its options, then the page's facts per state version, from stdin (``front_wire``):
no watch of its own. It prints ``ready`` on stdout once its servers listen, then asks for the
facts there while the page is read (``front_wire.WANT``, ``front_wire.FRESH``), and ends when
stdin ends (the parent stopped, or died: no orphan stays behind).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from fabricsched.app import front_diagnose, front_wire
from fabricsched.controller import logs
from fabricsched.dashboard import server as dashboard_server
from fabricsched.webhook import options as webhook_options
from fabricsched.webhook import server as webhook_server

logger = logging.getLogger("fabricsched.app.front")
READY = b"ready\n"


@dataclass(frozen=True)
class FrontOptions:
    webhook: webhook_options.WebhookOptions | None
    dashboard: dashboard_server.DashboardOptions
    log_format: str = "text"
    verbose: bool = False
    diagnosis: front_diagnose.PageDiagnosis | None = None
    """A gang's diagnosis on the page (``/api/diagnose``); None: not served."""

    @property
    def needed(self) -> bool:
        return self.webhook is not None or self.dashboard.enabled


def _follow(stream: IO[bytes], source: front_wire.Received, loop: asyncio.AbstractEventLoop,
            ended: asyncio.Event) -> None:
    """Reader thread: every frame into ``source`` until the stream ends."""
    decoder = front_wire.Decoder()
    try:
        while (payload := front_wire.read_frame(stream)) is not None:
            source.put(*decoder.decode(payload))
    except Exception:
        logger.exception("the state pipe broke")
    finally:
        loop.call_soon_threadsafe(ended.set)


async def serve(options: FrontOptions, stream: IO[bytes], out: IO[bytes]) -> int:
    def ask(line: bytes) -> None:
        # A few bytes on a pipe the parent reads all the time: the write does not block.
        out.write(line)
        out.flush()

    source = front_wire.Received(ask)
    ended = asyncio.Event()
    threading.Thread(target=_follow, args=(stream, source, asyncio.get_running_loop(), ended),
                     name="state pipe", daemon=True).start()
    listening: list[asyncio.Event] = []
    tasks: list[asyncio.Task[None]] = []
    if options.webhook is not None:
        listening.append(asyncio.Event())
        tasks.append(asyncio.create_task(webhook_server.serve(options.webhook, listening[-1]),
                                         name="webhook"))
    diagnoser = front_diagnose.Diagnoser(options.diagnosis) if options.diagnosis is not None else None
    if options.dashboard.enabled:
        listening.append(asyncio.Event())
        tasks.append(asyncio.create_task(
            dashboard_server.serve(source, options.dashboard, listening[-1], diagnoser, source.settle),
            name="fabric page"))
    waits = [asyncio.create_task(e.wait()) for e in listening]
    all_listening = asyncio.create_task(_all(waits))
    await asyncio.wait([*tasks, all_listening], return_when=asyncio.FIRST_COMPLETED)
    all_listening.cancel()
    code = 0
    failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None]
    if failed:
        logger.error("front not served: %s", "; ".join(f"{t.get_name()}: {t.exception()}" for t in failed))
        code = 1
    else:
        out.write(READY)
        out.flush()
        code = await _until_ended(ended, tasks)
    for task in [*tasks, *waits]:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    if diagnoser is not None:
        diagnoser.close()
    return code


async def _all(waits: Sequence[asyncio.Task[Any]]) -> None:
    for wait in waits:
        await wait


async def _until_ended(ended: asyncio.Event, tasks: list[asyncio.Task[None]]) -> int:
    """0 when the stream ends; 1 when a server stops with an error first (the parent starts
    the front again). A server that gave up quietly (the page could not listen) is let go."""
    ending = asyncio.create_task(ended.wait())
    running = set(tasks)
    while True:
        done, _ = await asyncio.wait([ending, *running], return_when=asyncio.FIRST_COMPLETED)
        if ending in done:
            return 0
        for task in done:
            running.discard(task)
            if not task.cancelled() and task.exception() is not None:
                logger.error("%s stopped: %s", task.get_name(), task.exception())
                ending.cancel()
                return 1


def main() -> int:
    stream = sys.stdin.buffer
    payload = front_wire.read_frame(stream)
    if payload is None:
        return 0
    options = front_wire.read_options(payload)
    if not isinstance(options, FrontOptions):
        print("fabricsched front: the first frame is not its options", file=sys.stderr)
        return 2
    logs.configure(options.log_format, options.verbose)
    try:
        return asyncio.run(serve(options, stream, sys.stdout.buffer))
    except KeyboardInterrupt:  # the terminal's Ctrl-C reaches the whole group: the parent stops us
        return 0


if __name__ == "__main__":
    # Through the package's module, not ``__main__``: the options frame names its classes so.
    from fabricsched.app import front as _front

    sys.exit(_front.main())

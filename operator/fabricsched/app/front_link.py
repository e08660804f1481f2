"""``fabricsched run``'s side of its front process (``front``): start it before ready, feed it
the page's facts once per state version, start it again if it dies, stop it with the process.

Feeding costs the scheduler's loop one ``Source.version()`` per ``interval_s`` and, when the
version moved, one ``Source.snapshot()`` and its pickle (at 10,000 hosts about 2 ms and 3 to
7 ms; the fabric object itself, 25 ms, only when it changed: ``front_wire``). Nothing the front
receives from the network comes back to this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time

from fabricsched.app import front, front_wire
from fabricsched.dashboard import view

logger = logging.getLogger(__name__)

INTERVAL_S = 1.0
"""How often the state's version is compared (the page asks once a second)."""
MAX_BACKOFF_S = 30.0
_ALLOCATOR = {
    # Blocks of 128 KiB and more come from mmap and go back to the system when freed; without a
    # fixed threshold glibc raises it after the first frees and a burst's memory stays.
    "MALLOC_MMAP_THRESHOLD_": "131072",
    "MALLOC_ARENA_MAX": "2",
}


class Front:
    def __init__(self, options: front.FrontOptions, source: view.PageSource | None,
                 interval_s: float = INTERVAL_S) -> None:
        self.options = options
        self.source = source
        """The page's facts; None when the page is off (the webhook needs no state)."""
        self.interval_s = interval_s
        self.pid: int | None = None
        self.starts = 0
        self._reason: str | None = "the front process (webhook, fabric page) has not started yet"

    def not_ready(self) -> str | None:
        """Ready once the front listened, or tried once and failed (it is not the scheduler)."""
        return self._reason

    async def run(self) -> None:
        backoff = 1.0
        while True:
            started = time.monotonic()
            code = await self._once()
            self._reason = None
            if time.monotonic() - started > 60:
                backoff = 1.0
            logger.error("front process (webhook, fabric page) exited with code %s; starting it again in "
                         "%.0f s", code, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _once(self) -> int | None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", front.__name__, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, env={**os.environ, **_ALLOCATOR})
        assert proc.stdin is not None and proc.stdout is not None
        self.pid, self.starts = proc.pid, self.starts + 1
        publishing: asyncio.Task[None] | None = None
        try:
            proc.stdin.write(front_wire.options_frame(self.options))
            if self.source is not None:
                publishing = asyncio.create_task(self._publish(proc.stdin, self.source), name="front feed")
            if await proc.stdout.readline() == front.READY:
                logger.info("front process %d serving (webhook, fabric page)", proc.pid)
                self._reason = None
            return await proc.wait()
        finally:
            if publishing is not None:
                publishing.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await publishing
            await _stop(proc)

    async def _publish(self, pipe: asyncio.StreamWriter, source: view.PageSource) -> None:
        encoder = front_wire.Encoder()
        last: object = object()
        frames = 0
        try:
            while True:
                version = source.version()
                if version != last:
                    last, frames = version, frames + 1
                    snapshot = source.snapshot()
                    # A /filter call waits for one of the two halves, not both (at 10,000 nodes
                    # with a thousand gangs, each a few ms on the loop every second).
                    await asyncio.sleep(0)
                    pipe.write(encoder.encode(frames, snapshot))
                    await pipe.drain()
                await asyncio.sleep(self.interval_s)
        except (BrokenPipeError, ConnectionResetError):
            return  # the front died: ``run`` sees it exit and starts another


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """End of stdin first (the front stops by itself), then SIGTERM, then SIGKILL."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(Exception):
        assert proc.stdin is not None
        proc.stdin.close()
    for ask, grace in ((None, 5.0), (proc.terminate, 2.0), (proc.kill, 5.0)):
        if ask is not None:
            with contextlib.suppress(ProcessLookupError):
                ask()
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
            return
        except TimeoutError:
            continue

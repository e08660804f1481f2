"""``fabricsched run``'s side of its front process (``front``): start it before ready, feed it
the page's facts once per state version, start it again if it dies, stop it with the process.

Feeding costs the scheduler's loop, while the page is read (the front asked within
``VIEWED_S``), one ``Source.version()`` per ``interval_s`` and, when the version moved, one
``Source.snapshot()`` and its pickle (at 10,000 hosts about 2 ms and 3 to 7 ms; the fabric
object itself, 25 ms, only when it changed: ``front_wire``); while nobody reads it, nothing.
Nothing the front receives from the network comes back to this process: only its two fixed
lines asking for the facts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import sys
import time

from fabricsched.app import front, front_wire
from fabricsched.dashboard import view

logger = logging.getLogger(__name__)

INTERVAL_S = 1.0
"""How often the state's version is compared (the page asks once a second)."""
VIEWED_S = 10.0
"""The facts are sent while the front asked for them within this long."""
MAX_LINE = 64
"""The longest line read from the front (its lines are a few bytes)."""
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
        self._asked_at = -math.inf
        self._fresh = asyncio.Event()
        """Set by the front's ``FRESH``: a frame goes now, changed or not."""

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
            stdout=asyncio.subprocess.PIPE, env={**os.environ, **_ALLOCATOR}, limit=MAX_LINE)
        assert proc.stdin is not None and proc.stdout is not None
        self.pid, self.starts = proc.pid, self.starts + 1
        self._fresh = asyncio.Event()  # this loop's, this front's
        tasks = [asyncio.create_task(self._listen(proc.stdout, proc.pid), name="front lines")]
        try:
            proc.stdin.write(front_wire.options_frame(self.options))
            if self.source is not None:
                tasks.append(asyncio.create_task(self._publish(proc.stdin, self.source), name="front feed"))
            return await proc.wait()
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await _stop(proc)

    async def _listen(self, lines: asyncio.StreamReader, pid: int) -> None:
        """The front's lines: ``ready`` once, then its asks for the facts."""
        while True:
            try:
                line = await lines.readline()
            except ValueError:  # a line over MAX_LINE (dropped): not one of the front's
                logger.warning("front process %d wrote an unexpected line", pid)
                continue
            if not line:
                return
            if line == front.READY:
                logger.info("front process %d serving (webhook, fabric page)", pid)
                self._reason = None
            elif line in (front_wire.WANT, front_wire.FRESH):
                self._asked_at = time.monotonic()
                if line == front_wire.FRESH:
                    self._fresh.set()

    async def _publish(self, pipe: asyncio.StreamWriter, source: view.PageSource) -> None:
        encoder = front_wire.Encoder()
        last: object = object()
        frames = 0
        try:
            while True:
                fresh = self._fresh.is_set()
                self._fresh.clear()
                viewed = time.monotonic() - self._asked_at <= VIEWED_S
                version = source.version() if fresh or viewed else last
                if fresh or version != last:
                    last, frames = version, frames + 1
                    snapshot = source.snapshot()
                    # A /filter call waits for one of the two halves, not both (at 10,000 nodes
                    # with a thousand gangs, each a few ms on the loop every second).
                    await asyncio.sleep(0)
                    pipe.write(encoder.encode(frames, snapshot))
                    await pipe.drain()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._fresh.wait(), self.interval_s)
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

"""What ``fabricsched run`` sends its front process (``front``) over the child's stdin.

Frames: an 8-byte big-endian length, then a pickle. The first frame is the front's options;
every other one is the page's facts at one state version (``encode``). The pipe runs between
two processes of one program, from parent to child, so pickle is safe here: nothing from the
network is ever unpickled.

A fabric object is large (25 ms and 0.8 MB to pickle at 10,000 hosts) and changes only with a
node or a health change, while the GPU counts change with every pod bound. So a fabric is sent
once, with a token, and later frames name the token while the object is the same; the front
keeps the fabrics of the last frame. Keeping the same object across frames also keeps the
page's incremental rebuild (``dashboard.fragments``) incremental in the front.

The facts are sent only while someone looks: the front writes ``WANT`` on its stdout when the
page is queried (at most every ``ASK_EVERY_S``), and ``FRESH`` for the first query after a quiet
spell, which waits for the frame that answers it. A snapshot and its pickle cost the
scheduler's loop a few milliseconds per second at 10,000 hosts: nobody on the page, no cost.
The lines carry no byte of what the front received from the network.
"""

from __future__ import annotations

import asyncio
import math
import pickle
import struct
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import IO, Any

from fabricsched import ids
from fabricsched.dashboard import view
from fabricsched.topology import fabric

_LENGTH = struct.Struct(">Q")
MAX_FRAME_BYTES = 1 << 30
"""A frame longer than this is a broken pipe, not a state (10,000 hosts is about 1 MB)."""
WANT = b"want\n"
"""Front -> parent: the page is being read, keep sending the facts as they change."""
FRESH = b"fresh\n"
"""Front -> parent: the page is read after a quiet spell, send the facts now."""
ASK_EVERY_S = 0.5
"""The front says ``WANT`` at most this often (the page asks once a second while open)."""
QUIET_S = 5.0
"""No query for this long is a quiet spell: the next one asks ``FRESH`` and waits for it.
Below the parent's ``front_link.VIEWED_S``, so the feed never lapses while the page is open."""
FRESH_WAIT_S = 2.0
"""The longest a query after a quiet spell waits for its frame (then the last facts answer)."""
_POLL_S = 0.02


class BrokenFrame(RuntimeError):
    """The pipe ended or carried something that is not a frame: the front stops."""


def frame(payload: bytes) -> bytes:
    return _LENGTH.pack(len(payload)) + payload


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame's payload; None at the end of the stream (the parent is gone)."""
    head = _read_exactly(stream, _LENGTH.size)
    if head is None:
        return None
    (length,) = _LENGTH.unpack(head)
    if length > MAX_FRAME_BYTES:
        raise BrokenFrame(f"frame of {length} bytes")
    payload = _read_exactly(stream, length)
    if payload is None:
        raise BrokenFrame("the stream ended inside a frame")
    return payload


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


@dataclass
class Encoder:
    """The parent's side: remembers which fabric objects the front holds."""

    _sent: dict[ids.TopologyName, tuple[fabric.Fabric, int]] = field(default_factory=dict)
    _tokens: int = 0

    def encode(self, version: int, snap: view.PageSnapshot) -> bytes:
        fabrics = []
        sent = {}
        for facts in snap.fabrics:
            old = self._sent.get(facts.name)
            body: fabric.Fabric | None = None
            if old is not None and old[0] is facts.fabric:
                token = old[1]
            else:
                self._tokens += 1
                token, body = self._tokens, facts.fabric
            sent[facts.name] = (facts.fabric, token)
            fabrics.append((facts.name, token, body, dict(facts.free_gpus), dict(facts.reserved_gpus),
                            dict(facts.health)))
        self._sent = sent
        return frame(pickle.dumps((version, fabrics, list(snap.gangs), list(snap.pending)),
                                  protocol=pickle.HIGHEST_PROTOCOL))


@dataclass
class Decoder:
    """The front's side: the fabrics of the last frame, by token."""

    _fabrics: dict[int, fabric.Fabric] = field(default_factory=dict)

    def decode(self, payload: bytes) -> tuple[int, view.PageSnapshot]:
        version, fabrics, gangs, pending = pickle.loads(payload)
        kept: dict[int, fabric.Fabric] = {}
        facts = []
        for name, token, body, free, reserved, health in fabrics:
            fab = body if body is not None else self._fabrics.get(token)
            if fab is None:
                raise BrokenFrame(f"fabric token {token} was never sent")
            kept[token] = fab
            facts.append(view.FabricFacts(name, fab, free, reserved, health))
        self._fabrics = kept
        return version, view.PageSnapshot(facts, gangs, pending)


class Received:
    """The page's ``view.PageSource`` in the front: the last snapshot the parent sent.

    The version is the parent's frame counter; it moves only when the parent saw its own
    source's version move, so the page still rebuilds at most once per state version.
    """

    def __init__(self, ask: Callable[[bytes], None] = lambda line: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._current: tuple[int, view.PageSnapshot] = (0, view.PageSnapshot(()))
        self._ask = ask
        """Writes ``WANT`` or ``FRESH`` to the parent (from the front's loop)."""
        self._clock = clock
        self._frames = 0
        self._asked_at = -math.inf
        self._awaited: int | None = None
        """The frame count a ``FRESH`` was asked at, until a later frame came (or the wait ended)."""

    def put(self, version: int, snap: view.PageSnapshot) -> None:
        self._current = (version, snap)  # one reference swap: readers see the old or the new pair
        self._frames += 1  # the reader thread is the only writer

    async def settle(self) -> None:
        """Before a query: tell the parent the page is read; after a quiet spell, wait (at most
        ``FRESH_WAIT_S``) for the frame that brings the facts up to date."""
        now = self._clock()
        if self._awaited is None:
            if now - self._asked_at > QUIET_S:
                self._awaited, self._asked_at = self._frames, now
                self._ask(FRESH)
            elif now - self._asked_at >= ASK_EVERY_S:
                self._asked_at = now
                self._ask(WANT)
        awaited = self._awaited
        if awaited is None:
            return
        # Queries that come while it is awaited wait for the same frame.
        deadline = self._asked_at + FRESH_WAIT_S
        while self._frames == awaited and self._clock() < deadline:
            await asyncio.sleep(_POLL_S)
        if self._awaited == awaited:
            self._awaited = None

    def version(self) -> Hashable:
        return self._current[0]

    def snapshot(self) -> view.PageSnapshot:
        return self._current[1]


def options_frame(options: Any) -> bytes:
    return frame(pickle.dumps(options, protocol=pickle.HIGHEST_PROTOCOL))


def read_options(payload: bytes) -> Any:
    return pickle.loads(payload)

"""RFC 3339 timestamps as the API writes them (``2026-12-01T21:37:36Z``), to and from epoch seconds.

One format for every timestamp fabricsched writes (condition transitions, health records,
``expiresAt``, Events) and one parser for every one it reads back: its own, and those of other
writers (``creationTimestamp``), which may carry fractions or an offset.
"""

from __future__ import annotations

import datetime

MAX_LENGTH = 64
"""Longer text is no timestamp: refused before parsing (annotations and objects are untrusted)."""


def format_epoch(epoch: float) -> str:
    """Seconds since the epoch as UTC, whole seconds (what the API server's own times look like)."""
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(text: str) -> float:
    """Seconds since the epoch; a time without a zone is UTC. Raises ValueError for anything
    that is not an ISO 8601 date and time."""
    if len(text) > MAX_LENGTH:
        raise ValueError(f"timestamp of {len(text)} characters")
    stamp = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.UTC)
    return stamp.timestamp()

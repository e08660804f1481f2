"""Times and numbers as a report shows them: UTC, RFC 3339 in data, HH:MM in sentences (pure)."""

from __future__ import annotations

import datetime
import math
import re

_DURATION = re.compile(r"([0-9]{1,6})(s|m|h|d)")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION_S = 31 * 86400


def rfc3339(t: float | None) -> str | None:
    if t is None or not math.isfinite(t):
        return None
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def clock(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%H:%M")


def parse(text: str | None) -> float | None:
    """An RFC 3339 time (``Z`` or an offset) as Unix seconds; None when absent or not one."""
    if not text or len(text) > 64:
        return None
    try:
        stamp = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if stamp.tzinfo is None:
        return None
    return stamp.timestamp()


def duration(text: str) -> float:
    """``90s``, ``30m``, ``6h``, ``2d`` (or a sum, ``1h30m``); ValueError otherwise."""
    total, at = 0, 0
    for match in _DURATION.finditer(text):
        if match.start() != at:
            break
        total += int(match.group(1)) * _SECONDS[match.group(2)]
        at = match.end()
    if at != len(text) or total <= 0:
        raise ValueError(f"{text[:32]!r} is not a duration like 30m, 6h or 1h30m")
    if total > MAX_DURATION_S:
        raise ValueError(f"{text[:32]!r} is longer than {MAX_DURATION_S // 86400} days")
    return float(total)


def number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1e6 or (0 < abs(value) < 1e-2):
        return f"{value:.3g}"
    return f"{value:.4g}"

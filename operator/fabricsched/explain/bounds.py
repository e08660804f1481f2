"""Bounded, printable strings and tolerant field reads of untrusted object dicts.

Every name, reason and message ``explain`` echoes comes from an object anyone with write
access to it could have filled: a hostile annotation must neither flood the terminal nor move
its cursor. So strings lose their control and format characters (escape sequences, bidi
overrides) and are cut to ``MAX_TEXT`` characters; lists are cut by their callers.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

MAX_TEXT = 300
"""Characters kept of one echoed string (names are at most 253; messages are cut)."""
ELLIPSIS = "..."


def clean(value: object, limit: int = MAX_TEXT) -> str:
    """``value`` as one printable line of at most ``limit`` characters."""
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    # Look at a bounded prefix only: a megabyte message costs no more than a short one.
    head = text[: limit * 4]
    kept = []
    for char in head:
        if char in "\t\n\r":
            kept.append(" ")
        elif unicodedata.category(char) not in ("Cc", "Cf", "Cs", "Co", "Cn"):
            kept.append(char)
    line = "".join(kept).strip()
    if len(line) > limit or len(text) > len(head):
        return line[: max(0, limit - len(ELLIPSIS))].rstrip() + ELLIPSIS
    return line


def mapping(obj: object, key: str) -> Mapping[str, Any]:
    """``obj[key]`` when both are mappings, else an empty one."""
    if isinstance(obj, Mapping):
        value = obj.get(key)
        if isinstance(value, Mapping):
            return value
    return {}


def items(obj: object, key: str, limit: int) -> list[Any]:
    """At most ``limit`` entries of the list ``obj[key]``; empty when it is not a list."""
    if isinstance(obj, Mapping):
        value = obj.get(key)
        if isinstance(value, list):
            return value[:limit]
    return []


def text(obj: object, key: str, limit: int = MAX_TEXT) -> str:
    """``obj[key]`` as a bounded printable string; empty when absent or not a scalar."""
    if isinstance(obj, Mapping):
        value = obj.get(key)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return clean(value, limit)
    return ""


def optional_text(obj: object, key: str, limit: int = MAX_TEXT) -> str | None:
    value = text(obj, key, limit)
    return value or None


def number(obj: object, key: str) -> float | None:
    """``obj[key]`` when it is a finite number (booleans are not numbers here)."""
    if isinstance(obj, Mapping):
        value = obj.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            finite = value == value and abs(value) != float("inf")
            return float(value) if finite else None
    return None


def integer(obj: object, key: str) -> int | None:
    if isinstance(obj, Mapping):
        value = obj.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def flag(obj: object, key: str) -> bool | None:
    if isinstance(obj, Mapping):
        value = obj.get(key)
        if isinstance(value, bool):
            return value
    return None

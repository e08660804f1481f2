"""Strict readers for text that comes from users: labels, annotations, manifest fields.

Every pod, label and annotation is untrusted: anyone who may create a pod in any namespace
can write them. So each value is read here, in time bounded by a fixed length cap (never by
the value it spells), with an error that quotes at most a short, printable excerpt of it.
``str.isdigit`` and ``int`` are not used on such text: both accept non-ASCII digits ("²"
passes ``isdigit`` and then fails ``int``, "٣" passes both).

Imports nothing of the package, so every layer (the core included) may use it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

EXCERPT_CHARS = 32
"""How much of a user's value an error message quotes."""

ELLIPSIS = "..."

MAX_NUMBER_TEXT = 32
"""Longest text ``count`` reads; no whole number a user means is longer."""

_COUNT = re.compile(r"[ \t]*([0-9]+)[ \t]*", re.ASCII)
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]+")


class Invalid(ValueError):
    """A value that is not what its field must hold; the message is short and printable."""


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """A short, printable-ASCII rendering of ``value`` for messages, quoted as ``repr`` quotes.

    A run of characters outside printable ASCII becomes one ``?``; longer text is cut with an ellipsis, so a
    short printable value reads exactly as its ``repr``. Only the first ``limit + 1``
    characters are looked at, so a 256 KB annotation costs no more than a short one. A value
    that is not a string is named by its JSON type.
    """
    if not isinstance(value, str):
        return _json_type(value)
    clean = _UNPRINTABLE.sub("?", value[: limit + 1])
    if len(value) > limit:
        clean = clean[: max(0, limit - len(ELLIPSIS))] + ELLIPSIS
    return repr(clean)


def printable(text: str, max_bytes: int) -> str:
    """``text`` cut as ``truncate`` does, what cannot be printed (control, bidi) shown as "?":
    for text a view echoes (a status reason, an Event). Cut first, so the cost stays bounded."""
    return "".join(c if c.isprintable() else "?" for c in truncate(text, max_bytes))


def truncate(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` bytes of UTF-8, ending in an ellipsis when cut.

    Only a prefix is encoded, so the cost does not grow with the text.
    """
    if len(text) <= max_bytes // 4:
        return text  # fits even if every character takes 4 bytes
    head = text[: max_bytes + 1]
    encoded = head.encode("utf-8")
    if len(head) == len(text) and len(encoded) <= max_bytes:
        return text
    room = max(0, max_bytes - len(ELLIPSIS))
    return encoded[:room].decode("utf-8", errors="ignore") + ELLIPSIS


def count(value: object, what: str, maximum: int, minimum: int = 0) -> int:
    """A whole number in ASCII digits (``[0-9]+``, blanks around it allowed) in
    ``[minimum, maximum]``; raises ``Invalid`` naming ``what`` otherwise.

    Signs, ``_`` separators, exponents, fractions and non-ASCII digits are refused. Text
    longer than ``MAX_NUMBER_TEXT`` is refused before it is looked at, and no more digits
    than ``maximum`` has are ever converted.
    """
    if not isinstance(value, str):
        raise Invalid(f"{what} must be a string of digits, not {_json_type(value)}")
    found = _COUNT.fullmatch(value) if len(value) <= MAX_NUMBER_TEXT else None
    if found is None:
        raise Invalid(f"{what}={excerpt(value)} is not a whole number")
    digits = found.group(1).lstrip("0") or "0"
    if len(digits) > len(str(maximum)) or not minimum <= int(digits) <= maximum:
        raise Invalid(f"{what}={excerpt(value)} is not between {minimum} and {maximum}")
    return int(digits)


def mapping(value: object, what: str) -> Mapping[str, Any]:
    """A JSON object (absent or null reads as empty); raises ``Invalid`` for any other type."""
    if type(value) is dict:  # what JSON parses to: the ABC check below costs 6x (60,000 objects a start)
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise Invalid(f"{what} must be an object, not {_json_type(value)}")
    return value


def sequence(value: object, what: str) -> Sequence[Any]:
    """A JSON array (absent or null reads as empty); raises ``Invalid`` for any other type."""
    if type(value) is list:  # as in ``mapping``
        return value
    if value is None:
        return ()
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise Invalid(f"{what} must be an array, not {_json_type(value)}")
    return value


def string(value: object, what: str, default: str = "") -> str:
    """A JSON string (absent or null reads as ``default``); raises ``Invalid`` otherwise."""
    if value is None:
        return default
    if not isinstance(value, str):
        raise Invalid(f"{what} must be a string, not {_json_type(value)}")
    return value


def string_map(value: object, what: str) -> dict[str, str]:
    """An object of strings (labels, annotations); raises ``Invalid`` for any other shape."""
    out: dict[str, str] = {}
    for key, item in mapping(value, what).items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise Invalid(f"{what}[{excerpt(key)}] must be a string, not {_json_type(item)}")
        out[key] = item
    return out


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, Sequence):
        return "an array"
    return type(value).__name__

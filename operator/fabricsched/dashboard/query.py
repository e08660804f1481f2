"""The data endpoint's query parameters, parsed with bounds before anything is looked up.

Known keys only, each at most once, values of printable ASCII up to ``MAX_VALUE`` characters
(a Kubernetes name is at most 253; a gang key adds a namespace and a UID). A bad query is a
400 with one line saying why; a good one naming nothing gives an empty view and a message
(``document.build``).
"""

from __future__ import annotations

from collections.abc import Iterable

from fabricsched.dashboard import document

KEYS = ("topology", "namespace", "gang")
MAX_QUERY = 2048
MAX_VALUE = 600


class BadQuery(ValueError):
    """The query cannot be used; the message is safe to echo (bounded, repr-quoted)."""


def parse(raw: str, pairs: Iterable[tuple[str, str]]) -> document.Selection:
    if len(raw) > MAX_QUERY:
        raise BadQuery(f"query string longer than {MAX_QUERY} characters")
    found: dict[str, str] = {}
    for count, (key, value) in enumerate(pairs):
        if count >= len(KEYS):
            raise BadQuery(f"more than {len(KEYS)} query parameters")
        if key not in KEYS:
            raise BadQuery(f"unknown query parameter {key[:40]!r} (known: {', '.join(KEYS)})")
        if key in found:
            raise BadQuery(f"query parameter {key!r} given twice")
        if len(value) > MAX_VALUE:
            raise BadQuery(f"query parameter {key!r} longer than {MAX_VALUE} characters")
        if not (value.isascii() and value.isprintable()):
            raise BadQuery(f"query parameter {key!r} is not printable ASCII")
        found[key] = value
    return document.Selection(**found)

"""The recent Events of a gang's objects: sorted by time, the newest ``MAX_EVENTS`` kept."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricsched.explain import bounds

MAX_EVENTS = 10


@dataclass(frozen=True)
class EventLine:
    time: str | None
    """The Event's last occurrence (RFC 3339), as the API server gave it."""
    type: str
    """Normal or Warning."""
    reason: str
    object: str
    """Kind/name of the object the Event is about."""
    message: str
    count: int


def recent(items: Sequence[Mapping[str, Any]], limit: int = MAX_EVENTS) -> tuple[EventLine, ...]:
    """The newest ``limit`` Events, oldest first, one per Event uid."""
    seen: dict[str, tuple[datetime.datetime, EventLine]] = {}
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            continue
        metadata = bounds.mapping(item, "metadata")
        key = bounds.text(metadata, "uid", 64) or f"#{index}"
        stamp_text = _time_text(item)
        line = EventLine(
            time=stamp_text,
            type=bounds.text(item, "type", 16),
            reason=bounds.text(item, "reason", 128),
            object=_involved(item),
            message=bounds.text(item, "message") or bounds.text(item, "note"),
            count=_count(item),
        )
        seen[key] = (_parse(stamp_text), line)
    ordered = sorted(seen.values(), key=lambda pair: pair[0])
    return tuple(line for _, line in ordered[-limit:])


def _time_text(item: Mapping[str, Any]) -> str | None:
    series = bounds.mapping(item, "series")
    for value in (
        bounds.text(series, "lastObservedTime", 64),
        bounds.text(item, "lastTimestamp", 64),
        bounds.text(item, "eventTime", 64),
        bounds.text(item, "firstTimestamp", 64),
        bounds.text(bounds.mapping(item, "metadata"), "creationTimestamp", 64),
    ):
        if value:
            return value
    return None


def _parse(text: str | None) -> datetime.datetime:
    epoch = datetime.datetime.min.replace(tzinfo=datetime.UTC)
    if not text:
        return epoch
    try:
        stamp = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return epoch
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=datetime.UTC)


def _involved(item: Mapping[str, Any]) -> str:
    involved = bounds.mapping(item, "involvedObject") or bounds.mapping(item, "regarding")
    return f"{bounds.text(involved, 'kind', 63)}/{bounds.text(involved, 'name')}"


def _count(item: Mapping[str, Any]) -> int:
    series = bounds.integer(bounds.mapping(item, "series"), "count")
    plain = bounds.integer(item, "count")
    return max(1, series or 0, plain or 0)

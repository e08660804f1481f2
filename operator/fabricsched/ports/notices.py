"""An Event to post: the object it is about (``ObjectRef``), what it says (``Notice``), and the
``Recorder`` that queues it (``controller.events.EventRecorder``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ObjectRef:
    """The Event's ``involvedObject``."""

    api_version: str
    kind: str
    name: str
    uid: str = ""
    namespace: str | None = None
    """None for cluster-scoped objects (their Events go to the recorder's namespace)."""


@dataclass(frozen=True)
class Notice:
    type: str
    """Normal or Warning."""
    reason: str
    """CamelCase, machine-readable."""
    message: str


class Recorder(Protocol):
    """Queues an Event (never waits on the API server); deduplicates and rate-limits."""

    def record(self, ref: ObjectRef, notice: Notice, now: float) -> None: ...

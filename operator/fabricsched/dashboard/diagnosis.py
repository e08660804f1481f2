"""``/api/diagnose?gang=NS/NAME[&since=DURATION]``: one gang's diagnosis on the fabric page.

The page server knows no Prometheus and no API client: the composition root hands it a
``Diagnose`` callable (``app.front_diagnose``), and this module only parses the query, finds
the gang among those the page shows (a name the page does not show is a 404: the key space is
the cluster's gangs, not whatever a client types) and puts the answers behind
``ondemand.OnDemand``: cached per gang and window, rate-limited per gang and overall.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from fabricsched.dashboard import ondemand, view
from fabricsched.dashboard.query import BadQuery

KEYS = ("gang", "since")
MAX_VALUE = 600
DEFAULT_SINCE_S = 3600
MIN_SINCE_S, MAX_SINCE_S = 60, 7 * 86400
_DURATION = re.compile(r"([0-9]{1,6})([smhd]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class GangAsked:
    key: str
    """The gang's key on the page (NS/NAME@UID or NS/NAME)."""
    namespace: str
    name: str
    """What to diagnose: the gang's FabricPlacement when it has one, else its name (a workload)."""
    since_s: int


Diagnose = Callable[[GangAsked], Awaitable[ondemand.Reply]]


def parse(raw: str, pairs: Iterable[tuple[str, str]]) -> tuple[str, int]:
    """(gang, window in seconds) from the query, strictly."""
    if len(raw) > 2 * MAX_VALUE:
        raise BadQuery("query string too long")
    found: dict[str, str] = {}
    for count, (key, value) in enumerate(pairs):
        if count >= len(KEYS) or key not in KEYS or key in found:
            raise BadQuery(f"expected gang=NS/NAME and optionally since=DURATION, got {key[:40]!r}")
        if len(value) > MAX_VALUE or not (value.isascii() and value.isprintable()):
            raise BadQuery(f"query parameter {key!r} is not a short printable ASCII value")
        found[key] = value
    if not found.get("gang"):
        raise BadQuery("gang=NS/NAME is required")
    return found["gang"], since_seconds(found.get("since", ""))


def since_seconds(text: str) -> int:
    if not text:
        return DEFAULT_SINCE_S
    match = _DURATION.fullmatch(text)
    if match is None:
        raise BadQuery(f"since {text[:40]!r} is not a duration such as 15m, 1h or 2d")
    seconds = int(match[1]) * _UNIT_S[match[2]]
    if not MIN_SINCE_S <= seconds <= MAX_SINCE_S:
        raise BadQuery(f"since must lie between {MIN_SINCE_S} s and {MAX_SINCE_S // 86400} days")
    return seconds


def find(snap: view.PageSnapshot, gang: str, since_s: int) -> GangAsked | None:
    """The gang the page shows under ``gang`` (its key or NS/NAME), placed ones first."""
    for g in snap.gangs:
        if gang in (g.key, f"{g.namespace}/{g.name}"):
            return GangAsked(g.key, g.namespace, g.placement or g.name, since_s)
    for p in snap.pending:
        if gang in (p.key, f"{p.namespace}/{p.name}"):
            return GangAsked(p.key, p.namespace, p.name, since_s)
    return None


class Diagnoses:
    """The endpoint's logic, without HTTP: query in, ``ondemand.Reply`` out."""

    def __init__(self, source: view.PageSource, diagnose: Diagnose,
                 limits: ondemand.Limits = ondemand.DEFAULT_LIMITS) -> None:
        self.source = source
        self._answers: ondemand.OnDemand[GangAsked] = ondemand.OnDemand(diagnose, limits)

    async def answer(self, raw: str, pairs: Iterable[tuple[str, str]]) -> ondemand.Reply:
        try:
            gang, since_s = parse(raw, pairs)
        except BadQuery as e:
            return ondemand.Reply(400, {"error": str(e)})
        asked = find(self.source.snapshot(), gang, since_s)
        if asked is None:
            return ondemand.Reply(404, {"error": f"no gang {gang[:120]!r} on the page"})
        return await self._answers.get(asked, asked.key)

    async def close(self) -> None:
        await self._answers.close()

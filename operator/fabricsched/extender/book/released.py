"""The plans released lately, kept for a while after the book drops them.

A controller that restarts a whole group (a JobSet's failure policy, a Kubeflow TrainJob, a
LeaderWorkerSet's ``RecreateGroupOnPodRestart``) ends every old pod first, so the gang's plan
is ``Released``; its new pods come with the same gang key. Planning them, the coordinator asks
here where the gang ran, and the engine puts it back there when that is as good as a fresh plan
(``placement.previous``, docs/placement.md). Bounded in time (a release older than the window
is no hint) and in size. Pure: ``now`` is a parameter.
"""

from __future__ import annotations

import collections
import contextlib
from dataclasses import dataclass

from fabricsched import ids
from fabricsched.api import rfc3339
from fabricsched.api.placement import PlacementPhase
from fabricsched.extender.book import conditions, reservations
from fabricsched.placement import request

DEFAULT_WINDOW_S = 3600.0
"""A release older than this is no hint (``fabricsched run --restart-placement previous``)."""
MAX_KEPT = 10_000
"""Releases kept at most; the oldest is forgotten first."""


@dataclass(frozen=True)
class Release:
    topology: ids.TopologyName
    ranks: tuple[ids.NodeName, ...]
    """The node of every rank that had one, rank 0 first."""
    at: float
    """When the plan was released (seconds since the epoch)."""


class Releases:
    """The last release of each gang, for ``window_s`` (0: none kept, every plan is fresh)."""

    def __init__(self, window_s: float = DEFAULT_WINDOW_S, limit: int = MAX_KEPT) -> None:
        if window_s < 0:
            raise ValueError(f"the window of released plans must be 0 or more, not {window_s}")
        self.window_s = window_s
        self.limit = limit
        self._kept: collections.OrderedDict[ids.GangKey, Release] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def remember(self, entry: reservations.Entry, at: float) -> None:
        """Keep where ``entry`` (a plan released at ``at``) ran."""
        placed = tuple(node for node in entry.ranks if node is not None)
        if not self.window_s or not placed:
            return
        self._kept.pop(entry.key, None)
        self._kept[entry.key] = Release(entry.topology, placed, at)
        self._prune(at)

    def restore(self, entry: reservations.Entry, now: float) -> None:
        """A ``Released`` object read back after a restart: kept as of the date of its Released
        condition (none readable: not kept, its age is unknown)."""
        at = released_at(entry)
        if entry.phase == PlacementPhase.RELEASED and at is not None and at <= now:
            self.remember(entry, at)

    def previous(self, key: ids.GangKey, topology: ids.TopologyName, now: float) -> request.Previous | None:
        """Where gang ``key`` ran on ``topology`` until its recent release (None: no such release)."""
        kept = self._kept.get(key)
        if kept is None or kept.topology != topology or not 0 <= now - kept.at <= self.window_s:
            return None
        return request.Previous(kept.ranks)

    def _prune(self, now: float) -> None:
        while self._kept:
            key, oldest = next(iter(self._kept.items()))
            if len(self._kept) <= self.limit and now - oldest.at <= self.window_s:
                return
            del self._kept[key]


def released_at(entry: reservations.Entry) -> float | None:
    """When a stored plan was released: its ``Reserved`` condition's last transition, to
    ``Released`` (None: no such condition, or its date is unreadable)."""
    for condition in entry.conditions:
        if condition.type == conditions.RESERVED and condition.reason == "Released":
            with contextlib.suppress(ValueError):
                return rfc3339.parse(condition.last_transition_time)
    return None

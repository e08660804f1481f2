"""Waiting for locality in the extender: a gang's settings, its clock, and the engine's decision.

Where it sits in the flow: ``Coordinator._plan`` has the engine's plan for a new gang and asks
``decide`` whether to start it now or hold the gang (docs/extender.md "Waiting for locality").
The decision itself is ``placement.session.Session.hold_for``, the one the simulator's
``fabric`` policy makes; this module only supplies its inputs the way a cluster has them:

* the wait, from the gang's pod annotations over the cluster default (``fabricsched run
  --locality-wait``), parsed here with a message for every value that is not valid;
* the time held, counted from the gang's first hold (its first plan; the session's
  ``patience.Clocks``, the simulator's clocks too), and again from its next plan when it lost
  its fit while held; a restarted extender starts it again;
* the hosts the gang's pods may use (``eligibility``), over which its floor is computed, and
  the GPUs free now (a fabric that is not saturated caps the hold);
* whether a lower-priority pod waits (``lower_priority_pending``): then the gang is not held.

Pure: no I/O, the time is a parameter.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fabricsched import gangs, ids, parsing
from fabricsched.api import rfc3339
from fabricsched.extender.decide import planning
from fabricsched.placement import patience, request, session
from fabricsched.topology import fabric, nodes

logger = logging.getLogger(__name__)

WAIT_ANNOTATION = "fabricsched.io/locality-wait"
TOLERANCE_ANNOTATION = "fabricsched.io/locality-tolerance"

DEFAULT_WAIT = patience.DEFAULT_LOCALITY_WAIT
"""The cluster default of ``fabricsched run --locality-wait/--locality-tolerance``: the
simulator's ``fabric`` policy uses the same constant."""

MAX_TOLERANCE = 1.0
"""Tolerances are fractions: a larger value is far more likely a percentage typed as one
("5" for 5%) than a wish to accept twice the floor, so it is refused."""

FORGET_AFTER_S = patience.FORGET_AFTER_S
Clocks = patience.Clocks
"""The gangs' wait clocks live in the placement session (``session.Session.clocks``)."""

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_WHOLE = re.compile(rf"(?:{_PART.pattern})+")
_MAX_TEXT = 64
"""Longest duration or tolerance text read; annotations are user text of up to 256 KB."""


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration (``600s``, ``10m``, ``1h30m``, ``0``), as Kubernetes
    writes durations; raises ValueError for anything else, negative durations included."""
    value = text.strip() if len(text) <= _MAX_TEXT else "-"
    if value == "0":
        return 0.0
    if not _WHOLE.fullmatch(value):
        raise ValueError(f"{parsing.excerpt(text)} is not a duration such as 600s, 10m or 1h")
    seconds = sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(value))
    if not math.isfinite(seconds):
        raise ValueError(f"{parsing.excerpt(text)} is not a finite duration")
    return seconds


def parse_tolerance(text: str) -> float:
    """A fraction between 0 and ``MAX_TOLERANCE`` (``0.05`` = 5%); raises ValueError otherwise."""
    try:
        if len(text) > _MAX_TEXT or not text.isascii():  # float() reads "٣" and 256 KB of digits
            raise ValueError(text)
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"{parsing.excerpt(text)} is not a number (a fraction: 0.05 = 5%)") from None
    if not (math.isfinite(value) and 0 <= value <= MAX_TOLERANCE):
        raise ValueError(
            f"{parsing.excerpt(text)} is not a fraction between 0 and {MAX_TOLERANCE:g} (0.05 = 5%)"
        )
    return value


def duration_text(seconds: float) -> str:
    """``seconds`` as the flag and the chart write it (``14400s``; ``0s`` = off)."""
    return f"{seconds:g}s"


def cluster_default(wait: str, tolerance: str | float,
                    hold_limit: float = DEFAULT_WAIT.hold_limit) -> request.LocalityWait:
    """The cluster-wide wait of ``fabricsched run --locality-wait/--locality-tolerance/
    --locality-hold-limit``; raises ValueError naming the flag."""
    try:
        timeout_s = parse_duration(wait)
    except ValueError as e:
        raise ValueError(f"--locality-wait: {e}") from e
    try:
        fraction = parse_tolerance(str(tolerance))
    except ValueError as e:
        raise ValueError(f"--locality-tolerance: {e}") from e
    try:
        return request.LocalityWait(timeout_s, fraction, hold_limit)
    except ValueError as e:
        raise ValueError(f"--locality-hold-limit: {e}") from e


@dataclass(frozen=True)
class Settings:
    """A gang's wait, and what was wrong with its annotations (for a pod Event)."""

    wait: request.LocalityWait
    problems: tuple[str, ...] = ()


def settings(annotations: Mapping[str, str], default: request.LocalityWait) -> Settings:
    """The gang's wait: its pods' annotations over ``default``.

    An annotation that does not parse turns the wait off for the gang (it is placed as it
    would be without the feature) and is reported: holding a gang on a setting its owner did
    not mean is worse than not holding it.
    """
    timeout_s, tolerance = default.timeout_s, default.tolerance
    problems: list[str] = []
    wait_text = annotations.get(WAIT_ANNOTATION)
    if wait_text is not None:
        try:
            timeout_s = parse_duration(wait_text)
        except ValueError as e:
            problems.append(f"annotation {WAIT_ANNOTATION}: {e}")
    tolerance_text = annotations.get(TOLERANCE_ANNOTATION)
    if tolerance_text is not None:
        try:
            tolerance = parse_tolerance(tolerance_text)
        except ValueError as e:
            problems.append(f"annotation {TOLERANCE_ANNOTATION}: {e}")
    if problems:
        return Settings(dataclasses.replace(default, timeout_s=0.0, tolerance=tolerance), tuple(problems))
    return Settings(dataclasses.replace(default, timeout_s=timeout_s, tolerance=tolerance))


def created_at(manifest: Mapping[str, Any]) -> float | None:
    """``metadata.creationTimestamp`` in seconds since the epoch; None when absent or unreadable."""
    text = (manifest.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(text, str) or not text:
        return None
    try:
        return rfc3339.parse(text)
    except ValueError:
        return None


def decide(
    placing_session: session.Session,
    fab: fabric.Fabric,
    gang: gangs.GangIdentity,
    plan: request.Plan,
    held: patience.Held,
    wait: request.LocalityWait,
    free: Callable[[], Mapping[ids.NodeName, int]] | None = None,
    eligible: frozenset[ids.NodeName] | None = None,
    lower_pending: Callable[[], bool] = lambda: False,
) -> patience.Decision:
    """The engine's locality decision for ``plan``, the gang's first plan (the simulator's own):
    ``free()`` the GPUs free per host now, ``eligible`` the hosts the gang's pods may use (None: all).
    A gang is never held while ``lower_pending()`` (asked only for a hold): it would wait while
    a lower-priority pod starts (docs/preemption.md "Locality waits and priorities")."""
    ask = planning.gang_request(gang, fab)
    if isinstance(ask, request.NoFit):
        return patience.Start()  # no plan is made for such a gang: nothing to hold
    decision = placing_session.hold_for(fab, ask, plan, held, wait, None, eligible)
    if isinstance(decision, patience.Wait) and free is not None:
        # The free GPUs (a walk over every host) only matter for a hold: they may cap it.
        decision = placing_session.hold_for(fab, ask, plan, held, wait, free(), eligible)
    if not isinstance(decision, patience.Wait) or lower_pending():
        return patience.Start() if isinstance(decision, patience.Wait) else decision
    if held.this_s <= 0:  # a new hold: once per hold, the pods' retries are not logged
        logger.info("gang %s held for locality: %s", gang.display, decision.reason)
    return decision


def lower_priority_pending(pods: Iterable[nodes.PodUsage], asking: nodes.PodUsage) -> bool:
    """Whether a GPU pod of lower priority than ``asking`` waits to be scheduled."""
    return any(p.node is None and p.phase not in _ENDED and p.priority < asking.priority for p in pods)


_ENDED = ("Succeeded", "Failed")

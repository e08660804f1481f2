"""The simulator's CSV inputs: the job trace and the health events (examples/sim/README.md).

Parsing checks each row on its own (column count, numbers, ranges, known words); whether a row
makes sense for the fabric (a known node, a tier some domain can hold) is checked later against
the built fabric (``scenario``), still pointing at the row's line.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fabricsched.api import topology as api
from fabricsched.placement import request
from fabricsched.sim import errors

JOB_COLUMNS = ("name", "submit_s", "pods", "gpus_per_pod", "duration_s", "required_tier")
PRIORITY_COLUMN = "priority"
"""Optional column of the job trace: the job's priority (an integer, empty = 0)."""
PREFERRED_COLUMN = "preferred_tier"
"""Optional column: a tier the gang would rather be inside (below ``required_tier`` when both)."""
SLICE_COLUMN = "slice"
"""Optional column: ``N@tier`` (slices of N consecutive ranks, each required inside one domain
of the tier) or ``N~tier`` (preferred); empty = no slices. The pod annotations
``fabricsched.io/slice-size`` and ``slice-required-tier`` / ``slice-preferred-tier``."""
TRAFFIC_COLUMN = "traffic"
"""Optional column: ``all-to-all`` or ``ring`` (the pod annotation ``fabricsched.io/traffic``);
empty = the topology's ``spec.traffic``, else all-to-all."""
OPTIONAL_JOB_COLUMNS = (PRIORITY_COLUMN, PREFERRED_COLUMN, SLICE_COLUMN, TRAFFIC_COLUMN)
"""After the six columns, any of these, each at most once, in any order."""
MAX_TIER_NAME = 63
"""A tier name is a label-like word; longer cells are refused."""
MIN_PRIORITY, MAX_PRIORITY = -2_147_483_648, 1_000_000_000
"""The range of a PriorityClass's value (above it: the system classes)."""
EVENT_COLUMNS = ("time_s", "target_kind", "target", "state", "capacity")


@dataclass(frozen=True)
class Job:
    """One row of the job trace: a training job that arrives, waits, runs and leaves."""

    name: str
    submit_s: float
    pods: int
    gpus_per_pod: int
    duration_s: float
    """Run time alone on a perfect fabric; the simulator stretches it by the comm_slowdown."""
    required_tier: str | None
    """Tier name the whole gang must fit inside one domain of; None = preferred lowest tier."""
    line: int = 0
    """Line in the trace file, so later checks against the fabric can point at the row."""
    priority: int | None = None
    """None when the trace has no priority column (every job then counts as 0)."""
    preferred_tier: str | None = None
    """A tier the gang would rather be inside: with ``required_tier`` a lower one, alone the
    preferred tier in place of the lowest."""
    slices: request.Slices | None = None
    """Slices of consecutive ranks, as the extender reads them from the pods' annotations."""
    traffic: api.TrafficPattern | None = None
    """The pattern the capacity model prices it with; None: the topology's default."""

    @property
    def constraint(self) -> tuple[str | None, str | None, request.Slices | None]:
        """Everything that decides whether a job of this shape can fit (the engine's memo key)."""
        return (self.required_tier, self.preferred_tier, self.slices)

    @property
    def rank(self) -> int:
        """The priority preemption compares: 0 without a priority column."""
        return 0 if self.priority is None else self.priority


@dataclass(frozen=True)
class HealthEvent:
    """One row of the events file: from ``time_s`` on, a source called "event" reports this state."""

    time_s: float
    kind: Literal["node", "domain"]
    node: str | None
    """The node name when ``kind`` is ``node``."""
    tier: str | None
    """The tier name when ``kind`` is ``domain``."""
    domain: str | None
    """The domain name (the tier label's value) when ``kind`` is ``domain``."""
    state: api.LinkState
    capacity: float | None
    """Remaining capacity fraction; None = the topology's ``degradedCapacity`` for degraded."""
    line: int = 0

    @property
    def target(self) -> str:
        return str(self.node) if self.kind == "node" else f"{self.tier}/{self.domain}"


def _rows(
    path: Path, columns: tuple[str, ...], optional: tuple[str, ...] = ()
) -> Iterator[tuple[int, dict[str, str]]]:
    """Data rows (cells by column name) with their line numbers; blank lines and ``#`` comment
    lines are skipped.

    The header is ``columns``, then any of ``optional``, each at most once, in any order:
    every row has as many cells as the header."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise errors.SimInputError(path, 0, f"cannot read: {e.strerror or e}") from e
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise errors.SimInputError(path, 0, f"empty file; expected the header {','.join(columns)}")
    header_line, header = lines[0]
    found = tuple(cell.strip() for cell in next(csv.reader([header])))
    extra = found[len(columns):]
    if found[:len(columns)] != columns or len(set(extra)) != len(extra) or not set(extra) <= set(optional):
        also = f" (then any of {','.join(optional)!r})" if optional else ""
        raise errors.SimInputError(
            path, header_line, f"bad header {','.join(found)!r}; expected {','.join(columns)!r}{also}")
    for n, line in lines[1:]:
        cells = [cell.strip() for cell in next(csv.reader([line]))]
        if len(cells) != len(found):
            raise errors.SimInputError(
                path, n, f"{len(cells)} columns, expected {len(found)} ({','.join(found)})")
        yield n, dict(zip(found, cells, strict=True))


def _number(path: Path, line: int, column: str, cell: str, *, integer: bool = False) -> float:
    try:
        value = int(cell) if integer else float(cell)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise errors.SimInputError(path, line, f"{column} must be {kind}, got {cell!r}") from None
    if not math.isfinite(value):
        raise errors.SimInputError(path, line, f"{column} must be finite, got {cell!r}")
    return value


def read_jobs(path: str | Path) -> list[Job]:
    """The job trace, in file order; names must be unique, numbers positive."""
    path = Path(path)
    jobs: list[Job] = []
    seen: dict[str, int] = {}
    for n, cells in _rows(path, JOB_COLUMNS, OPTIONAL_JOB_COLUMNS):
        name, submit, pods, gpus, duration, tier = (cells[c] for c in JOB_COLUMNS)
        if not name:
            raise errors.SimInputError(path, n, "name is empty")
        if name in seen:
            raise errors.SimInputError(path, n, f"job {name!r} already defined on line {seen[name]}")
        seen[name] = n
        job = Job(
            name=name,
            submit_s=_number(path, n, "submit_s", submit),
            pods=int(_number(path, n, "pods", pods, integer=True)),
            gpus_per_pod=int(_number(path, n, "gpus_per_pod", gpus, integer=True)),
            duration_s=_number(path, n, "duration_s", duration),
            required_tier=_tier(path, n, "required_tier", tier),
            line=n,
            priority=_priority(path, n, cells[PRIORITY_COLUMN]) if PRIORITY_COLUMN in cells else None,
            preferred_tier=_tier(path, n, PREFERRED_COLUMN, cells.get(PREFERRED_COLUMN, "")),
            slices=_slices(path, n, cells.get(SLICE_COLUMN, "")),
            traffic=_traffic(path, n, cells.get(TRAFFIC_COLUMN, "")),
        )
        if job.submit_s < 0:
            raise errors.SimInputError(path, n, f"submit_s must be >= 0, got {submit}")
        if job.pods < 1 or job.gpus_per_pod < 1:
            raise errors.SimInputError(path, n, "pods and gpus_per_pod must be >= 1")
        if job.duration_s <= 0:
            raise errors.SimInputError(path, n, f"duration_s must be > 0, got {duration}")
        if job.slices is not None and job.pods % job.slices.pods:
            raise errors.SimInputError(
                path, n, f"a gang of {job.pods} pods cannot be cut in slices of {job.slices.pods}")
        jobs.append(job)
    if not jobs:
        raise errors.SimInputError(path, 0, "no jobs")
    return jobs


def _priority(path: Path, line: int, cell: str) -> int:
    if not cell:
        return 0
    value = int(_number(path, line, PRIORITY_COLUMN, cell, integer=True))
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise errors.SimInputError(
            path, line, f"priority must be in [{MIN_PRIORITY}, {MAX_PRIORITY}], got {cell}")
    return value


def _tier(path: Path, line: int, column: str, cell: str) -> str | None:
    if len(cell) > MAX_TIER_NAME:
        raise errors.SimInputError(path, line, f"{column} is longer than {MAX_TIER_NAME} characters")
    return cell or None


def _slices(path: Path, line: int, cell: str) -> request.Slices | None:
    """``N@tier`` (required) or ``N~tier`` (preferred); empty: none."""
    if not cell:
        return None
    required = "@" in cell
    size, sep, tier = cell.partition("@" if required else "~")
    if (not sep or not tier or not (size.isascii() and size.isdigit())
            or len(size) > 6 or int(size) < 2):
        raise errors.SimInputError(
            path, line, f"{SLICE_COLUMN} must be N@tier (required) or N~tier (preferred) with N >= 2, "
            f"got {cell[:80]!r}")
    return request.Slices(int(size), str(_tier(path, line, SLICE_COLUMN, tier)), required)


def _traffic(path: Path, line: int, cell: str) -> api.TrafficPattern | None:
    if not cell:
        return None
    try:
        return api.TrafficPattern(cell)
    except ValueError:
        names = " or ".join(p.value for p in api.TrafficPattern)
        raise errors.SimInputError(
            path, line, f"{TRAFFIC_COLUMN} must be {names}, got {cell[:80]!r}") from None


def read_events(path: str | Path) -> list[HealthEvent]:
    """The health events, sorted by time (stable: rows at one time keep file order)."""
    path = Path(path)
    events: list[HealthEvent] = []
    states = {s.value: s for s in api.LinkState}
    for n, cells in _rows(path, EVENT_COLUMNS):
        time_cell, kind, target, state_cell, capacity_cell = (cells[c] for c in EVENT_COLUMNS)
        time_s = _number(path, n, "time_s", time_cell)
        if time_s < 0:
            raise errors.SimInputError(path, n, f"time_s must be >= 0, got {time_cell}")
        state = states.get(state_cell)
        if state is None:
            raise errors.SimInputError(
                path, n, f"unknown state {state_cell!r}; expected one of {', '.join(states)}")
        capacity = None
        if capacity_cell:
            capacity = _number(path, n, "capacity", capacity_cell)
            if not 0 <= capacity <= 1:
                raise errors.SimInputError(path, n, f"capacity must be a fraction in [0, 1], got {capacity}")
        if kind == "node":
            if not target:
                raise errors.SimInputError(path, n, "target is empty; expected a node name")
            events.append(HealthEvent(time_s, "node", target, None, None, state, capacity, n))
        elif kind == "domain":
            tier, sep, domain = target.partition("/")
            if not sep or not tier or not domain:
                raise errors.SimInputError(
                    path, n, f"domain target {target!r} must be tier/name, e.g. leaf/l07")
            events.append(HealthEvent(time_s, "domain", None, tier, domain, state, capacity, n))
        else:
            raise errors.SimInputError(path, n, f"unknown target_kind {kind!r}; expected node or domain")
    events.sort(key=lambda e: e.time_s)
    return events

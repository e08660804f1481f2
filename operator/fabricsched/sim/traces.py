"""Synthetic job traces: a job-size mix, a duration distribution, Poisson arrivals at an offered load.

The default mix follows what shared GPU training clusters report: most jobs are one pod or a
small gang, some span 8-16 hosts, a few take 32-64 hosts of 8 GPUs; the big ones hold most of
the GPU-hours. Durations are lognormal (heavy right tail). Arrivals are a Poisson process
whose rate makes the offered load (GPU-seconds asked per GPU-second available) equal ``load``.
"""

from __future__ import annotations

import csv
import io
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from fabricsched.placement import request
from fabricsched.sim import records

DEFAULT_MIX = "1x1:8,1x2:4,1x4:4,1x8:14,2x8:14,4x8:18,4x8@leaf:4,8x8:14,16x8:10,32x8:3,64x8:1"
"""``PODSxGPUS[@TIER][~TIER][/N@TIER|/N~TIER]:WEIGHT``, weights by job count; ``@leaf`` marks a
required tier, ``~leaf`` a preferred one, ``/4@leaf`` slices of 4 ranks each required in one
leaf (``/4~leaf`` preferred)."""

_SHAPE = re.compile(r"(\d{1,6})[xX](\d{1,6})(?:@([\w.-]{1,63}))?(?:~([\w.-]{1,63}))?")
_SLICE = re.compile(r"(\d{1,6})([@~])([\w.-]{1,63})")

DEFAULT_DURATION = "lognormal:median=3600,sigma=1.0"
"""Median one hour, mean ~1.65 h, one job in ~40 runs over 7 h."""

MIN_DURATION_S = 60.0
MAX_DURATION_S = 7 * 24 * 3600.0


@dataclass(frozen=True)
class MixEntry:
    pods: int
    gpus_per_pod: int
    weight: float
    required_tier: str | None = None
    preferred_tier: str | None = None
    slices: request.Slices | None = None


@dataclass(frozen=True)
class DurationDist:
    kind: str
    """``lognormal`` (median, sigma), ``exp`` (mean) or ``fixed`` (value)."""
    params: tuple[tuple[str, float], ...]

    def sample(self, rng: random.Random) -> float:
        p = dict(self.params)
        if self.kind == "lognormal":
            value = rng.lognormvariate(math.log(p["median"]), p["sigma"])
        elif self.kind == "exp":
            value = rng.expovariate(1.0 / p["mean"])
        else:
            value = p["value"]
        return min(MAX_DURATION_S, max(MIN_DURATION_S, value))


@dataclass(frozen=True)
class TraceOptions:
    jobs: int
    total_gpus: int
    """GPUs of the cluster the offered load refers to."""
    load: float = 0.8
    seed: int = 0
    mix: tuple[MixEntry, ...] = ()
    duration: DurationDist = DurationDist("lognormal", (("median", 3600.0), ("sigma", 1.0)))
    priorities: tuple[tuple[int, float], ...] = ()
    """(priority, weight by job count); empty: no priority column. Drawn from a random stream
    of its own, so a trace with a mix is the trace without one plus the column."""
    max_pods: dict[tuple[str | None, int], int] | None = None
    """The most pods of a size one domain of a tier holds (key (tier name, gpus_per_pod)) or the
    whole cluster (key (None, gpus_per_pod)); mix entries that could never fit are dropped."""


def parse_mix(text: str) -> tuple[MixEntry, ...]:
    """``"1x8:14,4x8@leaf:4,16x8~leaf/8@leaf:2"`` -> entries; raises ValueError with the bad part."""
    entries: list[MixEntry] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        try:
            entry = _mix_entry(part)
        except ValueError:
            raise ValueError(f"bad mix entry {part!r}; expected "
                             "PODSxGPUS[@TIER][~TIER][/N@TIER|/N~TIER]:WEIGHT, "
                             "e.g. 4x8:10 or 16x8@spine/8@leaf:2") from None
        if entry.pods < 1 or entry.gpus_per_pod < 1 or entry.weight < 0:
            raise ValueError(f"bad mix entry {part!r}: pods and gpus >= 1, weight >= 0")
        if entry.slices is not None and (entry.slices.pods < 2 or entry.pods % entry.slices.pods):
            raise ValueError(f"bad mix entry {part!r}: slices of at least 2 pods that divide the gang")
        entries.append(entry)
    if not entries or sum(e.weight for e in entries) <= 0:
        raise ValueError("the mix needs at least one entry with a positive weight")
    return tuple(entries)


def _mix_entry(part: str) -> MixEntry:
    shape_text, weight = part.rsplit(":", 1)
    shape_text, sliced, slice_text = shape_text.partition("/")
    shape = _SHAPE.fullmatch(shape_text)
    cut = _SLICE.fullmatch(slice_text) if sliced else None
    if shape is None or (sliced and cut is None):
        raise ValueError(part)
    slices = None if cut is None else request.Slices(int(cut[1]), cut[3], cut[2] == "@")
    return MixEntry(int(shape[1]), int(shape[2]), float(weight), shape[3], shape[4], slices)


def parse_priorities(text: str) -> tuple[tuple[int, float], ...]:
    """``"0:70,100:25,1000:5"`` -> ((0, 70.0), ...); raises ValueError with the bad part."""
    entries: list[tuple[int, float]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        try:
            value, weight = part.split(":")
            entry = (int(value), float(weight))
        except ValueError:
            raise ValueError(
                f"bad priority mix entry {part!r}; expected PRIORITY:WEIGHT, e.g. 1000:5") from None
        if not records.MIN_PRIORITY <= entry[0] <= records.MAX_PRIORITY or not entry[1] >= 0:
            raise ValueError(f"bad priority mix entry {part!r}: priority in "
                             f"[{records.MIN_PRIORITY}, {records.MAX_PRIORITY}], weight >= 0")
        entries.append(entry)
    if not entries or sum(w for _, w in entries) <= 0:
        raise ValueError("the priority mix needs at least one entry with a positive weight")
    return tuple(entries)


def parse_duration(text: str) -> DurationDist:
    """``lognormal:median=3600,sigma=1`` | ``exp:mean=3600`` | ``fixed:3600``."""
    kind, _, rest = text.partition(":")
    needed = {"lognormal": ("median", "sigma"), "exp": ("mean",), "fixed": ("value",)}
    if kind not in needed:
        raise ValueError(f"unknown duration distribution {kind!r}; expected {', '.join(needed)}")
    params: dict[str, float] = {}
    try:
        if kind == "fixed" and "=" not in rest:
            params["value"] = float(rest)
        else:
            for item in (i for i in rest.split(",") if i):
                key, value = item.split("=")
                params[key.strip()] = float(value)
    except ValueError:
        raise ValueError(f"bad duration parameters {rest!r} in {text!r}") from None
    if set(params) != set(needed[kind]) or any(v <= 0 for k, v in params.items() if k != "sigma"):
        raise ValueError(f"{kind} needs {', '.join(needed[kind])} (positive), got {rest!r}")
    return DurationDist(kind, tuple(sorted(params.items())))


def generate(options: TraceOptions) -> list[records.Job]:
    """Jobs drawn from the mix, arriving as a Poisson process at the offered load.

    Sizes and durations are drawn first; the arrival horizon T is then the total work over
    (load x GPUs), and inter-arrival gaps are exponential with mean T / jobs, so the trace's
    realised offered load is ``load`` up to the last arrival's jitter.
    """
    rng = random.Random(options.seed)
    limits = options.max_pods or {}

    def fits(e: MixEntry) -> bool:
        if e.pods * e.gpus_per_pod > options.total_gpus:
            return False
        cluster = limits.get((None, e.gpus_per_pod), e.pods)
        if e.slices is not None and e.slices.required and e.slices.pods > limits.get(
                (e.slices.tier, e.gpus_per_pod), e.slices.pods):
            return False
        return e.pods <= min(cluster, limits.get((e.required_tier, e.gpus_per_pod), cluster))

    mix = [e for e in options.mix or parse_mix(DEFAULT_MIX) if fits(e)]
    if not mix:
        raise ValueError("no mix entry fits the cluster")
    weights = [e.weight for e in mix]
    shapes = rng.choices(mix, weights=weights, k=options.jobs)
    durations = [options.duration.sample(rng) for _ in shapes]
    work = sum(s.pods * s.gpus_per_pod * d for s, d in zip(shapes, durations, strict=True))
    horizon = work / (options.load * options.total_gpus)
    gap = horizon / options.jobs
    width = len(str(options.jobs))
    priorities: list[int | None] = [None] * options.jobs
    if options.priorities:
        own = random.Random(f"{options.seed}/priority")
        values = [p for p, _ in options.priorities]
        chances = [w for _, w in options.priorities]
        priorities = list(own.choices(values, weights=chances, k=options.jobs))
    jobs: list[records.Job] = []
    now = 0.0
    for i, (shape, duration) in enumerate(zip(shapes, durations, strict=True)):
        jobs.append(records.Job(f"job-{i:0{width}d}", round(now, 1), shape.pods, shape.gpus_per_pod,
                                round(duration, 1), shape.required_tier, priority=priorities[i],
                                preferred_tier=shape.preferred_tier, slices=shape.slices))
        now += rng.expovariate(1.0 / gap)
    return jobs


def to_csv(jobs: Sequence[records.Job]) -> str:
    """The job trace file ``records.read_jobs`` reads back: the optional columns only when a
    job uses them, so a trace without constraints or priorities keeps the six columns."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns: list[str] = []
    if any(j.priority is not None for j in jobs):
        columns.append(records.PRIORITY_COLUMN)
    if any(j.preferred_tier for j in jobs):
        columns.append(records.PREFERRED_COLUMN)
    if any(j.slices for j in jobs):
        columns.append(records.SLICE_COLUMN)
    if any(j.traffic for j in jobs):
        columns.append(records.TRAFFIC_COLUMN)
    writer.writerow(records.JOB_COLUMNS + tuple(columns))
    for j in jobs:
        cells: dict[str, object] = {records.PRIORITY_COLUMN: j.rank,
                                    records.PREFERRED_COLUMN: j.preferred_tier or "",
                                    records.SLICE_COLUMN: slice_cell(j.slices),
                                    records.TRAFFIC_COLUMN: j.traffic.value if j.traffic else ""}
        row: list[object] = [j.name, j.submit_s, j.pods, j.gpus_per_pod, j.duration_s, j.required_tier or ""]
        writer.writerow([*row, *(cells[c] for c in columns)])
    return out.getvalue()


def slice_cell(slices: request.Slices | None) -> str:
    """The ``slice`` column's cell: ``N@tier`` required, ``N~tier`` preferred, empty for none."""
    if slices is None:
        return ""
    return f"{slices.pods}{'@' if slices.required else '~'}{slices.tier}"

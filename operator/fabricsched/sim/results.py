"""A run's outcome per job, the summary figures, and the result.json document (docs/design.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.sim import records


@dataclass(frozen=True)
class Span:
    """One run of a job: from its start to its end, or to its preemption."""

    start_s: float
    end_s: float
    placement: tuple[ids.NodeName, ...]
    preempted_by: str | None = None
    """The name of the job that preempted this run; None for a run that ended."""


@dataclass(frozen=True)
class Outcome:
    """What happened to one job; a job that never started has ``start_s`` None."""

    job: records.Job
    start_s: float | None = None
    end_s: float | None = None
    placement: tuple[ids.NodeName, ...] = ()
    domains_spanned: Mapping[str, int] = field(default_factory=dict)
    """Distinct domains the placement uses, per tier name."""
    degraded_path: bool = False
    comm_slowdown: float | None = None
    floor: float = 1.0
    """Slowdown of the gang's best placement alone in the empty, healthy fabric."""
    fits_one_leaf: bool = False
    """Some lowest-tier domain could hold the whole gang in the empty fabric."""
    avoidable_degraded: bool = False
    """On a degraded path although the engine found a healthy placement at that moment."""
    down_use: bool = False
    """Traffic crosses a down element (a down host in a multi-host gang, or a partly spanned
    domain whose uplinks are down): must never happen."""
    waited_for_locality_s: float = 0.0
    """From the first time the policy held the job although it fit (waiting for locality)
    until it started; part of its wait, 0 when never held."""
    earlier: tuple[Span, ...] = ()
    """The runs before the last one, each ended by a preemption."""
    lost_gpu_s: float = 0.0
    """GPU-seconds of work its preemptions threw away (since each one's last checkpoint)."""
    slice_domains: tuple[str | None, ...] = ()
    """The domain of each slice of its last run, slice 0 first (None: the slice was split);
    empty for a job without slices."""
    traffic: api.TrafficPattern = api.TrafficPattern.ALL_TO_ALL
    """The pattern its slowdown is priced with (its trace cell, else the topology's default)."""

    @property
    def preferred_held(self) -> bool | None:
        """Whether its last run was inside one domain of its preferred tier (None: none asked,
        or it never started)."""
        tier = self.job.preferred_tier
        if tier is None or not self.started:
            return None
        return self.domains_spanned.get(tier, 1) <= 1

    @property
    def runs(self) -> tuple[Span, ...]:
        """Every run, the last one included (when it started)."""
        if self.start_s is None or self.end_s is None:
            return self.earlier
        return (*self.earlier, Span(self.start_s, self.end_s, self.placement))

    @property
    def waited_s(self) -> float | None:
        """Time spent queued: before the first run and between runs; None if it never started."""
        if self.start_s is None:
            return None
        if not self.earlier:
            return self.start_s - self.job.submit_s
        gaps = self.earlier[0].start_s - self.job.submit_s
        for before, after in zip(self.earlier, (*self.earlier[1:], None), strict=True):
            gaps += (after.start_s if after is not None else self.start_s) - before.end_s
        return gaps

    @property
    def started(self) -> bool:
        return self.start_s is not None

    @property
    def gang(self) -> bool:
        return self.job.pods > 1


@dataclass(frozen=True)
class Run:
    policy: str
    outcomes: tuple[Outcome, ...]
    """In trace order."""
    total_gpus: int
    lowest_tier: str


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def summarize(run: Run) -> dict[str, float | int]:
    """The figures of docs/benchmark.md; gang figures cover started jobs of more than one pod."""
    started = [o for o in run.outcomes if o.started]
    waits = [o.waited_s for o in started if o.waited_s is not None]
    gangs = [o for o in started if o.gang]
    slowdowns = [o.comm_slowdown for o in gangs if o.comm_slowdown is not None]
    ends = [o.end_s for o in started if o.end_s is not None]
    first = min(o.job.submit_s for o in run.outcomes)
    makespan = max(ends) - first if ends else 0.0
    busy = sum((r.end_s - r.start_s) * o.job.pods * o.job.gpus_per_pod for o in started for r in o.runs)
    work = sum(o.job.duration_s * o.job.pods * o.job.gpus_per_pod for o in started)
    leaf_fit = [o for o in gangs if o.fits_one_leaf]
    in_leaf = [o for o in leaf_fit if o.domains_spanned.get(run.lowest_tier, 0) == 1]
    over_floor = [o.comm_slowdown / o.floor for o in gangs if o.comm_slowdown is not None]
    held = [o for o in started if o.waited_for_locality_s > 0]
    # Time in the system over the job's own duration: waits and stretched runs in one figure.
    stretch = [(o.end_s - o.job.submit_s) / o.job.duration_s for o in started
               if o.end_s is not None and o.job.duration_s > 0]
    return {
        "jobs": len(run.outcomes),
        "jobs_started": len(started),
        "wait_mean_s": _mean(waits),
        "wait_p95_s": percentile(waits, 95),
        "stretch_mean": _mean(stretch),
        "makespan_s": makespan,
        "gpu_utilisation": busy / (run.total_gpus * makespan) if makespan > 0 else 0.0,
        # The same with each job's unstretched duration: busy time lost to slowdown is not work.
        "gpu_useful_utilisation": work / (run.total_gpus * makespan) if makespan > 0 else 0.0,
        "gangs": len(gangs),
        "gangs_one_leaf_pct": 100.0 * len(in_leaf) / len(leaf_fit) if leaf_fit else math.nan,
        "slowdown_mean": _mean(slowdowns),
        "slowdown_p95": percentile(slowdowns, 95),
        "slowdown_over_floor_mean": _mean(over_floor),
        "gangs_degraded_path": sum(o.degraded_path for o in gangs),
        "gangs_degraded_avoidable": sum(o.avoidable_degraded for o in gangs),
        "down_element_uses": sum(o.down_use for o in started),
        "gangs_held_for_locality": len(held),
        "held_for_locality_mean_s": _mean([o.waited_for_locality_s for o in held]),
    }


def _number(value: float) -> float | None:
    # JSON has no NaN or Infinity: an undefined figure (no gangs at all) is null.
    return value if math.isfinite(value) else None


def document(run: Run) -> dict[str, Any]:
    """result.json: ``{"policy", "jobs": [...], "summary": {...}}``.

    A trace with a priority column adds, per job, ``priority``, ``runs`` and ``lost_gpu_s``,
    and the summary ``by_priority``; a trace without one gives the document it always gave."""
    jobs: list[dict[str, Any]] = [
        {
            "name": o.job.name,
            "submit_s": o.job.submit_s,
            "start_s": o.start_s,
            "end_s": o.end_s,
            "pods": o.job.pods,
            "gpus_per_pod": o.job.gpus_per_pod,
            "placement": list(o.placement),
            "domains_spanned": dict(o.domains_spanned),
            "degraded_path": o.degraded_path,
            "comm_slowdown": None if o.comm_slowdown is None else _number(o.comm_slowdown),
            "waited_for_locality_s": o.waited_for_locality_s,
        }
        for o in run.outcomes
    ]
    summary: dict[str, Any] = {k: v if isinstance(v, int) else _number(v) for k, v in summarize(run).items()}
    if any(o.job.priority is not None for o in run.outcomes):
        for entry, o in zip(jobs, run.outcomes, strict=True):
            entry["priority"] = o.job.rank
            entry["runs"] = [{"start_s": r.start_s, "end_s": _number(r.end_s), "placement": list(r.placement),
                              "preempted_by": r.preempted_by} for r in o.runs]
            entry["lost_gpu_s"] = o.lost_gpu_s
        summary["by_priority"] = {str(p): {k: v if isinstance(v, int) else _number(v) for k, v in f.items()}
                                  for p, f in by_priority(run).items()}
    if any(o.job.traffic is not None or o.traffic != api.TrafficPattern.ALL_TO_ALL for o in run.outcomes):
        # Only then: a trace of all-to-all jobs gives the document it always gave.
        for entry, o in zip(jobs, run.outcomes, strict=True):
            entry["traffic"] = o.traffic.value
    if any(o.job.preferred_tier is not None or o.job.slices is not None for o in run.outcomes):
        for entry, o in zip(jobs, run.outcomes, strict=True):
            entry.update(constraints(o))
        summary["constraints"] = constraint_summary(run)
    return {"policy": run.policy, "jobs": jobs, "summary": summary}


def constraints(o: Outcome) -> dict[str, Any]:
    """What a job asked of the fabric (the trace's tier and slice columns) and what held."""
    s = o.job.slices
    return {
        "required_tier": o.job.required_tier,
        "preferred_tier": o.job.preferred_tier,
        "preferred_held": o.preferred_held,
        "slice": None if s is None else {"pods": s.pods, "tier": s.tier, "required": s.required},
        "slice_domains": list(o.slice_domains),
    }


def constraint_summary(run: Run) -> dict[str, int]:
    """How often the asked constraints held: preferred tiers kept, slices kept whole."""
    started = [o for o in run.outcomes if o.started]
    preferred = [o.preferred_held for o in started if o.preferred_held is not None]
    sliced = [o for o in started if o.job.slices is not None]
    return {
        "preferred_asked": len(preferred),
        "preferred_held": sum(preferred),
        "sliced_jobs": len(sliced),
        "slices": sum(len(o.slice_domains) for o in sliced),
        "slices_split": sum(d is None for o in sliced for d in o.slice_domains),
    }


def by_priority(run: Run) -> dict[int, dict[str, float | int]]:
    """Per priority class, highest first: waits, stretch (time in system over duration),
    preemptions suffered and GPU-hours lost."""
    classes: dict[int, list[Outcome]] = {}
    for o in run.outcomes:
        classes.setdefault(o.job.rank, []).append(o)
    out: dict[int, dict[str, float | int]] = {}
    for priority in sorted(classes, reverse=True):
        members = classes[priority]
        waits = [o.waited_s for o in members if o.waited_s is not None]
        stretch = [(o.end_s - o.job.submit_s) / o.job.duration_s for o in members if o.end_s is not None]
        out[priority] = {
            "jobs": len(members),
            "wait_mean_s": _mean(waits),
            "wait_p95_s": percentile(waits, 95),
            "stretch_mean": _mean(stretch),
            "stretch_p95": percentile(stretch, 95),
            "preemptions": sum(len(o.earlier) for o in members),
            "gpu_hours_lost": sum(o.lost_gpu_s for o in members) / 3600,
        }
    return out


def utilisation_series(jobs: Sequence[Mapping[str, Any]], total_gpus: int) -> list[tuple[float, float]]:
    """(time, busy GPU fraction) steps from result.json jobs: the plots need nothing else."""
    deltas: dict[float, int] = {}
    for job in jobs:
        if job["start_s"] is None or job["end_s"] is None:
            continue
        gpus = job["pods"] * job["gpus_per_pod"]
        deltas[job["start_s"]] = deltas.get(job["start_s"], 0) + gpus
        deltas[job["end_s"]] = deltas.get(job["end_s"], 0) - gpus
    busy = 0
    series: list[tuple[float, float]] = []
    for t in sorted(deltas):
        busy += deltas[t]
        series.append((t, busy / total_gpus))
    return series

"""A run's outcome per job, the summary figures, and the result.json document (docs/design.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricsched import ids
from fabricsched.sim import records


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
    waits = [o.start_s - o.job.submit_s for o in started if o.start_s is not None]
    gangs = [o for o in started if o.gang]
    slowdowns = [o.comm_slowdown for o in gangs if o.comm_slowdown is not None]
    ends = [o.end_s for o in started if o.end_s is not None]
    first = min(o.job.submit_s for o in run.outcomes)
    makespan = max(ends) - first if ends else 0.0
    busy = sum((o.end_s - o.start_s) * o.job.pods * o.job.gpus_per_pod
               for o in started if o.end_s is not None and o.start_s is not None)
    work = sum(o.job.duration_s * o.job.pods * o.job.gpus_per_pod for o in started)
    leaf_fit = [o for o in gangs if o.fits_one_leaf]
    in_leaf = [o for o in leaf_fit if o.domains_spanned.get(run.lowest_tier, 0) == 1]
    over_floor = [o.comm_slowdown / o.floor for o in gangs if o.comm_slowdown is not None]
    held = [o for o in started if o.waited_for_locality_s > 0]
    return {
        "jobs": len(run.outcomes),
        "jobs_started": len(started),
        "wait_mean_s": _mean(waits),
        "wait_p95_s": percentile(waits, 95),
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
    """result.json: ``{"policy", "jobs": [...], "summary": {...}}``."""
    jobs = [
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
    summary = {k: v if isinstance(v, int) else _number(v) for k, v in summarize(run).items()}
    return {"policy": run.policy, "jobs": jobs, "summary": summary}


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

"""Experiment: how much does waiting for locality (Slurm's ``--switches=N@timeout``) buy?

A prototype for the placement engine's owner, not a simulator policy: the ``fabric`` policy's
plan is taken as is, except that a gang whose plan is more than ``--slack`` above its floor is
held back, until a better plan appears or it has waited ``--timeout`` seconds since submission.
It runs on the simulator's engine (same events, capacity model and summary), adding a timer
event at each held gang's deadline so it is retried then. With timeout 0 it is ``fabric``.

    python bench/locality_wait.py --fabric three-tier --timeouts 0,3600,14400
"""

from __future__ import annotations

import argparse
import heapq
import sys
from pathlib import Path

from fabricsched.placement import placing, request
from fabricsched.sim import engine, policies, results, scenario

ROOT = Path(__file__).resolve().parent.parent
_DEADLINE = -2
"""Payload of a timer event: not a health change, but held gangs must be tried again."""


class LocalityWait(engine.Simulation):
    def __init__(self, scn: scenario.Scenario, timeout: float, slack: float) -> None:
        super().__init__(scn, policies.make("fabric", 0))
        self.timeout = timeout
        self.slack = slack
        self.options = request.PlacementOptions(health_aware=True)
        self.deadlines: set[float] = set()

    def _health(self, now: float, payload: int) -> bool:
        return True if payload == _DEADLINE else super()._health(now, payload)

    def _pass(self, now: float, tried: list[int]) -> set[int]:
        started: set[int] = set()
        for i in tried:
            job = self.scn.jobs[i]
            if self.free.slots[job.gpus_per_pod] < job.pods:
                continue
            gang = policies.gang_request(self.snapshot, job)
            plan = placing.place(self.snapshot, self.free.gpus, gang, self.traffic, self.options)
            if not isinstance(plan, request.Plan):
                continue
            deadline = job.submit_s + self.timeout
            if job.pods > 1 and plan.comm_slowdown > self._floor(job) * (1 + self.slack) and now < deadline:
                if deadline not in self.deadlines:
                    self.deadlines.add(deadline)
                    heapq.heappush(self.heap, (deadline, 1, _DEADLINE, _DEADLINE))
                continue
            self._start(now, i, plan.ranks)
            started.add(i)
        return started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fabric", default="three-tier", help="folder under examples/sim")
    parser.add_argument("--jobs", type=Path, help="trace CSV; default the fabric's jobs.csv")
    parser.add_argument("--timeouts", default="0,1800,3600,14400", help="seconds, comma-separated")
    parser.add_argument("--slack", type=float, default=0.05, help="hold plans above floor x (1 + slack)")
    args = parser.parse_args(argv)
    folder = ROOT / "examples" / "sim" / args.fabric
    events = folder / "events.csv"
    scn = scenario.load(folder / "nodes.yaml", folder / "topology.yaml", args.jobs or folder / "jobs.csv",
                        events if events.exists() else None)
    default = results.summarize(engine.simulate(scn, policies.make("default", 0)))
    print(f"{args.fabric}, {args.jobs or 'jobs.csv'}: default's mean wait {default['wait_mean_s']:.0f} s\n")
    print("| timeout (s) | wait mean (s) | wait p95 (s) | over floor | gangs in one leaf "
          "| avoidable degraded | makespan (h) |\n|---:|---:|---:|---:|---:|---:|---:|")
    for timeout in (float(t) for t in args.timeouts.split(",")):
        s = results.summarize(LocalityWait(scn, timeout, args.slack).run())
        print(f"| {timeout:.0f} | {s['wait_mean_s']:.0f} | {s['wait_p95_s']:.0f} "
              f"| {s['slowdown_over_floor_mean']:.3f} | {s['gangs_one_leaf_pct']:.1f}% "
              f"| {s['gangs_degraded_avoidable']} | {s['makespan_s'] / 3600:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

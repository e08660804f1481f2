"""Placement-quality benchmark: every policy on every sample fabric, tables and plots for the docs.

Runs the simulator in-process on each folder of ``examples/sim`` (nodes, topology, jobs,
events): ``fabric`` with its locality wait (the shipped default, the extender's too) and
without it, then ``tas-bestfit``, ``default`` and ``random``. Writes the results under ``--out``, one PNG per
fabric under ``--img-dir``, and prints Markdown tables (with the wall time of each run) for
``docs/benchmark.md``. Usage, from the repository root:

    python bench/placement_quality.py                 # all sample fabrics
    python bench/placement_quality.py --fabric leaf-spine --seed 1
    python bench/placement_quality.py --sweep 0.5,0.7,0.8          # also: offered-load sweep
    python bench/placement_quality.py --sweep 0.5,0.6,0.7,0.8,0.9 --timeouts 0,300,600,3600,14400
    python bench/placement_quality.py --sweep 0.7,0.8 --trace-seed 1 --timeouts 0,3600,14400
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from fabricsched.placement import request
from fabricsched.sim import commands, engine, plots, policies, report, results, scenario, traces

ROOT = Path(__file__).resolve().parent.parent
NO_WAIT = request.LocalityWait(timeout_s=0.0)
WAIT = policies.DEFAULT_LOCALITY_WAIT

# (column label, policy, fabric's locality wait): "fabric" is the simulator's default.
RUNS: tuple[tuple[str, str, request.LocalityWait | None], ...] = (
    ("fabric", "fabric", WAIT),
    ("fabric, no wait", "fabric", NO_WAIT),
    ("tas-bestfit", "tas-bestfit", None),
    ("default", "default", None),
    ("random", "random", None),
)
SWEEP_RUNS = RUNS[:4]
LADDER_RISE = 0.05
"""Most mean stretch may rise from one locality wait to the next longer one (docs/benchmark.md)."""


def _file_name(label: str) -> str:
    return "result-" + label.replace(", ", "-").replace(" ", "") + ".json"


def _load(folder: Path, jobs: Path) -> scenario.Scenario:
    events = folder / "events.csv"
    return scenario.load(folder / "nodes.yaml", folder / "topology.yaml", jobs,
                         events if events.exists() else None)


def run_fabric(folder: Path, out: Path, img_dir: Path, seed: int) -> str:
    scn = _load(folder, folder / "jobs.csv")
    documents: dict[str, dict[str, Any]] = {}
    timings = {}
    total_gpus = 0
    for label, name, wait in RUNS:
        started = time.perf_counter()
        run = engine.simulate(scn, policies.make(name, seed, wait))
        timings[label] = time.perf_counter() - started
        total_gpus = run.total_gpus
        documents[label] = results.document(run)
        target = out / folder.name / _file_name(label)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(documents[label], indent=1) + "\n", encoding="utf-8")
    img_dir.mkdir(parents=True, exist_ok=True)
    plots.plot(documents, total_gpus, img_dir / f"sim-{folder.name}.png",
               title=f"{folder.name}: {len(scn.structure.hosts)} hosts, {total_gpus} GPUs, "
                     f"{len(scn.jobs)} jobs, {len(scn.events)} health events")
    table = report.table({n: d["summary"] for n, d in documents.items()}, markdown=True)
    times = " | ".join(f"{n} {t:.1f} s" for n, t in timings.items())
    return f"### {folder.name}\n\n{table}\n\nWall time per run: {times}\n"


def sweep_traces(folder: Path, loads: list[float], jobs: int, trace_seed: int, scratch: Path) -> list[Path]:
    """Fresh default-mix traces of the fabric at each offered load (written once, then reused)."""
    sizes = {e.gpus_per_pod for e in traces.parse_mix(traces.DEFAULT_MIX)}
    limits, total = commands.cluster_limits(folder / "nodes.yaml", folder / "topology.yaml", sizes)
    paths = []
    for load in loads:
        trace = scratch / f"{folder.name}-load-{load}-seed-{trace_seed}.csv"
        trace.parent.mkdir(parents=True, exist_ok=True)
        options = traces.TraceOptions(jobs, total, load, trace_seed, max_pods=limits)
        trace.write_text(traces.to_csv(traces.generate(options)), encoding="utf-8")
        paths.append(trace)
    return paths


def sweep(folder: Path, loads: list[float], paths: list[Path], seed: int) -> str:
    """The fabric's nodes and events with the sweep's traces, every policy of ``SWEEP_RUNS``."""
    rows = ["| load | policy | wait mean (s) | wait p95 (s) | stretch mean | GPU util. (busy) "
            "| gangs in one leaf | slowdown mean | over floor | avoidable degraded |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for load, trace in zip(loads, paths, strict=True):
        scn = _load(folder, trace)
        for label, name, wait in SWEEP_RUNS:
            s = results.summarize(engine.simulate(scn, policies.make(name, seed, wait)))
            rows.append(
                f"| {load} | {label} | {s['wait_mean_s']:.0f} | {s['wait_p95_s']:.0f} "
                f"| {s['stretch_mean']:.3f} | {100 * s['gpu_utilisation']:.1f}% "
                f"| {s['gangs_one_leaf_pct']:.1f}% "
                f"| {s['slowdown_mean']:.3f} | {s['slowdown_over_floor_mean']:.3f} "
                f"| {s['gangs_degraded_avoidable']} |")
    return "\n".join(rows)


def timeouts(
    folder: Path, loads: list[float], paths: list[Path], waits: list[float], tolerance: float,
    hold_limit: float = WAIT.hold_limit,
) -> str:
    """``fabric`` with each locality-wait timeout on the sweep's traces (timeout 0: no wait).

    The last column checks the ladder rule: mean stretch never rises by more than 5 % from one
    wait to the next longer one on a trace (``ok``; ``+N %`` where it does)."""
    rows = ["| load | timeout (s) | wait mean (s) | wait p95 (s) | stretch mean | over floor "
            "| gangs in one leaf | held | held, mean (s) | makespan (h) | ladder |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for load, trace in zip(loads, paths, strict=True):
        scn = _load(folder, trace)
        before = None
        for timeout in waits:
            wait = request.LocalityWait(timeout, tolerance, hold_limit)
            s = results.summarize(engine.simulate(scn, policies.make("fabric", 0, wait)))
            held = s["held_for_locality_mean_s"]
            stretch = s["stretch_mean"]
            rise = 0.0 if before is None else stretch / before - 1
            before = stretch
            rows.append(
                f"| {load} | {timeout:.0f} | {s['wait_mean_s']:.0f} | {s['wait_p95_s']:.0f} "
                f"| {stretch:.3f} | {s['slowdown_over_floor_mean']:.3f} | {s['gangs_one_leaf_pct']:.1f}% "
                f"| {s['gangs_held_for_locality']} | {'-' if held != held else f'{held:.0f}'} "
                f"| {s['makespan_s'] / 3600:.1f} "
                f"| {'ok' if rise <= LADDER_RISE else f'+{100 * rise:.0f} %'} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=Path, default=ROOT / "examples" / "sim")
    parser.add_argument("--fabric", action="append", help="folder name under --examples (repeatable)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench")
    parser.add_argument("--img-dir", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--seed", type=int, default=0, help="seed of the default and random policies")
    parser.add_argument("--sweep", help="comma-separated offered loads: also run a load sweep")
    parser.add_argument("--sweep-jobs", type=int, default=2000)
    parser.add_argument("--trace-seed", type=int, default=42)
    parser.add_argument("--timeouts", help="with --sweep: comma-separated locality-wait timeouts (s) "
                        "to compare for fabric on the sweep's traces")
    parser.add_argument("--tolerance", type=float, default=WAIT.tolerance, help="with --timeouts")
    parser.add_argument("--hold-limit", type=float, default=WAIT.hold_limit, help="with --timeouts")
    parser.add_argument("--no-main", action="store_true", help="skip the sample traces (jobs.csv) and plots")
    args = parser.parse_args(argv)
    folders = ([args.examples / f for f in args.fabric] if args.fabric
               else sorted(p for p in args.examples.iterdir() if (p / "jobs.csv").exists()))
    for folder in folders:
        if not args.no_main:
            print(run_fabric(folder, args.out, args.img_dir, args.seed), flush=True)
        if args.sweep:
            loads = [float(x) for x in args.sweep.split(",")]
            paths = sweep_traces(folder, loads, args.sweep_jobs, args.trace_seed, args.out / "traces")
            title = (f"### {folder.name}: offered-load sweep ({args.sweep_jobs} jobs, "
                     f"trace seed {args.trace_seed})")
            print(title + "\n\n" + sweep(folder, loads, paths, args.seed) + "\n", flush=True)
            if args.timeouts:
                waits = [float(x) for x in args.timeouts.split(",")]
                table = timeouts(folder, loads, paths, waits, args.tolerance, args.hold_limit)
                print(f"### {folder.name}: locality-wait timeouts (trace seed {args.trace_seed})\n\n"
                      + table + "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

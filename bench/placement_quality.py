"""Placement-quality benchmark: every policy on every sample fabric, tables and plots for the docs.

Runs ``fabricsched simulate --compare`` in-process on each folder of ``examples/sim`` (nodes,
topology, jobs, events), writes the results under ``--out``, one PNG per fabric under
``--img-dir``, and prints Markdown tables (with the wall time of each run) for
``docs/benchmark.md``. Usage, from the repository root:

    python bench/placement_quality.py                 # all sample fabrics
    python bench/placement_quality.py --fabric leaf-spine --seed 1
    python bench/placement_quality.py --sweep 0.5,0.65,0.8   # also: offered-load sweep
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from fabricsched.sim import commands, engine, plots, policies, report, results, scenario, traces

ROOT = Path(__file__).resolve().parent.parent


def run_fabric(folder: Path, out: Path, img_dir: Path, seed: int) -> str:
    events = folder / "events.csv"
    scn = scenario.load(folder / "nodes.yaml", folder / "topology.yaml", folder / "jobs.csv",
                        events if events.exists() else None)
    documents = {}
    timings = {}
    total_gpus = 0
    for name in policies.POLICY_NAMES:
        started = time.perf_counter()
        run = engine.simulate(scn, policies.make(name, seed))
        timings[name] = time.perf_counter() - started
        total_gpus = run.total_gpus
        documents[name] = results.document(run)
        target = out / folder.name / f"result-{name}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(documents[name], indent=1) + "\n", encoding="utf-8")
    img_dir.mkdir(parents=True, exist_ok=True)
    plots.plot(documents, total_gpus, img_dir / f"sim-{folder.name}.png",
               title=f"{folder.name}: {len(scn.structure.hosts)} hosts, {total_gpus} GPUs, "
                     f"{len(scn.jobs)} jobs, {len(scn.events)} health events")
    table = report.table({n: d["summary"] for n, d in documents.items()}, markdown=True)
    times = " | ".join(f"{n} {t:.1f} s" for n, t in timings.items())
    return f"### {folder.name}\n\n{table}\n\nWall time per run: {times}\n"


SWEEP_POLICIES = ("fabric", "tas-bestfit", "default")


def sweep(folder: Path, loads: list[float], jobs: int, trace_seed: int, seed: int, scratch: Path) -> str:
    """The fabric's nodes and events with fresh default-mix traces at several offered loads."""
    sizes = {e.gpus_per_pod for e in traces.parse_mix(traces.DEFAULT_MIX)}
    limits, total = commands.cluster_limits(folder / "nodes.yaml", folder / "topology.yaml", sizes)
    rows = ["| load | policy | wait mean (s) | GPU util. (busy) | gangs in one leaf | slowdown mean "
            "| over floor | avoidable degraded |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for load in loads:
        trace = scratch / f"{folder.name}-load-{load}.csv"
        trace.parent.mkdir(parents=True, exist_ok=True)
        options = traces.TraceOptions(jobs, total, load, trace_seed, max_pods=limits)
        trace.write_text(traces.to_csv(traces.generate(options)), encoding="utf-8")
        events = folder / "events.csv"
        scn = scenario.load(folder / "nodes.yaml", folder / "topology.yaml", trace,
                            events if events.exists() else None)
        for name in SWEEP_POLICIES:
            s = results.summarize(engine.simulate(scn, policies.make(name, seed)))
            rows.append(
                f"| {load} | {name} | {s['wait_mean_s']:.0f} | {100 * s['gpu_utilisation']:.1f}% "
                f"| {s['gangs_one_leaf_pct']:.1f}% | {s['slowdown_mean']:.3f} "
                f"| {s['slowdown_over_floor_mean']:.3f} | {s['gangs_degraded_avoidable']} |")
    title = f"### {folder.name}: offered-load sweep ({jobs} jobs, trace seed {trace_seed})"
    return title + "\n\n" + "\n".join(rows)


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
    args = parser.parse_args(argv)
    folders = ([args.examples / f for f in args.fabric] if args.fabric
               else sorted(p for p in args.examples.iterdir() if (p / "jobs.csv").exists()))
    for folder in folders:
        print(run_fabric(folder, args.out, args.img_dir, args.seed), flush=True)
        if args.sweep:
            loads = [float(x) for x in args.sweep.split(",")]
            scratch = args.out / "traces"
            table = sweep(folder, loads, args.sweep_jobs, args.trace_seed, args.seed, scratch)
            print(table + "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``fabricsched simulate``, ``fabricsched trace generate`` and ``fabricsched trace fabric``.

The adapter around the pure simulation: reads the files, runs the policies, writes result.json,
prints the tables. Input errors print as ``file:line: message`` and exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import yaml

from fabricsched.placement import request
from fabricsched.sim import (
    engine,
    errors,
    fabric_page,
    fabrics,
    manifests,
    plots,
    policies,
    report,
    results,
    scenario,
    traces,
)
from fabricsched.topology import building
from fabricsched.topology import nodes as topo_nodes

INPUT_ERROR = 2


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _register_simulate(sub)
    _register_trace(sub)


def _register_simulate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = sub.add_parser(
        "simulate", help="replay a job trace on a fabric under a placement policy",
        description="Replay a job trace (and health events) on a fabric; write result.json and a summary.")
    sim.add_argument("--nodes", required=True, type=Path, help="NodeList YAML (kubectl get nodes -o yaml)")
    sim.add_argument("--topology", required=True, type=Path, help="FabricTopology YAML")
    sim.add_argument("--jobs", required=True, type=Path,
                     help="CSV: name,submit_s,pods,gpus_per_pod,duration_s,required_tier, then any of "
                     "priority, preferred_tier, slice (N@tier | N~tier), traffic (all-to-all | ring)")
    sim.add_argument("--events", type=Path, help="CSV: time_s,target_kind,target,state,capacity")
    sim.add_argument("--policy", choices=policies.POLICY_NAMES, default="fabric")
    sim.add_argument("--seed", type=int, default=0, help="seed of the default and random policies' choices")
    wait = policies.DEFAULT_LOCALITY_WAIT
    sim.add_argument("--locality-wait", type=float, default=wait.timeout_s, metavar="SECONDS",
                     help="fabric policy: hold a gang whose best plan is above its floor by more than "
                     "--locality-tolerance for up to this long from its first plan, for a better one; "
                     "0 = start as soon as it fits; the extender's default too "
                     f"(default: {wait.timeout_s:g}s)")
    sim.add_argument("--locality-tolerance", type=float, default=wait.tolerance, metavar="FRACTION",
                     help="fabric policy: a plan within floor x (1 + this) starts at once "
                     f"(default: {wait.tolerance:g})")
    sim.add_argument("--locality-hold-limit", type=float, default=wait.hold_limit, metavar="TIMEOUTS",
                     help="fabric policy: the longest a job is held in all, in timeouts, from its first "
                     "hold (a held job that lost its fit is held afresh once it fits again); 1 = one hold "
                     f"only; the extender's default too (default: {wait.hold_limit:g})")
    sim.add_argument("--fit-order", choices=[o.value for o in request.FitOrder],
                     default=request.DEFAULT_FIT_ORDER.value,
                     help="fabric and tas-bestfit: best fit's tie-break after health, tier and "
                     "comm_slowdown; top-down: the tightest domain at every tier, top first; holding: "
                     "only the holding domain's room (the older rule, kept to restore it); the extender's "
                     "default too (default: %(default)s)")
    sim.add_argument("--checkpoint-interval", type=float, default=engine.DEFAULT_CHECKPOINT_S,
                     metavar="SECONDS", help="with a priority column in the jobs: a preempted job loses "
                     "the work since its last checkpoint, taken this often "
                     f"(default {engine.DEFAULT_CHECKPOINT_S:g})")
    sim.add_argument("--out", required=True, type=Path,
                     help="result.json; with --compare a directory that gets result-<policy>.json each")
    sim.add_argument("--compare", action="store_true", help="run every policy and print them side by side")
    sim.add_argument("--plot", type=Path, help="PNG: slowdown CDF, wait CDF, utilisation over time")
    sim.add_argument("--report", type=Path, metavar="HTML",
                     help="the fabric page as one static HTML file: the fabric at the last job start, "
                     "the summary, the plots and every job (see docs/dashboard.md)")
    sim.add_argument("--quiet", action="store_true", help="no progress bar, no table")
    sim.set_defaults(handler=simulate)


def _register_trace(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    trace = sub.add_parser("trace", help="generate simulator inputs")
    trace_sub = trace.add_subparsers(dest="trace_command", required=True)
    gen = trace_sub.add_parser(
        "generate", help="a synthetic job trace (CSV)",
        description="Jobs drawn from a size mix with Poisson arrivals sized to an offered load.")
    size = gen.add_mutually_exclusive_group(required=True)
    size.add_argument("--nodes", type=Path, help="NodeList YAML: the cluster the load refers to")
    size.add_argument("--gpus", type=int, help="total GPUs the load refers to")
    gen.add_argument("--topology", type=Path,
                     help="with --nodes: FabricTopology YAML; drops mix entries whose required tier "
                     "no domain holds, and reads the GPU resource name")
    gen.add_argument("--jobs", type=int, required=True, help="number of jobs")
    gen.add_argument("--load", type=float, default=0.8, help="offered load: GPU-seconds asked per GPU-second")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--mix", default=traces.DEFAULT_MIX,
                     help="PODSxGPUS[@TIER][~TIER][/N@TIER|/N~TIER]:WEIGHT,... "
                     "(by job count; @ required, ~ preferred, /N slices)")
    gen.add_argument("--priority-mix", metavar="PRIORITY:WEIGHT,...",
                     help="add a priority column drawn from this mix (by job count), "
                     "e.g. 0:70,100:25,1000:5")
    gen.add_argument("--duration-dist", default=traces.DEFAULT_DURATION,
                     help="lognormal:median=S,sigma=X | exp:mean=S | fixed:S")
    gen.add_argument("--out", type=Path, required=True)
    gen.set_defaults(handler=generate_trace)

    fab = trace_sub.add_parser(
        "fabric", help="a sample fabric: nodes YAML and FabricTopology YAML",
        description="Write a NodeList (as kubectl prints it) and a matching FabricTopology.")
    shape = fab.add_mutually_exclusive_group(required=True)
    shape.add_argument("--preset", choices=sorted(fabrics.PRESETS))
    shape.add_argument("--layout",
                       help="top tier first: NAME:COUNT[:OVERSUBSCRIPTION],... e.g. spine:1,leaf:63:2")
    fab.add_argument("--hosts-per-leaf", type=int, default=16, help="with --layout")
    fab.add_argument("--gpus-per-host", type=int, default=8, help="with --layout")
    fab.add_argument("--name", default="ib-sim", help="FabricTopology name")
    fab.add_argument("--nodes-out", type=Path, required=True)
    fab.add_argument("--topology-out", type=Path, required=True)
    fab.set_defaults(handler=generate_fabric)


def _fail(message: str) -> int:
    print(f"fabricsched: {message}", file=sys.stderr)
    return INPUT_ERROR


def simulate(args: argparse.Namespace) -> int:
    try:
        scn = scenario.load(args.nodes, args.topology, args.jobs, args.events)
    except errors.SimInputError as e:
        print(str(e), file=sys.stderr)
        return INPUT_ERROR
    if not args.quiet:
        for conflict in scn.conflicts:
            print(f"{args.nodes}: warning: left out of the fabric: {conflict.message}", file=sys.stderr)
    try:
        wait = request.LocalityWait(args.locality_wait, args.locality_tolerance, args.locality_hold_limit)
    except ValueError as e:
        return _fail(str(e))
    if not (math.isfinite(args.checkpoint_interval) and args.checkpoint_interval >= 0):
        return _fail(f"--checkpoint-interval must be finite and >= 0, got {args.checkpoint_interval}")
    names = list(policies.POLICY_NAMES) if args.compare else [args.policy]
    if args.compare:
        if args.out.exists() and not args.out.is_dir():
            return _fail(f"--out {args.out}: with --compare, --out must be a directory")
        args.out.mkdir(parents=True, exist_ok=True)
    documents: dict[str, dict[str, Any]] = {}
    runs: dict[str, results.Run] = {}
    total_gpus = 0
    for name in names:
        bar = report.ProgressBar(name) if not args.quiet else None
        policy = policies.make(name, args.seed, wait, request.FitOrder(args.fit_order))
        run = engine.simulate(scn, policy, bar, args.seed, args.checkpoint_interval)
        if bar is not None:
            bar.close()
        total_gpus = run.total_gpus
        runs[name] = run
        documents[name] = results.document(run)
        if name == "fabric":
            # The settings behind the figures; result.json keeps its three top-level keys.
            documents[name]["summary"].update(
                locality_wait_s=wait.timeout_s, locality_tolerance=wait.tolerance,
                locality_hold_limit=wait.hold_limit, fit_order=args.fit_order)
        target = args.out / f"result-{name}.json" if args.compare else args.out
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(documents[name], indent=1) + "\n", encoding="utf-8")
    if not args.quiet:
        print(report.table({n: d["summary"] for n, d in documents.items()}))
        if all("by_priority" in d["summary"] for d in documents.values()):
            print(report.priority_table({n: d["summary"]["by_priority"] for n, d in documents.items()}))
    title = f"{fabric_name(args.topology)}: {args.jobs.name}"
    if args.plot is not None:
        try:
            plots.plot(documents, total_gpus, args.plot, title=title)
        except plots.PlotUnavailable as e:
            return _fail(str(e))
    if args.report is not None:
        shown = runs.get(args.policy) or runs[names[0]]
        page = fabric_page.render(scn, shown, fabric_name(args.topology), documents, title)
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(page, encoding="utf-8")
    return 0


def fabric_name(topology_path: Path) -> str:
    """The FabricTopology's ``metadata.name`` (the plots' title), else the file's stem."""
    try:
        for doc in yaml.safe_load_all(topology_path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") == "FabricTopology":
                name = (doc.get("metadata") or {}).get("name")
                if isinstance(name, str) and name:
                    return name[:253]
    except (OSError, yaml.YAMLError):
        pass
    return topology_path.stem


def generate_trace(args: argparse.Namespace) -> int:
    try:
        mix = traces.parse_mix(args.mix)
        duration = traces.parse_duration(args.duration_dist)
        priorities = traces.parse_priorities(args.priority_mix) if args.priority_mix else ()
    except ValueError as e:
        return _fail(str(e))
    if args.jobs < 1 or args.load <= 0:
        return _fail("--jobs must be >= 1 and --load > 0")
    max_pods: dict[tuple[str | None, int], int] | None = None
    if args.nodes is not None:
        try:
            max_pods, total = cluster_limits(args.nodes, args.topology, {e.gpus_per_pod for e in mix})
        except errors.SimInputError as e:
            print(str(e), file=sys.stderr)
            return INPUT_ERROR
    else:
        total = args.gpus
    if total <= 0:
        return _fail("the cluster has no GPUs")
    options = traces.TraceOptions(args.jobs, total, args.load, args.seed, mix, duration, priorities, max_pods)
    try:
        jobs = traces.generate(options)
    except ValueError as e:
        return _fail(str(e))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(traces.to_csv(jobs), encoding="utf-8")
    return 0


def cluster_limits(
    nodes_path: Path, topology_path: Path | None, sizes: set[int]
) -> tuple[dict[tuple[str | None, int], int], int]:
    """Largest pod counts per (tier or None for the cluster, pod size), and the cluster's GPUs."""
    if topology_path is None:
        infos = [topo_nodes.NodeInfo.from_manifest(n.manifest) for n in manifests.read_nodes(nodes_path)]
        per_host = [g for g in (i.gpus("nvidia.com/gpu") for i in infos) if g > 0]
        return {(None, s): sum(g // s for g in per_host) for s in sizes}, sum(per_host)
    spec = manifests.read_topology(topology_path)
    infos = [topo_nodes.NodeInfo.from_manifest(n.manifest) for n in manifests.read_nodes(nodes_path)]
    structure = building.build_fabric(spec, infos, {}).fabric
    hosts = list(structure.hosts.values())
    limits: dict[tuple[str | None, int], int] = {(None, s): structure.empty_slots(s) for s in sizes}
    for t, tier in enumerate(structure.tiers):
        for s in sizes:
            limits[(str(tier.name), s)] = structure.largest_domain(t, s)[1]
    return limits, sum(h.gpus for h in hosts)


def generate_fabric(args: argparse.Namespace) -> int:
    if args.preset:
        layout = fabrics.PRESETS[args.preset]
    else:
        try:
            layout = fabrics.parse_layout(args.layout, args.hosts_per_leaf, args.gpus_per_host)
        except ValueError as e:
            return _fail(str(e))
    for path, doc in ((args.nodes_out, fabrics.node_list(layout)),
                      (args.topology_out, fabrics.topology(layout, args.name))):
        path.parent.mkdir(parents=True, exist_ok=True)
        # Nodes keep kubectl's sorted keys; the topology reads better in declaration order.
        path.write_text(yaml.safe_dump(doc, sort_keys=path is args.nodes_out), encoding="utf-8")
    return 0

"""``fabricsched simulate --report out.html``: the fabric page as a static report of one run.

The page shows the fabric at the run's last placement decision (the last job start): the
health at that moment (the initial conditions, labels and ``spec.links``, then the events
file up to it, with the topology's hysteresis), the jobs running then as gangs on their hosts,
and the jobs submitted but not started then as Pending. The fabric over time is out of scope;
below the picture come the summary table, the plots (when matplotlib is installed) and every
job of the run in a table.
"""

from __future__ import annotations

import base64
import collections
from collections.abc import Mapping, Sequence
from typing import Any

from fabricsched import ids
from fabricsched.dashboard import static_page, view
from fabricsched.sim import plots, report, results, scenario
from fabricsched.topology import fabric, health

COLUMNS = ("job", "submit (s)", "start (s)", "end (s)", "wait (s)", "pods", "GPUs/pod", "required tier",
           "domains spanned", "comm_slowdown", "degraded path")


def moment(run: results.Run) -> float:
    """The last job start (the run's last decision); 0 when nothing started."""
    return max((o.start_s for o in run.outcomes if o.start_s is not None), default=0.0)


def health_at(scn: scenario.Scenario, at: float) -> Mapping[health.ElementId, health.ElementHealth]:
    """The effective health at ``at``, as the simulator's tracker had it (same sources, same order)."""
    tracker = health.HealthTracker(scn.spec.health.recover_after_seconds, scn.spec.health.degraded_capacity)
    start = min([0.0, *(j.submit_s for j in scn.jobs)])
    found = [o for node in scn.nodes for o in health.observations_from_node(scn.spec, node)]
    tracker.update(start, "spec.links", health.observations_from_links(scn.spec))
    tracker.update(start, "condition", [o for o in found if o.source == "condition"])
    tracker.update(start, "label", [o for o in found if o.source == "label"])
    for event in sorted(scn.events, key=lambda e: e.time_s):
        if event.time_s > at:
            break
        element = (health.ElementId.node(str(event.node)) if event.kind == "node"
                   else health.ElementId.domain(str(event.tier), str(event.domain)))
        seen = [] if event.state is fabric.HealthState.HEALTHY else [health.Observation(
            element, event.state, event.capacity, "event", f"events file line {event.line}")]
        tracker.update(event.time_s, "event", seen, scope={element})
    tracker.tick(at)
    return tracker.effective()


def snapshot(scn: scenario.Scenario, run: results.Run, name: str,
             extra: Mapping[str, object]) -> view.PageSnapshot:
    at = moment(run)
    effective = health_at(scn, at)
    built = scn.new_index()
    built.apply_health(effective)
    fab = built.snapshot().fabric
    topology = ids.TopologyName(name)
    held: collections.Counter[ids.NodeName] = collections.Counter()
    gangs: list[view.GangFacts] = []
    pending: list[view.PendingFacts] = []
    for o in run.outcomes:
        job = o.job
        if o.start_s is not None and o.start_s <= at and (o.end_s is None or o.end_s > at):
            for node in o.placement:
                held[node] += job.gpus_per_pod
            gangs.append(view.GangFacts(
                key=ids.gang_key("sim", job.name), namespace="sim", name=job.name, topology=topology,
                phase="Running", size=job.pods, gpus_per_pod=job.gpus_per_pod,
                tier=job.required_tier or job.preferred_tier, required=job.required_tier is not None,
                hosts=o.placement, slowdown=o.comm_slowdown or 1.0,
                slowdown_at_placement=o.comm_slowdown or 1.0,
                degraded_path=o.degraded_path, priority=job.rank, traffic=o.traffic.value,
                preferred_tier=job.preferred_tier if job.required_tier is not None else None,
                slices=None if job.slices is None else view.SliceFacts(
                    job.slices.pods, job.slices.tier, job.slices.required,
                    tuple(d or "(split)" for d in o.slice_domains)),
            ))
        elif job.submit_s <= at and (o.start_s is None or o.start_s > at):
            why = "NeverStarted" if o.start_s is None else "Waiting"
            pending.append(view.PendingFacts(
                ids.gang_key("sim", job.name), "sim", job.name, topology, why,
                f"needs {job.pods} x {job.gpus_per_pod} GPUs"
                + (f" inside one {job.required_tier}" if job.required_tier else "")
                + ("" if o.start_s is None else f"; started at {o.start_s:.0f} s"), job.submit_s,
            ))
    free = {n: max(0, h.gpus - held[n]) for n, h in fab.hosts.items()}
    facts = view.FabricFacts(topology, fab, free, {}, effective)
    return view.PageSnapshot([facts], gangs, pending, extra)


def _row(o: results.Outcome) -> list[str | None]:
    def num(x: float | None, digits: int = 0) -> str | None:
        return None if x is None else f"{x:.{digits}f}"

    wait = None if o.start_s is None else o.start_s - o.job.submit_s
    spanned = ", ".join(f"{k} {v}" for k, v in o.domains_spanned.items())
    return [o.job.name, num(o.job.submit_s), num(o.start_s), num(o.end_s), num(wait), str(o.job.pods),
            str(o.job.gpus_per_pod), o.job.required_tier, spanned or None, num(o.comm_slowdown, 3),
            "yes" if o.degraded_path else "no"]


def render(
    scn: scenario.Scenario,
    run: results.Run,
    name: str,
    documents: Mapping[str, Mapping[str, Any]],
    title: str,
) -> str:
    """The report's HTML: ``run``'s fabric and jobs, the summary and plots of every run given."""
    extra: dict[str, object] = {
        "summary": f"{title}\npolicy shown: {run.policy}; the fabric at {moment(run):.0f} s, "
                   f"the last job start\n\n" + report.table({n: d["summary"] for n, d in documents.items()}),
        "columns": list(COLUMNS),
        "jobs": [_row(o) for o in run.outcomes],
        "plots": _plots(documents, run.total_gpus, title),
    }
    return static_page.render(snapshot(scn, run, name, extra))


def _plots(documents: Mapping[str, Mapping[str, Any]], total_gpus: int, title: str) -> Sequence[str]:
    try:
        data = plots.png(documents, total_gpus, title)
    except plots.PlotUnavailable:
        return []
    return ["data:image/png;base64," + base64.b64encode(data).decode()]

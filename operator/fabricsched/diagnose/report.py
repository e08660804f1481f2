"""``build(inputs) -> Report``, and the report as JSON-ready data (pure).

The one function the CLI and the fabric page call: the I/O that gathers ``model.DiagnosisInputs``
(``cluster``, ``queries``) stays outside, so the page can compute a gang's report from what it
already holds, on demand, and cache it. ``as_data`` is the ``-o json`` form::

    {"job": ..., "window": ..., "causes": [{"category", "element", "score", "since", "evidence",
     "recovered", "recoveredAt"}], "recovered": ..., ...}

with causes sorted by score. Signals without data are listed under ``notMeasured``, never
counted as healthy.
"""

from __future__ import annotations

from typing import Any

from fabricsched.diagnose import analysis, appmetric, findings, model, signals, timefmt

NO_SERIES = "no series for the job's hosts (exporter not scraped, collector off, or other label names)"


def build(inputs: model.DiagnosisInputs) -> model.Report:
    found: list[model.Symptom] = []
    not_measured: dict[str, str] = {}
    for measured in inputs.telemetry:
        signal = signals.of(measured.signal)
        if measured.error is not None:
            not_measured[signal.key] = measured.error
        elif not measured.series:
            not_measured[signal.key] = NO_SERIES + (f"; {signal.note}" if signal.note else "")
        else:
            found += findings.judge(signal, measured)
    if not inputs.telemetry:
        not_measured = {s.key: "no Prometheus to ask" for s in signals.SIGNALS}
    slowdown = appmetric.slowdown(inputs.application, inputs.application_higher_is_better)
    causes = analysis.causes(inputs, found, slowdown)
    top = causes[0] if causes else None
    recovered, recovered_at = _recovered(top, slowdown)
    return model.Report(
        job=inputs.job,
        window=inputs.window,
        causes=tuple(causes),
        comparisons=tuple(analysis.comparisons(inputs, found)),
        findings=tuple(sorted(found, key=lambda f: (f.since, f.signal, f.node, f.detail))),
        changes=inputs.changes,
        not_measured=not_measured,
        slowdown=slowdown,
        recovered=recovered,
        recovered_at=recovered_at,
        prometheus=inputs.prometheus,
        notes=(*inputs.notes, *_cut_notes(inputs.telemetry)),
    )


def _cut_notes(telemetry: tuple[model.Measured, ...]) -> tuple[str, ...]:
    """A signal whose series were cut at the query bound says so: its findings cover part of the job."""
    return tuple(f"{m.signal}: {m.cut} more series than the {m.cut + len(m.series)} found were not read"
                 for m in telemetry if m.cut)


def _recovered(top: model.Cause | None, slowdown: model.Slowdown | None) -> tuple[bool | None, float | None]:
    """Whether the leading cause (and the step time, when measured) is over; None when there is
    nothing to recover from (no signal moved and the step time did not rise)."""
    if top is None or top.category == "application":
        if slowdown is not None and slowdown.since is not None:
            return slowdown.recovered_at is not None, slowdown.recovered_at
        return None, None
    if not top.recovered:
        return False, None
    if slowdown is not None and slowdown.since is not None:
        if slowdown.recovered_at is None:
            return False, None
        return True, max(slowdown.recovered_at, top.recovered_at or slowdown.recovered_at)
    return True, top.recovered_at


def as_data(report: model.Report) -> dict[str, Any]:
    return {
        "job": _job(report.job),
        "window": {
            "from": timefmt.rfc3339(report.window.start),
            "to": timefmt.rfc3339(report.window.end),
            "stepSeconds": report.window.step_s,
        },
        "prometheus": report.prometheus,
        "causes": [
            {
                "category": c.category,
                "element": c.element,
                "score": c.score,
                "since": timefmt.rfc3339(c.since),
                "evidence": list(c.evidence),
                "recovered": c.recovered,
                "recoveredAt": timefmt.rfc3339(c.recovered_at),
            }
            for c in report.causes
        ],
        "recovered": report.recovered,
        "recoveredAt": timefmt.rfc3339(report.recovered_at),
        "slowdown": None
        if report.slowdown is None
        else {
            "ratio": report.slowdown.ratio,
            "since": timefmt.rfc3339(report.slowdown.since),
            "recoveredAt": timefmt.rfc3339(report.slowdown.recovered_at),
            "slowestNode": report.slowdown.slowest,
        },
        "compare": [
            {
                "signal": c.signal,
                "category": signals.of(c.signal).category,
                "metric": signals.of(c.signal).metric,
                "meanByNode": dict(c.values),
                "standsOut": list(c.standouts),
            }
            for c in report.comparisons
        ],
        "findings": [
            {
                "signal": f.signal,
                "node": f.node,
                "detail": f.detail,
                "share": round(f.fraction, 3),
                "since": timefmt.rfc3339(f.since),
                "until": timefmt.rfc3339(f.until),
                "recovered": f.recovered,
            }
            for f in report.findings
        ],
        "changes": [
            {"time": timefmt.rfc3339(c.time), "kind": c.kind, "what": c.what} for c in report.changes
        ],
        "notMeasured": [
            {"signal": k, "category": signals.of(k).category, "metric": signals.of(k).metric, "why": v}
            for k, v in report.not_measured.items()
        ],
        "notes": list(report.notes),
    }


def _job(job: model.DiagnosedJob) -> dict[str, Any]:
    gang = job.gang
    return {
        "namespace": job.namespace,
        "name": job.name,
        "placement": gang.placement if gang else None,
        "phase": gang.phase if gang else None,
        "topology": gang.topology if gang else None,
        "tiers": list(gang.tiers) if gang else [],
        "domains": {k: list(v) for k, v in gang.domains.items()} if gang else {},
        "ranks": [
            {"rank": r.rank, "node": r.node, "domains": dict(r.domains), "bound": r.bound} for r in gang.ranks
        ]
        if gang
        else [],
        "commSlowdownAtPlacement": gang.slowdown_at_placement if gang else None,
        "commSlowdownNow": gang.slowdown_now if gang else None,
        "unhealthyPath": [
            {"kind": e.kind, "name": e.name, "state": e.state, "since": e.since, "why": e.why}
            for e in gang.unhealthy
        ]
        if gang
        else [],
        "pods": [
            {
                "name": p.name,
                "node": p.node,
                "rank": p.rank,
                "restarts": p.restarts,
                "pendingSeconds": _pending(p),
            }
            for p in job.pods
        ],
        "gangWaitSeconds": _gang_wait(job),
        "applicationMetric": job.app_metric,
    }


def _pending(pod: model.Pod) -> float | None:
    if pod.created is None or pod.scheduled is None:
        return None
    return max(0.0, pod.scheduled - pod.created)


def _gang_wait(job: model.DiagnosedJob) -> float | None:
    if job.placement_created is None or job.bound_at is None:
        return None
    return max(0.0, job.bound_at - job.placement_created)

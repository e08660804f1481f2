"""A report as text (five sections, one per troubleshooting step) or JSON (``report.as_data``)."""

from __future__ import annotations

import json

from fabricsched.diagnose import model, report, signals, timefmt

FORMATS = ("text", "json")
MAX_FINDINGS_SHOWN = 30


def render(built: model.Report, output: str) -> str:
    if output == "json":
        return json.dumps(report.as_data(built), indent=2, sort_keys=False, allow_nan=False) + "\n"
    return "\n".join(_text(built)) + "\n"


def _text(r: model.Report) -> list[str]:
    window = (
        f"{timefmt.rfc3339(r.window.start)} to {timefmt.rfc3339(r.window.end)} (step {r.window.step_s:g} s)"
    )
    lines = [
        f"Diagnosis of {r.job.namespace}/{r.job.name}, {window}",
        f"Prometheus: {r.prometheus or 'none (telemetry not measured)'}",
        "",
    ]
    for section in (_path(r), _compare(r), _telemetry(r), _changes(r)):
        lines += [*section, ""]
    lines += _verdict(r)
    if r.notes:
        lines += ["", "Notes:", *(f"  - {n}" for n in r.notes)]
    return lines


def _path(r: model.Report) -> list[str]:
    lines = ["1. The job and its path"]
    gang = r.job.gang
    if gang is None:
        return [*lines, "  no FabricPlacement: fabricsched has not placed this job"]
    slow = (
        f"comm slowdown {gang.slowdown_at_placement if gang.slowdown_at_placement is not None else '?'}"
        f" at placement, {gang.slowdown_now if gang.slowdown_now is not None else 'not reported'} now"
    )
    lines.append(
        f"  {gang.placement}: {len(gang.ranks)} ranks, phase {gang.phase}, topology {gang.topology}, {slow}"
    )
    for tier in gang.tiers:
        lines.append(f"  {tier}: {', '.join(gang.domains.get(tier, ())) or '-'}")
    for rank in gang.ranks[:64]:
        domains = " ".join(f"{t}={d or '?'}" for t, d in rank.domains.items())
        lines.append(f"  rank {rank.rank:>3}  {rank.node}  {domains}{'' if rank.bound else '  (not bound)'}")
    if len(gang.ranks) > 64:
        lines.append(f"  ... {len(gang.ranks) - 64} more ranks (-o json lists them all)")
    for element in gang.unhealthy:
        lines.append(
            f"  unhealthy on the path: {element.why or element.name}: {element.state}"
            f"{f' since {element.since}' if element.since else ''}"
        )
    if not gang.unhealthy:
        lines.append("  no unhealthy element on the path now")
    return lines


def _compare(r: model.Report) -> list[str]:
    lines = ["2. Compare its nodes (mean over the window; * stands out)"]
    if not r.comparisons:
        return [*lines, "  nothing measured"]
    nodes = sorted({n for c in r.comparisons for n in c.values})
    for comparison in r.comparisons:
        signal = signals.of(comparison.signal)
        cells = [
            f"{n}{'*' if n in comparison.standouts else ''}={_value(comparison.values[n], signal)}"
            for n in nodes
            if n in comparison.values
        ]
        lines.append(f"  {signal.category:<8} {signal.title:<26} {'  '.join(cells)}")
    return lines


def _value(value: float, signal: signals.Signal) -> str:
    if signal.unit == "share":
        return f"{value * 100:.0f}%"
    return timefmt.number(value)


def _telemetry(r: model.Report) -> list[str]:
    lines = ["3. Interface counters and telemetry"]
    for category in model.CATEGORIES[:4]:
        keys = [s for s in signals.SIGNALS if s.category == category]
        found = [f for f in r.findings if signals.of(f.signal).category == category]
        missing = [s for s in keys if s.key in r.not_measured]
        measured = len(keys) - len(missing)
        lines.append(f"  {category}: {measured} of {len(keys)} signals measured, {len(found)} abnormal")
        for f in found[:MAX_FINDINGS_SHOWN]:
            signal = signals.of(f.signal)
            end = f", normal again after {timefmt.clock(f.until)}" if f.recovered else ""
            lines.append(
                f"    {signal.title} ({signal.metric}) on {f.node} {f.detail}: "
                f"{f.fraction * 100:.0f} % of the window from {timefmt.clock(f.since)}{end}"
            )
        for s in missing:
            lines.append(f"    not measured: {s.title} ({s.metric}): {r.not_measured[s.key]}")
    lines.append("  scheduling: " + _scheduling(r))
    slowdown = r.slowdown
    if slowdown is None:
        lines.append(
            f"  application: {'step time not measured' if r.job.app_metric is None else 'no usable series'}"
        )
    else:
        since = f" from {timefmt.clock(slowdown.since)}" if slowdown.since is not None else ""
        back = f", back to normal at {timefmt.clock(slowdown.recovered_at)}" if slowdown.recovered_at else ""
        lines.append(
            f"  application: step time {slowdown.ratio:.1f}x its start of window{since}{back}"
            f"{f'; slowest rank on {slowdown.slowest}' if slowdown.slowest else ''}"
        )
    return lines


def _scheduling(r: model.Report) -> str:
    data = report.as_data(r)["job"]
    pending = [p["pendingSeconds"] for p in data["pods"] if p["pendingSeconds"] is not None]
    restarts = sum(p.restarts for p in r.job.pods)
    wait = data["gangWaitSeconds"]
    return (
        (
            f"{len(r.job.pods)} pods, longest pending {max(pending):.0f} s"
            if pending
            else f"{len(r.job.pods)} pods"
        )
        + (f", gang wait {wait:.0f} s" if wait is not None else "")
        + f", {restarts} restarts"
    )


def _changes(r: model.Report) -> list[str]:
    lines = ["4. Recent changes"]
    if not r.changes:
        return [*lines, "  none in the window"]
    return lines + [f"  {timefmt.rfc3339(c.time)}  {c.kind:<8} {c.what}" for c in r.changes]


def _verdict(r: model.Report) -> list[str]:
    lines = ["5. Verdict"]
    for cause in r.causes:
        lines.append(
            f"  {cause.score:.2f}  {cause.category}: {cause.element}"
            f"{' (recovered)' if cause.recovered else ''}"
        )
        lines += [f"        - {e}" for e in cause.evidence]
    if r.recovered is True:
        lines.append(f"  recovered at {timefmt.rfc3339(r.recovered_at)}")
    elif r.recovered is False:
        lines.append("  not recovered by the window's end")
    return lines

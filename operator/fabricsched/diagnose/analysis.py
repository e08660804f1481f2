"""Findings -> ranked causes, each with a score and its evidence (pure).

How a score is computed (docs/diagnose.md#score):

1. every finding (one element, one signal) scores ``weight x min(1, share / FULL_SHARE)``: the
   signal's weight (how strongly it alone points at a cause: a downed link 1.0, power draw 0.4)
   times how much of the window it was abnormal, full at half the window;
2. two facts raise it, combined as independent evidence (``1 - (1 - a)(1 - b)``): the job's own
   step time rose within ``TIMING_SLACK_S`` of the finding's start (``TIMING``), and the element
   sits on the job's slowest rank (``SLOWEST``);
3. findings are grouped into causes (a category and an element: ``leaf l03 uplinks``,
   ``gpu-017 GPU 3``); a cause's score combines its findings the same way, so two signals
   agreeing on one element score higher than either; an element the operator already reports
   unhealthy on the path adds ``PATH_HEALTH``;
4. when no cause reaches ``MOVED``, "no signal moved: likely the application" leads, at
   ``APPLICATION_SLOWED`` when the job's step time rose and ``APPLICATION_FLAT`` otherwise.

Congestion signals (port transmit wait, CNPs, PFC pauses) that stand out on hosts of one leaf
only, for a job spanning several leaves, name that leaf's uplinks: traffic leaving the leaf
waits there. I/O pressure on a host whose disks or NFS mounts are busy is storage evidence,
otherwise host evidence. Storage findings on at least half the job's hosts name the shared
storage rather than each host.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fabricsched.diagnose import findings as judged
from fabricsched.diagnose import model, signals, timefmt

FULL_SHARE = 0.5
TIMING = 0.3
SLOWEST = 0.2
PATH_HEALTH = 0.4
TIMING_SLACK_S = 180.0
MOVED = 0.3
APPLICATION_SLOWED = 0.6
APPLICATION_FLAT = 0.4
CONGESTION = ("ib-transmit-wait", "roce-cnp-handled", "roce-pfc-pause")
MAX_EVIDENCE = 8
MAX_CAUSES = 20


@dataclass(frozen=True)
class _Scored:
    finding: model.Symptom
    score: float
    evidence: str


def combine(scores: Sequence[float]) -> float:
    """Independent pieces of evidence: the chance at least one of them is right."""
    rest = 1.0
    for score in scores:
        rest *= 1.0 - min(max(score, 0.0), 1.0)
    return 1.0 - rest


def causes(
    inputs: model.DiagnosisInputs, found: Sequence[model.Symptom], slowdown: model.Slowdown | None
) -> list[model.Cause]:
    leaf_of = _lowest_domains(inputs.job)
    storage_nodes = {f.node for f in found if signals.of(f.signal).category == "storage"}
    groups: dict[tuple[model.Category, str], list[_Scored]] = defaultdict(list)
    congested = _congested_leaf(found, leaf_of)
    hosts = sorted({r.node for r in inputs.job.gang.ranks} if inputs.job.gang else set())
    storage_shared = len(storage_nodes) * 2 >= max(len(hosts), 1) and len(storage_nodes) > 1
    for finding in found:
        signal = signals.of(finding.signal)
        category, element = _element(
            finding, signal, congested, leaf_of, storage_nodes, storage_shared, len(hosts)
        )
        groups[(category, element)].append(_score(finding, signal, slowdown, inputs.window))
    out = [_cause(category, element, scored, inputs.window) for (category, element), scored in groups.items()]
    out = _with_path_health(out, inputs.job)
    out += _scheduling(inputs)
    top = max((c.score for c in out), default=0.0)
    out.append(_application(top, slowdown, inputs))
    out.sort(key=lambda c: (-c.score, c.category, c.element))
    return out[:MAX_CAUSES]


def _score(
    finding: model.Symptom, signal: signals.Signal, slowdown: model.Slowdown | None, window: model.Window
) -> _Scored:
    base = signal.weight * min(1.0, finding.fraction / FULL_SHARE)
    extra = []
    text = _evidence(finding, signal)
    slack = max(TIMING_SLACK_S, 2 * window.step_s)
    if slowdown is not None and slowdown.since is not None and abs(slowdown.since - finding.since) <= slack:
        extra.append(TIMING)
        text += f"; the job's step time rose {slowdown.ratio:.1f}x at {timefmt.clock(slowdown.since)}"
    if slowdown is not None and slowdown.slowest == finding.node:
        extra.append(SLOWEST)
        text += ", the slowest rank"
    return _Scored(finding, combine([base, *extra]), text)


def _evidence(finding: model.Symptom, signal: signals.Signal) -> str:
    where = f"{finding.node} {finding.detail}".strip()
    share = f"{finding.fraction * 100:.0f} % of the window"
    span = f"since {timefmt.clock(finding.since)}"
    if finding.recovered:
        span = f"{timefmt.clock(finding.since)}-{timefmt.clock(finding.until)}, then normal"
    value = ""
    if signal.judge.startswith("peer") and math.isfinite(finding.typical) and finding.typical > 0:
        value = f", {finding.peak / finding.typical:.1f}x the job's others"
    elif signal.judge in ("above", "below") and math.isfinite(finding.peak):
        value = f", up to {timefmt.number(finding.peak)}{signal.unit if signal.unit != 'share' else ''}"
        if signal.unit == "share":
            value = f", up to {finding.peak * 100:.0f} % of the time"
    return f"{signal.title} on {where}: {share} ({span}{value})"


def _element(
    finding: model.Symptom,
    signal: signals.Signal,
    congested: str | None,
    leaf_of: Mapping[str, str],
    storage_nodes: set[str],
    storage_shared: bool,
    hosts: int,
) -> tuple[model.Category, str]:
    if signal.category == "fabric":
        if signal.key in CONGESTION and congested is not None and leaf_of.get(finding.node) == congested:
            return "fabric", f"leaf {congested} uplinks"
        return "fabric", f"{finding.node} {finding.detail} link".replace("  ", " ")
    if signal.category == "gpu":
        return "gpu", f"{finding.node} {finding.detail}".strip()
    if signal.key == "host-io-pressure" and finding.node in storage_nodes:
        return "storage", _storage_element(finding, storage_shared, len(storage_nodes), hosts)
    if signal.category == "storage":
        return "storage", _storage_element(finding, storage_shared, len(storage_nodes), hosts)
    return signal.category, finding.node


def _storage_element(finding: model.Symptom, shared: bool, busy: int, hosts: int) -> str:
    if shared:
        return f"storage of {busy} of the job's {hosts} hosts"
    return f"{finding.node} storage"


def _congested_leaf(found: Sequence[model.Symptom], leaf_of: Mapping[str, str]) -> str | None:
    """The one leaf all congestion findings sit under, when the job spans several leaves."""
    leaves = {leaf_of.get(f.node) for f in found if f.signal in CONGESTION}
    spanned = set(leaf_of.values())
    if len(leaves) == 1 and len(spanned) > 1:
        (leaf,) = leaves
        return leaf
    return None


def _lowest_domains(job: model.DiagnosedJob) -> dict[str, str]:
    """Each rank's node -> its domain at the lowest tier (the leaf)."""
    gang = job.gang
    if gang is None or not gang.tiers:
        return {}
    tier = gang.tiers[0]
    return {r.node: d for r in gang.ranks if (d := r.domains.get(tier)) is not None}


def _cause(
    category: model.Category, element: str, scored: Sequence[_Scored], window: model.Window
) -> model.Cause:
    ordered = sorted(scored, key=lambda s: -s.score)
    recovered = all(s.finding.recovered for s in scored)
    return model.Cause(
        category=category,
        element=element,
        score=round(combine([s.score for s in scored]), 2),
        since=min(s.finding.since for s in scored),
        evidence=tuple(s.evidence for s in ordered[:MAX_EVIDENCE]),
        recovered=recovered,
        recovered_at=max(s.finding.until for s in scored) + window.step_s if recovered else None,
    )


def _with_path_health(found: list[model.Cause], job: model.DiagnosedJob) -> list[model.Cause]:
    """The operator's own verdict on the path (FabricPlacement / topology status) as evidence."""
    if job.gang is None:
        return found
    by_element = {c.element: c for c in found}
    for element in job.gang.unhealthy:
        name = (
            f"leaf {element.name.split('/', 1)[1]} uplinks"
            if element.kind == "domain"
            else f"{element.name} link"
        )
        reasons = "; ".join(f"{s.source}: {s.reason}".strip(": ") for s in element.sources[:3])
        text = f"the operator reports {element.why or name} {element.state}" + (
            f" ({reasons})" if reasons else ""
        )
        if element.since:
            text += f" since {element.since}"
        known = next(
            (c for k, c in by_element.items() if k == name or k.startswith(f"{element.name} ")), None
        )
        if known is not None:
            merged = model.Cause(
                known.category,
                known.element,
                round(combine([known.score, PATH_HEALTH]), 2),
                known.since,
                (*known.evidence, text),
                known.recovered,
                known.recovered_at,
            )
            by_element[known.element] = merged
        else:
            by_element[name] = model.Cause(
                "fabric", name, PATH_HEALTH, timefmt.parse(element.since), (text,), None, None
            )
    return list(by_element.values())


def _scheduling(inputs: model.DiagnosisInputs) -> list[model.Cause]:
    window = inputs.window
    restarted = [
        p
        for p in inputs.job.pods
        if p.restarts and p.last_restart is not None and window.start <= p.last_restart <= window.end
    ]
    if not restarted:
        return []
    names = ", ".join(f"{p.name} ({p.restarts}x)" for p in restarted[:5])
    first = min(p.last_restart or window.end for p in restarted)
    return [
        model.Cause(
            "scheduling",
            "pod restarts",
            round(min(0.9, 0.4 + 0.1 * len(restarted)), 2),
            first,
            (
                f"{len(restarted)} pods restarted in the window: {names}; a restart reloads "
                "the checkpoint and waits for every rank",
            ),
        )
    ]


def _application(top: float, slowdown: model.Slowdown | None, inputs: model.DiagnosisInputs) -> model.Cause:
    slowed = slowdown is not None and slowdown.ratio >= 1.2
    base = APPLICATION_SLOWED if slowed else APPLICATION_FLAT
    score = base if top < MOVED else base * (1.0 - top)
    text = "no signal moved: likely the application" if top < MOVED else "other causes scored higher"
    evidence = [text]
    if slowed and slowdown is not None and slowdown.since is not None:
        evidence.append(f"the job's step time rose {slowdown.ratio:.1f}x at {timefmt.clock(slowdown.since)}")
    elif inputs.application is None or not inputs.application.measured:
        evidence.append(
            f"the job's step time ({inputs.job.app_metric}) was not measured"
            if inputs.job.app_metric
            else "the job's step time was not measured (annotation fabricsched.io/step-time-metric)"
        )
    unmeasured = sorted(
        {signals.of(m.signal).category for m in inputs.telemetry if not m.measured}
        - {signals.of(m.signal).category for m in inputs.telemetry if m.measured}
    )
    if not inputs.telemetry:
        evidence.append("telemetry was not measured: no Prometheus")
    elif unmeasured:
        evidence.append(f"not measured at all: {', '.join(unmeasured)}")
    return model.Cause(
        "application",
        "the job's own code or data",
        round(score, 2),
        slowdown.since if slowed and slowdown else None,
        tuple(evidence),
    )


def comparisons(inputs: model.DiagnosisInputs, found: Sequence[model.Symptom]) -> list[model.Comparison]:
    out = []
    for measured in inputs.telemetry:
        if not measured.measured:
            continue
        per_node: dict[str, float] = {}
        for series in measured.series:
            value = judged.mean(series.points)
            if math.isfinite(value):
                signal = signals.of(measured.signal)
                keep = min if signal.judge in ("below", "peer-below") else max
                per_node[series.node] = keep(per_node.get(series.node, value), value)
        standouts = tuple(sorted({f.node for f in found if f.signal == measured.signal}))
        out.append(model.Comparison(measured.signal, per_node, standouts))
    return out

"""The job's objects, read through ``explain`` (its NAME resolution, its bounded reads), plus the
pods: GET and LIST only.

``read`` returns the job's facts, the recent changes and the annotations that may name its step
time metric. Only what ``explain.reader.fetch`` itself refuses fails the command (not found, no
API server); a pod list that is refused becomes a note.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricsched.diagnose import changes, model, timefmt
from fabricsched.explain import access, bounds, reader, workloads
from fabricsched.explain import report as explain_report

MAX_PODS = 1000
RANK_LABEL = "batch.kubernetes.io/job-completion-index"
RANK_ANNOTATION = "fabricsched.io/rank"


@dataclass(frozen=True)
class Read:
    job: model.DiagnosedJob
    changes: tuple[model.Change, ...]
    annotations: Mapping[str, object]
    """Where the step-time annotation may be: the workload's, else its first pod's."""
    topology_prometheus: Mapping[str, Any] | None
    """The FabricTopology's ``spec.health.prometheus`` (as the API server gave it), if any."""
    notes: tuple[str, ...]


def read(api: access.Api, namespace: str, name: str, window: model.Window) -> Read:
    objects = reader.fetch(api, namespace, name)
    explanation = explain_report.build(objects)
    notes = list(explanation.notes)
    gang = explanation.gangs[0] if explanation.gangs else None
    if len(explanation.gangs) > 1:
        notes.append(
            f"{len(explanation.gangs)} gangs belong to this workload; diagnosing the first, "
            f"{gang.placement if gang else ''}"
        )
    raw_pods = _pods(api, namespace, objects.workload, notes)
    pods = tuple(_pod(p, gang) for p in raw_pods)
    placement = objects.placements[0] if objects.placements else {}
    workload_annotations = bounds.mapping(bounds.mapping(objects.workload, "metadata"), "annotations")
    pod_annotations = bounds.mapping(
        bounds.mapping(raw_pods[0] if raw_pods else {}, "metadata"), "annotations"
    )
    topology = objects.topologies.get(gang.topology) if gang else None
    prometheus = bounds.mapping(bounds.mapping(bounds.mapping(topology, "spec"), "health"), "prometheus")
    job = model.DiagnosedJob(
        namespace=explanation.namespace,
        name=explanation.name,
        gang=gang,
        pods=pods,
        placement_created=timefmt.parse(
            bounds.text(bounds.mapping(placement, "metadata"), "creationTimestamp", 64)
        ),
        bound_at=_bound_at(placement),
    )
    return Read(
        job=job,
        changes=changes.collect(window, objects.topologies, objects.nodes, objects.events, pods),
        annotations=dict(workload_annotations) or dict(pod_annotations),
        topology_prometheus=prometheus or None,
        notes=tuple(notes),
    )


def _pods(
    api: access.Api, namespace: str, workload: Mapping[str, Any] | None, notes: list[str]
) -> list[Mapping[str, Any]]:
    kind = workloads.kind_named(bounds.text(workload, "kind", 63)) if workload else None
    if workload is None or kind is None:
        notes.append("the job's workload is unknown: its pods (restarts, pending time) are not read")
        return []
    metadata = bounds.mapping(workload, "metadata")
    selector = kind.pod_selector(bounds.text(metadata, "name"), bounds.text(metadata, "uid", 64))
    try:
        listed = api.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector, limit=MAX_PODS) or {}
    except access.Refused as e:
        notes.append(f"Pods: {bounds.clean(e)}")
        return []
    return [p for p in bounds.items(listed, "items", MAX_PODS) if isinstance(p, Mapping)]


def _pod(pod: Mapping[str, Any], gang: explain_report.Gang | None) -> model.Pod:
    metadata, spec, status = (bounds.mapping(pod, k) for k in ("metadata", "spec", "status"))
    node = bounds.text(spec, "nodeName", 253) or None
    rank_text = bounds.text(bounds.mapping(metadata, "labels"), RANK_LABEL, 10) or bounds.text(
        bounds.mapping(metadata, "annotations"), RANK_ANNOTATION, 10
    )
    rank = int(rank_text) if rank_text.isascii() and rank_text.isdigit() else None
    if rank is None and gang is not None and node is not None:
        rank = next((r.rank for r in gang.ranks if r.node == node), None)
    statuses = bounds.items(status, "containerStatuses", 64)
    restarts = sum(max(0, bounds.integer(c, "restartCount") or 0) for c in statuses)
    ended = [
        timefmt.parse(
            bounds.text(bounds.mapping(bounds.mapping(c, "lastState"), "terminated"), "finishedAt", 64)
        )
        for c in statuses
    ]
    return model.Pod(
        name=bounds.text(metadata, "name", 253),
        node=node,
        rank=rank,
        restarts=restarts,
        created=timefmt.parse(bounds.text(metadata, "creationTimestamp", 64)),
        scheduled=_condition_time(bounds.items(status, "conditions", 16), "PodScheduled"),
        last_restart=max((t for t in ended if t is not None), default=None),
    )


def _bound_at(placement: Mapping[str, Any]) -> float | None:
    return _condition_time(bounds.items(bounds.mapping(placement, "status"), "conditions", 16), "Bound")


def _condition_time(conditions: Sequence[object], kind: str) -> float | None:
    for condition in conditions:
        if bounds.text(condition, "type", 63) == kind and bounds.text(condition, "status", 16) == "True":
            return timefmt.parse(bounds.text(condition, "lastTransitionTime", 64))
    return None

"""What the demo prints: where each job's pods landed and why, and which fabric elements are degraded.

Pure: the objects as the API server returns them (plain dicts) in, text out, so a unit test
checks the report without a cluster. Read leniently (``.get``): the report must not break
when a newer operator adds a status field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricsched import parsing

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
RANK_KEY = "batch.kubernetes.io/job-completion-index"
"""Label (and annotation) the Job controller gives each pod of an Indexed Job: its rank."""

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Landing:
    """One rank of one job: where its pod is, and what the fabric looks like there."""

    job: str
    rank: int
    pod: str
    """The pod's name, or ``-`` when the Job has not created it (yet)."""
    node: str
    """The node the pod is bound to; the planned node with ``(planned)`` while it is unbound."""
    domains: tuple[str, ...]
    """The node's domain at every tier, lowest first (leaf, spine, ...)."""
    health: str
    """The host's fabric link: ``healthy``, or the state with its evidence."""


def tiers(topology: Obj) -> list[tuple[str, str]]:
    """(tier name, node label) of every tier, lowest first."""
    return [(t.get("name", "?"), t.get("nodeLabel", "")) for t in topology.get("spec", {}).get("tiers", [])]


def _evidence(record: Obj) -> str:
    reasons = [s.get("reason") or s.get("source", "") for s in record.get("sources", [])]
    detail = "; ".join(r for r in reasons if r)
    return f"{record.get('state', 'degraded')} ({detail})" if detail else str(record.get("state", "degraded"))


def host_health(topology: Obj) -> dict[str, str]:
    """Node name -> state and evidence, for every node the topology's status lists as not healthy."""
    return {
        str(r["node"]): _evidence(r)
        for r in topology.get("status", {}).get("degraded", [])
        if r.get("kind") == "node" and r.get("node")
    }


def degraded_elements(topology: Obj) -> list[str]:
    """One line per element that is not healthy: what it is, its capacity, and the evidence."""
    lines = []
    for record in topology.get("status", {}).get("degraded", []):
        if record.get("kind") == "node":
            what = f"host {record.get('node')}: fabric link"
        else:
            rail = f" rail {record['rail']}" if record.get("rail") is not None else ""
            what = f"{record.get('tier')} {record.get('domain')}{rail}: uplinks"
        capacity = record.get("capacity")
        at = f" at {capacity:.0%} capacity" if isinstance(capacity, int | float) else ""
        lines.append(f"{what} {_evidence(record)}{at}")
    return lines


def _rank(pod: Obj) -> int | None:
    metadata = pod.get("metadata", {})
    value = metadata.get("labels", {}).get(RANK_KEY, metadata.get("annotations", {}).get(RANK_KEY))
    try:
        return parsing.count(value, RANK_KEY, maximum=1_000_000) if value is not None else None
    except parsing.Invalid:
        return None  # a hostile or malformed rank: the tour shows no rank, it does not crash


def landings(placements: Iterable[Obj], pods: Iterable[Obj], nodes: Iterable[Obj],
             topology: Obj) -> list[Landing]:
    """Every rank of every placement, in placement then rank order."""
    by_rank: dict[tuple[str, int], Obj] = {}
    for pod in pods:
        metadata = pod.get("metadata", {})
        job, rank = metadata.get("labels", {}).get(JOB_NAME_LABEL), _rank(pod)
        if job is not None and rank is not None and not metadata.get("deletionTimestamp"):
            by_rank[(job, rank)] = pod
    labels = {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in nodes}
    health = host_health(topology)
    rows = []
    for placement in placements:
        spec = placement.get("spec", {})
        gang = str(spec.get("gang", placement.get("metadata", {}).get("name", "?")))
        for assignment in sorted(spec.get("ranks", []), key=lambda a: int(a.get("rank", 0))):
            rank, planned = int(assignment.get("rank", 0)), str(assignment.get("node", "?"))
            pod = by_rank.get((gang, rank), {})
            bound = pod.get("spec", {}).get("nodeName")
            node = str(bound) if bound else f"{planned} (planned)"
            host = str(bound or planned)
            rows.append(Landing(
                job=gang, rank=rank, pod=str(pod.get("metadata", {}).get("name", "-")), node=node,
                domains=tuple(str(labels.get(host, {}).get(label, "?")) for _, label in tiers(topology)),
                health=health.get(host, "healthy"),
            ))
    return rows


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart, as kubectl prints them."""
    lines = [list(headers), *[list(r) for r in rows]]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
                     for line in lines)


def _tier(tier: Obj) -> str:
    """``tier leaf (preferred)``, ``tier spine (required), leaf (preferred)``: the constraint as
    written (``required``/``preferred``), or as objects written before held it (``name`` +
    ``policy``)."""
    said = [f"{tier[key]} ({key})" for key in ("required", "preferred") if tier.get(key)]
    if not said and tier.get("name"):
        said = [f"{tier['name']} ({tier.get('policy', '?')})"]
    return "tier " + (", ".join(said) or "as low as possible")


def why(placement: Obj) -> list[str]:
    """The plan's headline (size, tier, slowdown, degraded path) and its reasons, one per line."""
    spec, status = placement.get("spec", {}), placement.get("status") or {}
    slowdown, size = status.get("commSlowdown"), spec.get("size", "?")
    figures = [
        f"{size} pod{'' if size == 1 else 's'} x {spec.get('gpusPerPod', '?')} GPUs",
        _tier(spec.get("tier") or {}),
        f"phase {status.get('phase', '-')}",
        f"commSlowdown {slowdown:.2f}" if isinstance(slowdown, int | float) else "commSlowdown -",
        f"degradedPath {str(bool(status.get('degradedPath', False))).lower()}",
    ]
    name = placement.get("metadata", {}).get("name", spec.get("gang", "?"))
    namespace = placement.get("metadata", {}).get("namespace", "")
    lines = [f"{namespace}/{name}: " + ", ".join(figures)]
    lines.extend(f"  - {reason}" for reason in status.get("reasons", []))
    return lines


def render(placements: Sequence[Obj], pods: Sequence[Obj], nodes: Sequence[Obj], topology: Obj) -> str:
    """The whole report: the landing table, then why, then the degraded elements."""
    tier_names = [name.upper() for name, _ in tiers(topology)]
    rows = [(r.job, str(r.rank), r.pod, r.node, *r.domains, r.health)
            for r in landings(placements, pods, nodes, topology)]
    parts = [
        "Where the pods landed:",
        table(["JOB", "RANK", "POD", "NODE", *tier_names, "HOST LINK"], rows),
        "",
        "Why (FabricPlacement status):",
        *[line for placement in placements for line in why(placement)],
        "",
        f"Degraded elements of FabricTopology {topology.get('metadata', {}).get('name', '?')}:",
        *[f"  - {line}" for line in degraded_elements(topology) or ["none"]],
    ]
    return "\n".join(parts)


def gang_table(header: str, placement: Obj, pods: Iterable[Obj], nodes: Iterable[Obj], topology: Obj) -> str:
    """One gang's ranks as its FabricPlacement numbers them: the pod of ``pods`` (the gang's
    own) bound on each rank's node, the node's domain at every tier and its host link."""
    spec = placement.get("spec", {})
    gang = str(spec.get("gang", "?"))
    on_node = {
        str(p.get("spec", {}).get("nodeName")): str(p.get("metadata", {}).get("name", "-"))
        for p in pods
        if p.get("spec", {}).get("nodeName") and not p.get("metadata", {}).get("deletionTimestamp")
    }
    labels = {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in nodes}
    health = host_health(topology)
    rows = []
    for assignment in sorted(spec.get("ranks", []), key=lambda a: int(a.get("rank", 0))):
        node = str(assignment.get("node", "?"))
        rows.append((gang, str(assignment.get("rank", "?")), on_node.get(node, "-"), node,
                     *(str(labels.get(node, {}).get(label, "?")) for _, label in tiers(topology)),
                     health.get(node, "healthy")))
    tier_names = [name.upper() for name, _ in tiers(topology)]
    return table([header, "RANK", "POD", "NODE", *tier_names, "HOST LINK"], rows)


def pod_group_section(placement: Obj, pods: Iterable[Obj], nodes: Iterable[Obj], topology: Obj) -> str:
    """A native PodGroup gang (no Job, no completion index): its ranks as the plan numbers
    them, the pod bound on each rank's node, and why."""
    group = str(placement.get("spec", {}).get("gang", "?"))
    members = [p for p in pods
               if (p.get("spec", {}).get("schedulingGroup") or {}).get("podGroupName") == group]
    return "\n".join([
        f"A native PodGroup gang (scheduling.k8s.io/v1beta1 PodGroup {group}, no Job):",
        gang_table("PODGROUP", placement, members, nodes, topology),
        *why(placement),
    ])

"""Fetch what one explanation needs: GET and LIST only, bounded counts.

Order: the FabricPlacement named NAME; else the workload named NAME (``workloads.KINDS``) and
the FabricPlacements that belong to it (or whose ``spec.gang`` is NAME); then their
FabricTopologies, the ranks' Nodes and the recent Events of the placements, the workload and
its pods. Only a refusal of the first reads fails the command: a refusal of the cluster-scoped
or secondary reads becomes a note in the report, and the rest is still shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fabricsched.explain import access, report, workloads
from fabricsched.ports import errors

GROUP_PATH = "/apis/fabricsched.io/v1alpha1"
MAX_PLACEMENTS = 500
NODE_GETS = 32
"""Up to this many distinct hosts are read one by one; more, with one LIST of the Nodes."""
POD_EVENT_QUERIES = 16
EVENT_LIMIT = 200


def fetch(api: access.Api, namespace: str, name: str) -> report.Objects:
    notes: list[str] = []
    placements_path = f"{GROUP_PATH}/namespaces/{namespace}/fabricplacements"
    placement = api.get(f"{placements_path}/{name.lower()}")
    workload: dict[str, Any] | None = None
    kind: workloads.WorkloadKind | None = None
    if placement is not None:
        placements = [placement]
        owner = workloads.owner_of(placement)
        if owner is not None:
            kind = owner[0]
            workload = _optional(api, kind.path(namespace, owner[1]), notes)
    else:
        workload, kind = _workload(api, namespace, name)
        listed = api.get(placements_path, limit=MAX_PLACEMENTS) or {}
        uid = str((workload or {}).get("metadata", {}).get("uid") or "")
        placements = [
            p
            for p in listed.get("items") or []
            if isinstance(p, dict)
            and (
                workloads.belongs_to(p, kind.kind, name, uid)
                if kind
                else p.get("spec", {}).get("gang") == name
            )
        ]
        if workload is None and not placements:
            known = ", ".join(k.kind for k in workloads.KINDS)
            raise errors.NotFound(
                f"no FabricPlacement or workload ({known}) named {name} in namespace {namespace}", 404
            )
    topologies = {
        str(t): _optional(api, f"{GROUP_PATH}/fabrictopologies/{t}", notes, f"FabricTopology {t}")
        for t in {p.get("spec", {}).get("topology") for p in placements}
        if isinstance(t, str) and t
    }
    hosts = sorted(
        {
            r["node"]
            for p in placements
            for r in p.get("spec", {}).get("ranks") or []
            if isinstance(r, Mapping) and isinstance(r.get("node"), str)
        }
    )
    return report.Objects(
        namespace=namespace,
        name=name,
        workload=workload,
        placements=placements,
        topologies=topologies,
        nodes=_nodes(api, hosts, notes),
        events=_events(api, namespace, placements, workload, kind, notes),
        notes=notes,
    )


def _workload(
    api: access.Api, namespace: str, name: str
) -> tuple[dict[str, Any] | None, workloads.WorkloadKind | None]:
    refused: list[str] = []
    for kind in workloads.KINDS:
        try:
            found = api.get(kind.path(namespace, name))
        except access.Refused:
            refused.append(kind.plural)
            continue
        if found is not None:
            found.setdefault("kind", kind.kind)
            found.setdefault("apiVersion", kind.api_version)
            return found, kind
    if refused:
        raise access.Refused(f"cannot read {', '.join(refused)} in namespace {namespace}: forbidden")
    return None, None


def _optional(
    api: access.Api, path: str, notes: list[str], what: str | None = None
) -> dict[str, Any] | None:
    try:
        found = api.get(path)
    except access.Refused as e:
        notes.append(f"{what or path}: {e}")
        return None
    if found is None and what:
        notes.append(f"{what} not found")
    return found


def _nodes(api: access.Api, hosts: list[str], notes: list[str]) -> dict[str, dict[str, Any]]:
    if not hosts:
        return {}
    try:
        if len(hosts) <= NODE_GETS:
            found = {h: api.get(f"/api/v1/nodes/{h}") for h in hosts}
            return {h: n for h, n in found.items() if n is not None}
        listed = api.get("/api/v1/nodes") or {}
    except access.Refused as e:
        notes.append(f"Nodes: {e}; the ranks' domains are unknown")
        return {}
    wanted = set(hosts)
    return {
        n["metadata"]["name"]: n
        for n in listed.get("items") or []
        if isinstance(n, dict) and n.get("metadata", {}).get("name") in wanted
    }


def _events(
    api: access.Api,
    namespace: str,
    placements: list[dict[str, Any]],
    workload: dict[str, Any] | None,
    kind: workloads.WorkloadKind | None,
    notes: list[str],
) -> list[dict[str, Any]]:
    uids = [
        str(o.get("metadata", {}).get("uid") or "")
        for o in [*placements, *([workload] if workload else [])]
    ]
    try:
        if workload is not None and kind is not None:
            meta = workload.get("metadata", {})
            selector = kind.pod_selector(str(meta.get("name")), str(meta.get("uid")))
            pods = (
                api.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector, limit=1000) or {}
            )
            pod_uids = sorted(str(p.get("metadata", {}).get("uid")) for p in pods.get("items") or [])
            if len(pod_uids) > POD_EVENT_QUERIES:
                notes.append(f"Events of the first {POD_EVENT_QUERIES} of {len(pod_uids)} pods only")
            uids += pod_uids[:POD_EVENT_QUERIES]
        found: list[dict[str, Any]] = []
        for uid in [u for u in uids if u]:
            listed = (
                api.get(
                    f"/api/v1/namespaces/{namespace}/events",
                    fieldSelector=f"involvedObject.uid={uid}",
                    limit=EVENT_LIMIT,
                )
                or {}
            )
            found += [e for e in listed.get("items") or [] if isinstance(e, dict)]
    except access.Refused as e:
        notes.append(f"Events: {e}")
        return []
    return found

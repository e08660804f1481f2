"""Small builders of the object dicts ``explain`` reads (as the API server returns them)."""

from __future__ import annotations

from typing import Any

LEAF, SPINE = "fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1"


def node(name: str, leaf: str, spine: str) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name, "labels": {LEAF: leaf, SPINE: spine}}}


def topology(degraded: list[dict[str, Any]] | None = None, name: str = "ib") -> dict[str, Any]:
    return {
        "kind": "FabricTopology",
        "metadata": {"name": name},
        "spec": {"tiers": [{"name": "leaf", "nodeLabel": LEAF}, {"name": "spine", "nodeLabel": SPINE}]},
        "status": {"degraded": degraded or []},
    }


def degraded_host(node_name: str, reason: str = "symbol errors") -> dict[str, Any]:
    return {
        "kind": "node",
        "node": node_name,
        "state": "degraded",
        "capacity": 0.5,
        "since": "2026-12-01T10:00:00Z",
        "sources": [{"source": "label", "reason": reason}],
    }


def degraded_leaf(leaf: str) -> dict[str, Any]:
    return {
        "kind": "domain",
        "tier": "leaf",
        "domain": leaf,
        "state": "degraded",
        "capacity": 0.25,
        "since": "2026-12-01T09:00:00Z",
        "sources": [{"source": "spec.links", "reason": "flapping"}],
    }


def placement(
    name: str,
    hosts: list[str],
    status: dict[str, Any] | None = None,
    uid: str = "fp-uid",
    job_uid: str = "job-uid",
) -> dict[str, Any]:
    return {
        "kind": "FabricPlacement",
        "metadata": {
            "name": name,
            "namespace": "train",
            "uid": uid,
            "ownerReferences": [{"kind": "Job", "apiVersion": "batch/v1", "name": name, "uid": job_uid}],
        },
        "spec": {
            "gang": name,
            "jobUID": job_uid,
            "size": len(hosts),
            "gpusPerPod": 8,
            "tier": {"name": "leaf", "policy": "preferred"},
            "topology": "ib",
            "domains": {"leaf": ["l1"], "spine": ["s1"]},
            "ranks": [{"rank": i, "node": h} for i, h in enumerate(hosts)],
        },
        "status": status
        if status is not None
        else {
            "phase": "Bound",
            "boundRanks": list(range(len(hosts))),
            "commSlowdown": 1.25,
            "degradedPath": False,
            "reasons": ["fits 2 leaves under spine s1"],
        },
    }


def event(
    reason: str,
    when: str,
    message: str = "",
    kind: str = "FabricPlacement",
    name: str = "a",
    uid: str | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid or f"{reason}-{when}"},
        "type": "Normal",
        "reason": reason,
        "message": message,
        "lastTimestamp": when,
        "involvedObject": {"kind": kind, "name": name},
    }

"""Nodes and pods as the fabric sees them, read from raw manifests.

The operator gets dicts from kopf, the simulator reads ``kubectl get -o yaml`` output: both
convert here, once, into small frozen records, so nothing downstream touches manifest shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fabricsched import ids
from fabricsched.topology import quantities

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class NodeCondition:
    status: str
    """"True", "False" or "Unknown", as the API spells it."""
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class NodeInfo:
    name: ids.NodeName
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    """Raw quantities from ``status.allocatable``; parsed on demand by ``gpus``."""
    conditions: Mapping[str, NodeCondition] = field(default_factory=dict)
    """By condition type."""
    unschedulable: bool = False

    @classmethod
    def from_manifest(cls, body: Mapping[str, Any]) -> NodeInfo:
        metadata = body.get("metadata") or {}
        spec = body.get("spec") or {}
        status = body.get("status") or {}
        conditions = {
            str(c["type"]): NodeCondition(
                status=str(c.get("status", "Unknown")),
                reason=str(c.get("reason") or ""),
                message=str(c.get("message") or ""),
            )
            for c in status.get("conditions") or ()
            if c.get("type")
        }
        return cls(
            name=ids.NodeName(str(metadata["name"])),
            labels={str(k): str(v) for k, v in (metadata.get("labels") or {}).items()},
            allocatable={str(k): str(v) for k, v in (status.get("allocatable") or {}).items()},
            conditions=conditions,
            unschedulable=bool(spec.get("unschedulable", False)),
        )

    def gpus(self, resource: str) -> int:
        """Allocatable units of ``resource``; 0 when absent or unparsable (such a node holds no GPUs)."""
        raw = self.allocatable.get(resource)
        if raw is None:
            return 0
        try:
            return max(0, quantities.to_int(raw))
        except ValueError:
            return 0


Owner = tuple[str, str, str]
"""(kind, name, uid) of a pod's controlling owner, e.g. ("Job", "train-b", "1f0c...")."""


@dataclass(frozen=True)
class PodUsage:
    namespace: str
    name: str
    uid: str
    node: ids.NodeName | None
    """``spec.nodeName``: None while the pod is not bound."""
    phase: str
    requests: Mapping[str, int] = field(default_factory=dict)
    """Effective requests of extended resources (names with a ``/``, e.g. ``nvidia.com/gpu``),
    computed as the kube-scheduler does: the larger of the init-container peak and the sum of
    the app containers plus restartable (sidecar) init containers."""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    scheduler_name: str = "default-scheduler"
    owner: Owner | None = None
    terminating: bool = False
    """``metadata.deletionTimestamp`` is set."""
    containers_done: bool = False
    """Every container has terminated: a terminating pod in this state holds nothing any more."""

    @classmethod
    def from_manifest(cls, body: Mapping[str, Any]) -> PodUsage:
        metadata = body.get("metadata") or {}
        spec = body.get("spec") or {}
        status = body.get("status") or {}
        node = spec.get("nodeName")
        statuses = list(status.get("containerStatuses") or ())
        return cls(
            namespace=str(metadata.get("namespace") or "default"),
            name=str(metadata["name"]),
            uid=str(metadata.get("uid") or ""),
            node=ids.NodeName(str(node)) if node else None,
            phase=str(status.get("phase") or "Pending"),
            requests=effective_requests(spec),
            labels={str(k): str(v) for k, v in (metadata.get("labels") or {}).items()},
            annotations={str(k): str(v) for k, v in (metadata.get("annotations") or {}).items()},
            scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
            owner=_controller(metadata.get("ownerReferences") or ()),
            terminating=bool(metadata.get("deletionTimestamp")),
            containers_done=bool(statuses) and all(
                "terminated" in (s.get("state") or {}) for s in statuses
            ),
        )

    @property
    def active(self) -> bool:
        """Holds its requests on a node: bound, not finished, not a terminated pod awaiting removal."""
        if self.node is None or self.phase in FINISHED_PHASES:
            return False
        return not (self.terminating and self.containers_done)

    def gpus(self, resource: str) -> int:
        return self.requests.get(resource, 0)


def effective_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Extended-resource requests of a pod spec, as the kube-scheduler accounts them.

    Init containers run one at a time, app containers together; restartable init containers
    (sidecars, ``restartPolicy: Always``) keep running, so they add to everything after them.
    """
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or ():
        own = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(sidecars, own)
            _max(init_peak, sidecars)
        else:
            _max(init_peak, _sum(sidecars, own))
    apps: dict[str, int] = dict(sidecars)
    for container in spec.get("containers") or ():
        _add(apps, _container_requests(container))
    _max(apps, init_peak)
    return {k: v for k, v in apps.items() if v}


def _container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    # An extended resource given only as a limit is requested at that limit (API defaulting).
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    out: dict[str, int] = {}
    for name, raw in merged.items():
        if "/" in str(name):
            try:
                out[str(name)] = quantities.to_int(raw)
            except ValueError:
                continue
    return out


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def _sum(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    _add(out, b)
    return out


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        into[k] = max(into.get(k, 0), v)


def _controller(refs: Any) -> Owner | None:
    refs = list(refs)
    chosen = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if chosen is None:
        return None
    return (str(chosen.get("kind", "")), str(chosen.get("name", "")), str(chosen.get("uid", "")))

"""Nodes and pods as the fabric sees them, read from raw manifests.

The operator gets dicts from kopf, the simulator reads ``kubectl get -o yaml`` output: both
convert here, once, into small frozen records, so nothing downstream touches manifest shapes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricsched import ids, parsing
from fabricsched.api import rfc3339
from fabricsched.topology import quantities

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})

PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
NEVER = "Never"
PRIORITY_BOUND = 2_000_000_000
"""``spec.priority`` is an int32; the API's system classes reach 2e9."""
DEFAULT_GRACE_S = 30
"""The API server's default ``terminationGracePeriodSeconds``."""
MAX_GRACE_S = 3600
"""Grace periods are read up to this (an hour); a longer one counts as this long (a
preemptor's hold waits for its victims at most that long, plus a margin)."""

MAX_HOST_GPUS = 4096
"""More GPUs than any real host has (today's largest have 8-16; this leaves room for any
accelerator counted per core). A node that claims more is broken or hostile and holds none:
the engine's per-host work is then bounded by this, never by a number a manifest spells."""


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

    @classmethod
    def from_manifest(cls, body: Mapping[str, Any]) -> NodeInfo:
        metadata = body.get("metadata") or {}
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
        )

    def gpus(self, resource: str) -> int:
        """Allocatable units of ``resource``; 0 when absent, unparsable or above
        ``MAX_HOST_GPUS`` (such a node holds no GPUs: nothing is placed on it)."""
        raw = self.allocatable.get(resource)
        if raw is None:
            return 0
        try:
            count = quantities.to_int(raw)
        except ValueError:
            return 0
        return count if 0 < count <= MAX_HOST_GPUS else 0


MAX_POD_CLAIMS = 128
"""``spec.resourceClaims`` entries read per pod (the API server's own limit)."""


@dataclass(frozen=True)
class PodClaim:
    """One ``spec.resourceClaims`` entry: a ResourceClaim by name, or a ResourceClaimTemplate
    the pod's claim is made from."""

    claim: str = ""
    template: str = ""


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
    pod_group: str | None = None
    """``spec.schedulingGroup.podGroupName``: the native PodGroup the pod belongs to, if any."""
    claims: tuple[PodClaim, ...] = ()
    """``spec.resourceClaims``: DRA claims, counted against a fabric's GPU devices by the state
    (``topology.claims.fold``), which fills ``claim_gpus`` or ``uncounted``."""
    claim_gpus: Mapping[str, int] = field(default_factory=dict)
    """GPUs the pod's claims (and implicit DeviceClass requests) ask for, under each DRA
    fabric's ``spec.gpuResource``; apart from ``requests``, which node allocatable holds."""
    uncounted: str = ""
    """Why the pod's claimed GPUs cannot be counted (docs/dra.md); empty when they can."""
    priority: int = 0
    """``spec.priority`` (the API server sets it from ``priorityClassName``), bounded as the API
    bounds it."""
    preemption_policy: str = PREEMPT_LOWER_PRIORITY
    """``spec.preemptionPolicy``: ``PreemptLowerPriority`` or ``Never``."""
    started_at: float | None = None
    """``status.startTime`` (seconds since the epoch): what its eviction would throw away."""
    gated: bool = False
    """``spec.schedulingGates`` is not empty: no scheduler looks at the pod until they are gone."""
    grace_s: int = DEFAULT_GRACE_S
    """How long it may take to terminate: ``metadata.deletionGracePeriodSeconds`` once it is
    being deleted, else ``spec.terminationGracePeriodSeconds`` (bounded by ``MAX_GRACE_S``)."""
    labels_cut: bool = False
    """Some of the pod's labels are not in ``labels`` (a record keeps a bounded number of them)."""
    derived: dict[str, object] = field(default_factory=dict, init=False, repr=False, compare=False)
    """Values computed from this record alone, kept with it so each is computed once (the gang
    key: ``gangs.key_of``). Every change of a pod is a new record, which starts empty."""

    @classmethod
    def from_manifest(cls, body: Mapping[str, Any]) -> PodUsage:
        """The pod's record; raises ``parsing.Invalid`` (a ValueError with a short message) for
        a field of the wrong JSON type, as only a forged pod can have (the API server
        validates the rest)."""
        pod = parsing.mapping(body, "pod")
        metadata = parsing.mapping(pod.get("metadata"), "metadata")
        spec = parsing.mapping(pod.get("spec"), "spec")
        status = parsing.mapping(pod.get("status"), "status")
        name = parsing.string(metadata.get("name"), "metadata.name")
        if not name:
            raise parsing.Invalid("metadata.name is missing")
        node = parsing.string(spec.get("nodeName"), "spec.nodeName")
        statuses = parsing.sequence(status.get("containerStatuses"), "status.containerStatuses")
        return cls(
            namespace=parsing.string(metadata.get("namespace"), "metadata.namespace") or "default",
            name=name,
            uid=parsing.string(metadata.get("uid"), "metadata.uid"),
            node=ids.NodeName(node) if node else None,
            phase=parsing.string(status.get("phase"), "status.phase") or "Pending",
            requests=effective_requests(spec),
            labels=parsing.string_map(metadata.get("labels"), "metadata.labels"),
            annotations=parsing.string_map(metadata.get("annotations"), "metadata.annotations"),
            scheduler_name=parsing.string(spec.get("schedulerName"), "spec.schedulerName")
            or "default-scheduler",
            owner=_controller(parsing.sequence(metadata.get("ownerReferences"), "metadata.ownerReferences")),
            terminating=bool(metadata.get("deletionTimestamp")),
            containers_done=bool(statuses) and all(
                "terminated" in parsing.mapping(parsing.mapping(s, "status.containerStatuses[]").get("state"),
                                                "status.containerStatuses[].state")
                for s in statuses
            ),
            pod_group=_pod_group(spec),
            gated=bool(parsing.sequence(spec.get("schedulingGates"), "spec.schedulingGates")),
            claims=_claims(spec),
            priority=priority_of(spec.get("priority"), "spec.priority"),
            preemption_policy=policy_of(spec.get("preemptionPolicy"), "spec.preemptionPolicy"),
            started_at=_time(status.get("startTime")),
            grace_s=grace_of(_first(metadata.get("deletionGracePeriodSeconds"),
                                    spec.get("terminationGracePeriodSeconds"))),
        )

    @property
    def active(self) -> bool:
        """Holds its requests on a node: bound, not finished, not a terminated pod awaiting removal."""
        if self.node is None or self.phase in FINISHED_PHASES:
            return False
        return not (self.terminating and self.containers_done)

    def gpus(self, resource: str) -> int:
        """GPUs of ``resource`` the pod asks for: extended-resource requests and counted claims."""
        return self.requests.get(resource, 0) + self.claim_gpus.get(resource, 0)

    def asks_gpus(self) -> bool:
        """Any extended resource or counted DRA claim: what a GPU fabric may have to make room for."""
        return any(self.requests.values()) or any(self.claim_gpus.values())


def effective_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Extended-resource requests of a pod spec, as the kube-scheduler accounts them.

    Init containers run one at a time, app containers together; restartable init containers
    (sidecars, ``restartPolicy: Always``) keep running, so they add to everything after them.
    """
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in parsing.sequence(spec.get("initContainers"), "spec.initContainers"):
        own = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(sidecars, own)
            _max(init_peak, sidecars)
        else:
            _max(init_peak, _sum(sidecars, own))
    apps: dict[str, int] = dict(sidecars)
    for container in parsing.sequence(spec.get("containers"), "spec.containers"):
        _add(apps, _container_requests(container))
    _max(apps, init_peak)
    return {k: v for k, v in apps.items() if v}


def _container_requests(container: object) -> dict[str, int]:
    """Extended-resource requests of one container. A quantity of the wrong JSON type raises
    ``parsing.Invalid`` (a forged pod); one that does not parse is skipped (the API server
    would have refused it); one beyond any node is clamped by
    ``quantities`` (it never fits) and costs no more than a small one."""
    fields = parsing.mapping(container, "container")
    resources = parsing.mapping(fields.get("resources"), "container.resources")
    # An extended resource given only as a limit is requested at that limit (API defaulting).
    merged = {
        **parsing.mapping(resources.get("limits"), "container.resources.limits"),
        **parsing.mapping(resources.get("requests"), "container.resources.requests"),
    }
    out: dict[str, int] = {}
    for name, raw in merged.items():
        if "/" in str(name):
            if isinstance(raw, bool) or not isinstance(raw, str | int | float):
                raise parsing.Invalid(f"resources[{parsing.excerpt(name)}] must be a quantity string")
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


def priority_of(value: object, what: str) -> int:
    """A priority field (a JSON integer; absent: 0), clamped to the API's range."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise parsing.Invalid(f"{what} must be an integer")
    return max(-PRIORITY_BOUND, min(value, PRIORITY_BOUND))


def grace_of(value: object) -> int:
    """A grace period in seconds (a JSON integer; absent: the API's default), within [0, MAX_GRACE_S];
    raises ``parsing.Invalid`` for another type."""
    if value is None:
        return DEFAULT_GRACE_S
    if isinstance(value, bool) or not isinstance(value, int):
        raise parsing.Invalid("a termination grace period must be an integer")
    return max(0, min(value, MAX_GRACE_S))


def policy_of(value: object, what: str) -> str:
    """A preemption policy field; anything but ``Never`` preempts (the API's default)."""
    return NEVER if parsing.string(value, what) == NEVER else PREEMPT_LOWER_PRIORITY


def _first(*values: object) -> object:
    return next((v for v in values if v is not None), None)


def _time(value: object) -> float | None:
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        return rfc3339.parse(value)
    except ValueError:
        return None


def _pod_group(spec: Mapping[str, Any]) -> str | None:
    group = parsing.mapping(spec.get("schedulingGroup"), "spec.schedulingGroup")
    return parsing.string(group.get("podGroupName"), "spec.schedulingGroup.podGroupName") or None


def _claims(spec: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    found = []
    for raw in parsing.sequence(spec.get("resourceClaims"), "spec.resourceClaims")[:MAX_POD_CLAIMS]:
        entry = parsing.mapping(raw, "spec.resourceClaims[]")
        found.append(PodClaim(
            parsing.string(entry.get("resourceClaimName"), "spec.resourceClaims[].resourceClaimName"),
            parsing.string(entry.get("resourceClaimTemplateName"),
                           "spec.resourceClaims[].resourceClaimTemplateName")))
    return tuple(found)


def _controller(refs: Sequence[Any]) -> Owner | None:
    chosen = next((r for r in refs if isinstance(r, Mapping) and r.get("controller") is True), None)
    if chosen is None and refs:
        chosen = refs[0]
    if chosen is None:
        return None
    ref = parsing.mapping(chosen, "metadata.ownerReferences[]")
    return (
        parsing.string(ref.get("kind"), "ownerReferences[].kind"),
        parsing.string(ref.get("name"), "ownerReferences[].name"),
        parsing.string(ref.get("uid"), "ownerReferences[].uid"),
    )

"""GPUs through DRA: which devices of a node are a fabric's GPUs, which of them are taken, and how
many GPUs a pod's ResourceClaims ask for (docs/dra.md).

Read from ``resource.k8s.io/v1`` (Kubernetes 1.34+): ResourceClaims (``spec.devices.requests``
and ``status.allocation``), ResourceClaimTemplates (``spec.spec``), DeviceClasses
(``spec.extendedResourceName``) and NVIDIA's ComputeDomains (``resource.nvidia.com/v1beta1``,
``spec.channel.resourceClaimTemplate.name``). Every value is parsed strictly and bounded; a wrong
shape raises ``parsing.Invalid`` (the API server validates real objects, so only a forged or
future one has it). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fabricsched import ids, parsing
from fabricsched.api import dra as api
from fabricsched.topology import dra, nodes

MAX_REQUESTS = 32
"""Requests read per claim (the API server's own limit)."""
MAX_ALTERNATIVES = 8
"""``firstAvailable`` entries read per request (the API server's own limit)."""
MAX_RESULTS = 32
"""Allocated devices read per claim (the API server's own limit)."""
NAME_CHARS = 253
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
"""The extended resource every DeviceClass answers to without ``extendedResourceName`` (KEP-5004)."""

DeviceKey = tuple[str, str, str]
"""(driver, pool, device) of one device, as an allocation result names it."""
ObjectKey = tuple[str, str]
"""(namespace, name)."""


@dataclass(frozen=True)
class Request:
    """One ``spec.devices.requests[]`` entry."""

    name: str
    device_class: str
    """``exactly.deviceClassName``; empty for a ``firstAvailable`` request."""
    count: int | None
    """Devices asked for (``count``, default 1); None for ``allocationMode: All``."""
    alternatives: tuple[str, ...] = ()
    """``firstAvailable[].deviceClassName``, in order."""


@dataclass(frozen=True)
class Allocation:
    node: ids.NodeName | None
    """The node the claim's devices are on (its allocation's node selector); None: none or several."""
    devices: tuple[DeviceKey, ...]


def parse_requests(spec: Mapping[str, Any], where: str) -> tuple[Request, ...]:
    """The requests of a claim's spec (a ResourceClaim's ``spec``, a template's ``spec.spec``)."""
    devices = parsing.mapping(spec.get("devices"), f"{where}.devices")
    found = []
    for raw in parsing.sequence(devices.get("requests"), f"{where}.devices.requests")[:MAX_REQUESTS]:
        entry = parsing.mapping(raw, "requests[]")
        name = checked_name(entry.get("name"), "requests[].name")
        exact = entry.get("exactly")
        if exact is not None:
            fields = parsing.mapping(exact, "requests[].exactly")
            found.append(Request(name, checked_name(fields.get("deviceClassName"), "exactly.deviceClassName"),
                                 _request_count(fields)))
            continue
        alternatives = parsing.sequence(entry.get("firstAvailable"), "requests[].firstAvailable")
        found.append(Request(name, "", None, tuple(
            checked_name(parsing.mapping(a, "firstAvailable[]").get("deviceClassName"),
                         "firstAvailable[].deviceClassName")
            for a in alternatives[:MAX_ALTERNATIVES])))
    return tuple(found)


def parse_allocation(status: Mapping[str, Any]) -> Allocation | None:
    """A claim's ``status.allocation``: its devices and node (None: not allocated)."""
    raw = status.get("allocation")
    if raw is None:
        return None
    allocation = parsing.mapping(raw, "status.allocation")
    devices = parsing.mapping(allocation.get("devices"), "allocation.devices")
    results = parsing.sequence(devices.get("results"), "allocation.devices.results")
    taken = tuple(
        (checked_name(r.get("driver"), "results[].driver"), checked_name(r.get("pool"), "results[].pool"),
         checked_name(r.get("device"), "results[].device"))
        for r in (parsing.mapping(x, "results[]") for x in results[:MAX_RESULTS]))
    return Allocation(_selected_node(allocation.get("nodeSelector")), taken)


def _selected_node(raw: object) -> ids.NodeName | None:
    """The one node a node-local allocation names: ``matchFields`` ``metadata.name In [node]``."""
    terms = parsing.sequence(parsing.mapping(raw, "allocation.nodeSelector").get("nodeSelectorTerms"),
                             "nodeSelectorTerms")
    if len(terms) != 1:
        return None
    term = parsing.mapping(terms[0], "nodeSelectorTerms[]")
    fields = parsing.sequence(term.get("matchFields"), "matchFields")
    for item in fields[:4]:
        field = parsing.mapping(item, "matchFields[]")
        values = parsing.sequence(field.get("values"), "matchFields[].values")
        if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(values) == 1:
            return ids.NodeName(checked_name(values[0], "matchFields[].values[]"))
    return None


def extended_resource_of(body: Mapping[str, Any]) -> str:
    """A DeviceClass's ``spec.extendedResourceName`` (empty: none)."""
    spec = parsing.mapping(body.get("spec"), "spec")
    return checked_name(spec.get("extendedResourceName"), "spec.extendedResourceName")


def channel_template_of(body: Mapping[str, Any]) -> str:
    """A ComputeDomain's channel ResourceClaimTemplate (``spec.channel.resourceClaimTemplate.name``)."""
    channel = parsing.mapping(parsing.mapping(body.get("spec"), "spec").get("channel"), "spec.channel")
    template = parsing.mapping(channel.get("resourceClaimTemplate"), "spec.channel.resourceClaimTemplate")
    return checked_name(template.get("name"), "spec.channel.resourceClaimTemplate.name")


def checked_name(value: object, what: str) -> str:
    """A name or string field of at most 253 characters; raises ``parsing.Invalid`` otherwise."""
    text = parsing.string(value, what)
    if len(text) > NAME_CHARS:
        raise parsing.Invalid(f"{what}={parsing.excerpt(text)} is longer than {NAME_CHARS} characters")
    return text


def _request_count(fields: Mapping[str, Any]) -> int | None:
    mode = parsing.string(fields.get("allocationMode"), "exactly.allocationMode") or "ExactCount"
    if mode == "All":
        return None
    if mode != "ExactCount":
        raise parsing.Invalid(f"allocationMode={parsing.excerpt(mode)} is not ExactCount or All")
    raw = fields.get("count")
    if raw is None:
        return 1
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= nodes.MAX_HOST_GPUS:
        raise parsing.Invalid(
            f"exactly.count={parsing.excerpt(raw)} is not between 1 and {nodes.MAX_HOST_GPUS}")
    return raw


class ClaimIndex:
    """ResourceClaims, ResourceClaimTemplates, DeviceClasses and ComputeDomain channel templates.
    One owner, no locking."""

    def __init__(self) -> None:
        self.templates: dict[ObjectKey, tuple[Request, ...]] = {}
        self.claims: dict[ObjectKey, tuple[Request, ...]] = {}
        self.allocations: dict[ObjectKey, Allocation] = {}
        self._on_node: dict[ids.NodeName, set[ObjectKey]] = {}
        self.classes: dict[str, str] = {}
        """DeviceClass -> its extendedResourceName ("" for none)."""
        self.channels: dict[ObjectKey, str] = {}
        """(namespace, channel template name) -> the ComputeDomain whose channel it is."""
        self.version = 0
        """Bumped by every change of DeviceClasses (cluster-wide): every pod with claims re-counts."""
        self.changed_claims: set[ObjectKey] = set()
        """Claims whose spec changed since ``DraGpus.recount`` took them: only the pods naming
        them re-count (a claim made from a template changes no count: the template's requests do)."""
        self.changed_namespaces: set[str] = set()
        """Namespaces whose templates or ComputeDomain channels changed since ``DraGpus.recount``
        took them: only their pods re-count. A namespace made with its templates beside 25,000
        pods with claims re-counted all of them once per template, seconds without an answer."""

    def set_claim(self, key: ObjectKey, requests: tuple[Request, ...],
                  allocation: Allocation | None) -> set[ids.NodeName]:
        """Add or replace a claim; returns the nodes whose taken devices changed."""
        if self.claims.get(key) != requests:
            self.claims[key] = requests
            self.changed_claims.add(key)
        old = self.allocations.get(key)
        if old == allocation:
            return set()
        self._unplace(key, old)
        if allocation is not None:
            self.allocations[key] = allocation
            if allocation.node is not None:
                self._on_node.setdefault(allocation.node, set()).add(key)
        return {a.node for a in (old, allocation) if a is not None and a.node is not None}

    def remove_claim(self, key: ObjectKey) -> set[ids.NodeName]:
        if self.claims.pop(key, None) is not None:
            self.changed_claims.add(key)
        old = self.allocations.get(key)
        self._unplace(key, old)
        return {old.node} if old is not None and old.node is not None else set()

    def _unplace(self, key: ObjectKey, old: Allocation | None) -> None:
        self.allocations.pop(key, None)
        if old is not None and old.node is not None:
            held = self._on_node.get(old.node, set())
            held.discard(key)
            if not held:
                self._on_node.pop(old.node, None)

    def set_template(self, key: ObjectKey, requests: tuple[Request, ...] | None) -> None:
        """Add, replace or (None) remove a ResourceClaimTemplate."""
        if self.templates.get(key) != requests:
            if requests is None:
                self.templates.pop(key, None)
            else:
                self.templates[key] = requests
            self.changed_namespaces.add(key[0])

    def set_class(self, name: str, extended: str | None) -> None:
        """Add, replace or (None) remove a DeviceClass."""
        if self.classes.get(name) != extended:
            if extended is None:
                self.classes.pop(name, None)
            else:
                self.classes[name] = extended
            self.version += 1

    def set_channel(self, domain: ObjectKey, template: str | None) -> None:
        """A ComputeDomain's channel template (None: the domain is gone)."""
        for key, owner in list(self.channels.items()):
            if key[0] == domain[0] and owner == domain[1]:
                del self.channels[key]
        if template:
            self.channels[(domain[0], template)] = domain[1]
        self.changed_namespaces.add(domain[0])

    def taken_on(self, node: ids.NodeName) -> Iterable[DeviceKey]:
        """Devices of ``node`` in allocated claims."""
        for key in self._on_node.get(node, ()):
            yield from self.allocations[key].devices


def is_gpu(device: dra.Device, spec: api.DraGpuSpec) -> bool:
    return device.driver == spec.driver and all(
        dra.attribute_of(device, match.name) == match.value for match in spec.attributes)


def node_gpus(spec: api.DraGpuSpec, devices: dra.DeviceIndex, node: ids.NodeName) -> list[dra.Device]:
    """The node's GPU devices in the current generation of their pools."""
    return [d for d in devices.devices_of(node) if is_gpu(d, spec) and devices.current(d)]


def host_gpus(spec: api.DraGpuSpec | None, gpu_resource: str, node: nodes.NodeInfo,
              devices: dra.DeviceIndex) -> int:
    """A host's GPUs: its allocatable ``gpu_resource`` when it has any (the kube-scheduler's own
    precedence, KEP-5004: then its slices are not counted again), else its DRA GPU devices."""
    allocatable = node.gpus(gpu_resource)
    if allocatable or spec is None:
        return allocatable
    found = len(node_gpus(spec, devices, node.name))
    return found if found <= nodes.MAX_HOST_GPUS else 0


def taken_gpus(spec: api.DraGpuSpec, devices: dra.DeviceIndex, index: ClaimIndex,
               node: ids.NodeName) -> int:
    """The node's GPUs that are not free: allocated to a claim, or sharing a counter set with an
    allocated device of their pool (a GPU whose MIG slice is allocated)."""
    taken = set(index.taken_on(node))
    if not taken:
        return 0
    drawn: set[tuple[str, str, str]] = set()
    for device in devices.devices_of(node):
        if (device.driver, device.pool, device.name) in taken:
            drawn.update((device.driver, device.pool, c) for c in device.consumes)
    return sum(
        1 for g in node_gpus(spec, devices, node)
        if (g.driver, g.pool, g.name) in taken or any((g.driver, g.pool, c) in drawn for c in g.consumes))


@dataclass(frozen=True)
class DraFabric:
    """What counting a pod needs of one fabric that reads GPUs through DRA."""

    gpu_resource: str
    spec: api.DraGpuSpec
    clique_tier: str | None = None
    """The tier whose nodeLabel is the NVLink clique label, if any (ComputeDomain gangs)."""
    classes: frozenset[str] = field(init=False)
    """``spec.device_classes``, made once: every pod with claims is counted against it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "classes", frozenset(self.spec.device_classes))


def fold(pod: nodes.PodUsage, fabrics: Iterable[DraFabric], index: ClaimIndex,
         constraints: tuple[str, ...]) -> nodes.PodUsage:
    """The pod with ``claim_gpus`` (or ``uncounted``) filled for every DRA fabric. A pod claiming
    a ComputeDomain channel that carries none of the tier-constraint annotations ``constraints``
    gets the first (the required tier) set to the fabric's clique tier: one NVLink domain.
    ``pod`` itself when its count is as it was (a recount of 25,000 pods at a start makes no
    copies, and the caller's comparison is by identity first)."""
    implicit = {k: v for k, v in pod.requests.items() if k.startswith(IMPLICIT_PREFIX)}
    if not pod.claims and not implicit:
        return pod
    counted: dict[str, int] = {}
    added: dict[str, str] | None = None  # a copy of the annotations, made when a clique tier is added
    why = ""
    for fab in fabrics:
        gpus, reason, nvlink = _pod_count(pod, fab, index, implicit)
        if reason and not why:
            why = reason
        if gpus and pod.requests.get(fab.gpu_resource, 0) and not why:
            why = f"the pod asks for GPUs both through claims and through {fab.gpu_resource}"
        if gpus:
            counted[fab.gpu_resource] = counted.get(fab.gpu_resource, 0) + gpus
        if nvlink and fab.clique_tier and not any(k in pod.annotations for k in constraints):
            if added is None:
                added = dict(pod.annotations)
            added[constraints[0]] = fab.clique_tier
    if added is None and why == pod.uncounted and counted == pod.claim_gpus:
        return pod
    return replace(pod, claim_gpus=counted, uncounted=why,
                   annotations=pod.annotations if added is None else added)


def _pod_count(pod: nodes.PodUsage, fab: DraFabric, index: ClaimIndex,
           implicit: Mapping[str, int]) -> tuple[int, str, bool]:
    classes = fab.classes
    gpus = sum(n for k, n in implicit.items() if k[len(IMPLICIT_PREFIX):] in classes)
    nvlink = False
    for claim in pod.claims:
        if claim.template:
            requests = index.templates.get((pod.namespace, claim.template))
            nvlink = nvlink or (pod.namespace, claim.template) in index.channels
        else:
            requests = index.claims.get((pod.namespace, claim.claim))
        if requests is None:
            return 0, f"{_shown(pod, claim)} is not known (yet)", nvlink
        for request in requests:
            if request.device_class in classes:
                if request.count is None:
                    why = "asks for all devices (allocationMode All)"
                    return 0, f"{_shown(pod, claim)} request {request.name} {why}", nvlink
                gpus += request.count
            elif classes.intersection(request.alternatives):
                why = "has firstAvailable alternatives"
                return 0, f"{_shown(pod, claim)} request {request.name} {why}", nvlink
    return min(gpus, nodes.MAX_HOST_GPUS + 1), "", nvlink


def _shown(pod: nodes.PodUsage, claim: nodes.PodClaim) -> str:
    """The claim or template as a reason names it (made only for a reason: 25,000 pods a start)."""
    if claim.template:
        return f"ResourceClaimTemplate {pod.namespace}/{parsing.excerpt(claim.template)}"
    return f"ResourceClaim {pod.namespace}/{parsing.excerpt(claim.claim)}"

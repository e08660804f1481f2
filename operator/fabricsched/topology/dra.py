"""DRA device taints on RDMA NICs as a health source (source ``dra``, ``spec.health.dra``).

Kubernetes 1.37's DeviceTaintRule (``resource.k8s.io/v1``) puts one taint on every device its
selector matches (driver, pool, device name: all optional, an empty selector matches every
device, a missing one none); a DRA driver may also taint a device directly in its ResourceSlice.
Either way the device is fenced: ``NoSchedule`` keeps new claims off it, ``NoExecute`` also
evicts the pods using it; ``None`` (and any effect a later release adds) only informs.

For the fabric, a tainted device matters when it is a host's RDMA NIC: one whose string
attribute ``spec.health.dra.rdmaDeviceAttribute`` (DRANET's ``dra.net/rdmaDevice``, e.g.
``mlx5_3``) names it. That name goes through ``spec.railDevices`` like a Prometheus ``device``
label: ``NoSchedule`` degrades that rail of the host, ``NoExecute`` downs it; a NIC outside
``railDevices`` is ignored; without rails the host itself.

``DeviceIndex`` keeps what is needed of every ResourceSlice (node-local devices with string
attributes and taints) and every DeviceTaintRule, parsed strictly and bounded; ``observations``
answers for one node of one topology. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fabricsched import ids, parsing
from fabricsched.api import topology as api
from fabricsched.topology import fabric, health, rails

MAX_DEVICES = 128
"""Devices read per ResourceSlice (the API server's own limit)."""
MAX_TAINTS = 16
"""Taints read per device (the API server's own limit)."""
MAX_ATTRIBUTES = 32
"""Attributes read per device (the API server's own limit, attributes and capacities together)."""
MAX_VALUE_CHARS = 64
"""Longest string attribute kept (the API server's own limit)."""
REASON_CHARS = 160
MAX_FINDINGS = 4
"""Findings kept per host or rail, the worst first: enough to say why. A node may have any
number of slices of 128 devices with 16 taints each, and every rule can match every device:
unbounded, they would make the topology status too large to write."""
MAX_COUNTER_SETS = 8
"""Counter sets read per device (``consumesCounters``; the API server allows fewer)."""
MAX_GENERATION = 2**63 - 1

_STATE_OF_EFFECT: Mapping[str, fabric.HealthState] = {
    "NoSchedule": fabric.HealthState.DEGRADED,
    "NoExecute": fabric.HealthState.DOWN,
}


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str
    origin: str
    """Where the taint comes from, for reasons: ``DeviceTaintRule x`` or ``ResourceSlice y``."""


@dataclass(frozen=True)
class Device:
    """One node-local device of a ResourceSlice."""

    node: ids.NodeName
    driver: str
    pool: str
    name: str
    attributes: Mapping[str, str]
    """String attributes only (a NIC's name is a string), by qualified name as published."""
    taints: tuple[Taint, ...] = ()
    generation: int = 0
    """``spec.pool.generation`` of its slice: only the pool's newest generation is current."""
    consumes: tuple[str, ...] = ()
    """Counter sets it draws from (``consumesCounters[].counterSet``, partitionable devices): a
    whole GPU and its MIG devices share one, so an allocated MIG device takes the GPU too."""


@dataclass(frozen=True)
class DeviceTaintRule:
    """One DeviceTaintRule: which devices, which taint."""

    name: str
    driver: str | None
    pool: str | None
    device: str | None
    matches_any: bool
    """False when the rule has no selector at all: it then matches no device."""
    taint: Taint

    def matches(self, device: Device) -> bool:
        return self.matches_any and all(
            want is None or want == have
            for want, have in ((self.driver, device.driver), (self.pool, device.pool),
                               (self.device, device.name))
        )


def parse_slice(body: Mapping[str, Any]) -> tuple[str, tuple[Device, ...]]:
    """A ResourceSlice's name and its node-local devices; raises ``parsing.Invalid`` on a wrong
    shape (the API server validates real slices, so only a forged or future object has one)."""
    metadata = parsing.mapping(body.get("metadata"), "metadata")
    name = parsing.string(metadata.get("name"), "metadata.name")
    spec = parsing.mapping(body.get("spec"), "spec")
    driver = parsing.string(spec.get("driver"), "spec.driver")
    pool_fields = parsing.mapping(spec.get("pool"), "spec.pool")
    pool = parsing.string(pool_fields.get("name"), "spec.pool.name")
    generation = _whole(pool_fields.get("generation"), "spec.pool.generation")
    slice_node = parsing.string(spec.get("nodeName"), "spec.nodeName")
    devices: list[Device] = []
    for raw in parsing.sequence(spec.get("devices"), "spec.devices")[:MAX_DEVICES]:
        fields = parsing.mapping(raw, "spec.devices[]")
        node = parsing.string(fields.get("nodeName"), "spec.devices[].nodeName") or slice_node
        if not node:
            continue  # a network-attached device (nodeSelector, allNodes): no host's NIC
        devices.append(Device(
            ids.NodeName(node), driver, pool, parsing.string(fields.get("name"), "spec.devices[].name"),
            _string_attributes(parsing.mapping(fields.get("attributes"), "spec.devices[].attributes")),
            tuple(_taint(t, f"ResourceSlice {name}")
                  for t in parsing.sequence(fields.get("taints"), "spec.devices[].taints")[:MAX_TAINTS]),
            generation, _counter_sets(fields.get("consumesCounters")),
        ))
    return name, tuple(devices)


def parse_rule(body: Mapping[str, Any]) -> DeviceTaintRule:
    """A DeviceTaintRule; raises ``parsing.Invalid`` on a wrong shape."""
    metadata = parsing.mapping(body.get("metadata"), "metadata")
    name = parsing.string(metadata.get("name"), "metadata.name")
    spec = parsing.mapping(body.get("spec"), "spec")
    selector = spec.get("deviceSelector")
    fields = parsing.mapping(selector, "spec.deviceSelector")

    def pick(key: str) -> str | None:
        value = fields.get(key)
        return None if value is None else parsing.string(value, f"spec.deviceSelector.{key}")

    return DeviceTaintRule(name, pick("driver"), pick("pool"), pick("device"), selector is not None,
                _taint(spec.get("taint"), f"DeviceTaintRule {name}"))


def _taint(raw: object, origin: str) -> Taint:
    fields = parsing.mapping(raw, "taint")
    return Taint(parsing.string(fields.get("key"), "taint.key"),
                 parsing.string(fields.get("value"), "taint.value"),
                 parsing.string(fields.get("effect"), "taint.effect"), origin)


def _whole(value: object, what: str) -> int:
    """A JSON integer in [0, 2^63) (absent: 0); raises ``parsing.Invalid`` otherwise."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GENERATION:
        raise parsing.Invalid(f"{what}={parsing.excerpt(value)} is not a whole number in range")
    return value


def _counter_sets(raw: object) -> tuple[str, ...]:
    found = []
    for item in parsing.sequence(raw, "spec.devices[].consumesCounters")[:MAX_COUNTER_SETS]:
        name = parsing.string(parsing.mapping(item, "consumesCounters[]").get("counterSet"),
                              "consumesCounters[].counterSet")
        if name and len(name) <= MAX_VALUE_CHARS:
            found.append(name)
    return tuple(found)


def _string_attributes(raw: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in list(raw.items())[:MAX_ATTRIBUTES]:
        # ``type is dict`` first: JSON's, and the ABC check cost a third of a slice's parse.
        text = value.get("string") if type(value) is dict or isinstance(value, Mapping) else None
        if isinstance(text, str) and len(text) <= MAX_VALUE_CHARS:
            out[str(key)] = text
    return out


def rdma_name(device: Device, attribute: str) -> str | None:
    """The device's RDMA NIC name under ``attribute``."""
    return attribute_of(device, attribute)


def attribute_of(device: Device, attribute: str) -> str | None:
    """The device's string attribute ``attribute``; a name qualified by the device's driver
    and the unqualified one are the same attribute (DRA's relative names), both ways."""
    found = device.attributes.get(attribute)
    if found is None and "/" not in attribute:
        found = device.attributes.get(f"{device.driver}/{attribute}")
    if found is None and "/" in attribute:
        domain, _, short = attribute.partition("/")
        if device.driver == domain:
            found = device.attributes.get(short)
    return found


class DeviceIndex:
    """Every ResourceSlice's node-local devices and every DeviceTaintRule. One owner, no locking."""

    def __init__(self) -> None:
        self._slices: dict[str, tuple[Device, ...]] = {}
        self._by_node: dict[ids.NodeName, dict[str, tuple[Device, ...]]] = {}
        self._rules: dict[str, DeviceTaintRule] = {}
        self._pools: dict[tuple[str, str], dict[str, int]] = {}
        """(driver, pool) -> the generation of each of its slices with node-local devices."""

    def set_slice(self, name: str, devices: tuple[Device, ...]) -> set[ids.NodeName]:
        """Add or replace a slice; returns the nodes whose devices changed (old and new)."""
        old = self._slices.get(name, ())
        if old == devices:
            return set()
        touched = self._unlink(name)
        self._slices[name] = devices
        if devices:
            pool = (devices[0].driver, devices[0].pool)
            self._pools.setdefault(pool, {})[name] = devices[0].generation
            touched.update(self._pool_nodes(pool) - {d.node for d in devices})
        for device in devices:
            self._by_node.setdefault(device.node, {}).setdefault(name, ())
            self._by_node[device.node][name] += (device,)
            touched.add(device.node)
        return touched

    def remove_slice(self, name: str) -> set[ids.NodeName]:
        touched = self._unlink(name)
        self._slices.pop(name, None)
        return touched

    def set_rule(self, rule: DeviceTaintRule) -> bool:
        if self._rules.get(rule.name) == rule:
            return False
        self._rules[rule.name] = rule
        return True

    def remove_rule(self, name: str) -> bool:
        return self._rules.pop(name, None) is not None

    def slice_names(self) -> Collection[str]:
        return self._slices.keys()

    def rule_names(self) -> Collection[str]:
        return self._rules.keys()

    def nodes(self) -> Iterable[ids.NodeName]:
        """Nodes with at least one device."""
        return self._by_node.keys()

    def has_devices(self, node: ids.NodeName) -> bool:
        return node in self._by_node

    def devices_of(self, node: ids.NodeName) -> Iterable[Device]:
        for devices in self._by_node.get(node, {}).values():
            yield from devices

    def current(self, device: Device) -> bool:
        """The device's slice is of its pool's newest generation (older slices are on their way out)."""
        generations = self._pools.get((device.driver, device.pool), {})
        return device.generation >= max(generations.values(), default=0)

    def taints_of(self, device: Device) -> list[Taint]:
        return [*device.taints, *(r.taint for r in self._rules.values() if r.matches(device))]

    def _unlink(self, name: str) -> set[ids.NodeName]:
        touched: set[ids.NodeName] = set()
        old = self._slices.get(name, ())
        if old:
            pool = (old[0].driver, old[0].pool)
            self._pools.get(pool, {}).pop(name, None)
            if not self._pools.get(pool, True):
                del self._pools[pool]
            touched.update(self._pool_nodes(pool))  # a pool's generation moves its other slices too
        for device in old:
            per_node = self._by_node.get(device.node)
            if per_node is not None:
                per_node.pop(name, None)
                if not per_node:
                    del self._by_node[device.node]
            touched.add(device.node)
        return touched


    def _pool_nodes(self, pool: tuple[str, str]) -> set[ids.NodeName]:
        return {d.node for slice_name in self._pools.get(pool, {}) for d in self._slices.get(slice_name, ())}


def observations(spec: api.FabricTopologySpec, index: DeviceIndex,
                 node: ids.NodeName) -> list[health.Observation]:
    """The ``dra`` findings about ``node`` under ``spec`` (none when ``spec.health.dra`` is off)."""
    if not spec.health.dra.enabled or not index.has_devices(node):
        return []
    rail_map = rails.RailMap.of(spec)
    found: list[health.Observation] = []
    for device in index.devices_of(node):
        nic = rdma_name(device, spec.health.dra.rdma_device_attribute)
        if nic is None:
            continue
        rail = rail_map.rail(nic)
        if rail is False:
            continue  # a NIC outside railDevices (storage, front end): not this fabric's
        for taint in index.taints_of(device):
            state = _STATE_OF_EFFECT.get(taint.effect)
            if state is None:
                continue  # None, or an effect this release does not know: informational
            found.append(health.Observation(
                health.ElementId.node(node, rail), state, None, "dra", _reason(taint, device, nic)))
    return _worst_few(found)


def _worst_few(found: list[health.Observation]) -> list[health.Observation]:
    kept: dict[health.ElementId, int] = {}
    out = []
    for obs in sorted(found, key=lambda o: -fabric.severity(o.state)):  # stable: slice order within
        if kept.get(obs.element, 0) < MAX_FINDINGS:
            kept[obs.element] = kept.get(obs.element, 0) + 1
            out.append(obs)
    return out


def _reason(taint: Taint, device: Device, nic: str) -> str:
    value = f"={taint.value}" if taint.value else ""
    text = (f"{taint.origin}: {taint.key}{value}:{taint.effect} on {device.driver}/{device.pool}/"
            f"{device.name} (NIC {nic})")
    # A NIC name is any 64 characters the API server admits (control, bidi, markup): every view
    # shows the reason, so what cannot be printed becomes "?" (cut first: the cost stays bounded).
    return parsing.printable(text, REASON_CHARS)

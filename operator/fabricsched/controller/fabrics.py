"""One FabricTopology inside the operator: its spec, its nodes, its health tracker, its fabric.

``ClusterState`` owns one ``TopologyFabric`` per valid FabricTopology and tells it which nodes it
holds (selection and cross-topology claims are decided by the state, which sees every topology).
This module glues the core pieces together: ``topology.index.FabricIndex`` (incremental fabric)
and ``topology.health.HealthTracker`` (merged, hysteretic health); every change of effective
health is pushed into the index so the next snapshot carries it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.telemetry import poller
from fabricsched.topology import claims, conflicts, dra, health, index, nodes, selectors
from fabricsched.topology import status as core_status

HealthTransition = health.HealthChange
"""What subscribers are told when an element's effective health changes."""

_NODE_SOURCES: tuple[health.Source, ...] = ("condition", "label", "dra")


class TopologyFabric:
    """Mutable per-topology state; owned by ``ClusterState`` (one event loop, no locking)."""

    def __init__(self, name: ids.TopologyName, spec: api.FabricTopologySpec, object_generation: int,
                 uid: str = "", devices: dra.DeviceIndex | None = None) -> None:
        self.name = name
        self.devices = devices if devices is not None else dra.DeviceIndex()
        """The cluster's DRA devices and taint rules (shared, read only here): source ``dra``."""
        self.uid = uid
        self.spec = spec
        self.object_generation = object_generation
        """``metadata.generation`` of the object this spec came from (status.observedGeneration)."""
        self.selector = selectors.Selector.compile(spec.node_selector)
        self.tracker = health.HealthTracker(spec.health.recover_after_seconds, spec.health.degraded_capacity)
        self.index = index.FabricIndex(spec)
        self.members: set[ids.NodeName] = set()
        """Nodes selected (with GPUs) by this topology alone."""
        self.contested: dict[ids.NodeName, tuple[str, ...]] = {}
        """Nodes this topology selects but shares with another: they belong to none (conflict)."""
        self.version = 0
        """Bumped whenever anything the status shows may have changed."""
        self.telemetry: poller.Availability | None = None
        """Last answer of the Prometheus rules (``spec.health.prometheus``); None: not polled."""

    # --- membership -----------------------------------------------------------------------

    def selects(self, node: nodes.NodeInfo) -> bool:
        """The node matches the selector and holds GPUs (a fabric host candidate)."""
        return self.host_gpus(node) > 0 and self.selector.matches(node.labels)

    def host_gpus(self, node: nodes.NodeInfo) -> int:
        """The node's GPUs: allocatable ``spec.gpuResource``, else (``spec.draGpus``) its GPU devices."""
        return claims.host_gpus(self.spec.dra_gpus, self.spec.gpu_resource, node, self.devices)

    def taken(self, node: nodes.NodeInfo | None, held_by_pods: int, index: claims.ClaimIndex) -> int:
        """GPUs of a host that are not free: what its pods hold of the allocatable resource, or,
        for a host whose GPUs are DRA devices, those taken by allocated claims."""
        dra_spec = self.spec.dra_gpus
        if node is None or dra_spec is None or node.gpus(self.spec.gpu_resource):
            return held_by_pods
        return claims.taken_gpus(dra_spec, self.devices, index, node.name)

    def holds(self, node: ids.NodeName) -> bool:
        """The node is a host candidate of this fabric (it may still be left out by a conflict)."""
        return node in self.members

    def place(self, node: nodes.NodeInfo | None, name: ids.NodeName, claimants: tuple[str, ...],
              now: float) -> list[HealthTransition]:
        """Set ``name``'s membership: ``node`` is its current record (None: deleted or not ours),
        ``claimants`` every topology selecting it. Feeds its health sources; returns the changes."""
        member = node is not None and claimants == (self.name,)
        if node is not None and len(claimants) > 1 and self.name in claimants:
            if self.contested.get(name) != claimants:
                self.contested[name] = claimants
                self.version += 1
        elif self.contested.pop(name, None) is not None:
            self.version += 1
        if member:
            assert node is not None
            self.members.add(name)
            if self.index.set_node(node, self.host_gpus(node)):
                self.version += 1
        else:
            self.members.discard(name)
            if self.index.remove_node(name):
                self.version += 1
        found = health.observations_from_node(self.spec, node) if member and node is not None else []
        if member:
            found += dra.observations(self.spec, self.devices, name)
        return self._feed_node(name, found, now)

    def _feed_node(self, name: ids.NodeName, found: list[health.Observation],
                   now: float) -> list[HealthTransition]:
        scope = health.node_elements(name, self.spec.rails)
        changes: list[HealthTransition] = []
        for source in _NODE_SOURCES:
            mine = [o for o in found if o.source == source]
            if mine or self.tracker.holds(source, scope):  # else the update would change nothing
                changes += self.tracker.update(now, source, mine, scope=scope)
        return self._absorb(changes)

    # --- spec -----------------------------------------------------------------------------

    def respec(self, spec: api.FabricTopologySpec, object_generation: int) -> None:
        """A new spec: the fabric is rebuilt by the caller re-placing every node (``place``);
        health history is kept, so an edit does not reset recovery waits."""
        self.spec = spec
        self.object_generation = object_generation
        self.selector = selectors.Selector.compile(spec.node_selector)
        self.tracker.recover_after_s = spec.health.recover_after_seconds
        self.tracker.degraded_capacity = spec.health.degraded_capacity
        self.index = index.FabricIndex(spec)
        self.members.clear()
        self.contested.clear()
        self.index.apply_health(self.tracker.effective())
        self.version += 1

    def feed_links(self, now: float) -> list[HealthTransition]:
        return self._absorb(self.tracker.update(now, "spec.links", health.observations_from_links(self.spec)))

    def feed_all_nodes(self, all_nodes: Iterable[nodes.NodeInfo], now: float) -> list[HealthTransition]:
        """Replace the node sources' findings in full (after a restore or a spec change)."""
        found: list[health.Observation] = []
        for node in all_nodes:
            if self.holds(node.name):
                found += health.observations_from_node(self.spec, node)
                found += dra.observations(self.spec, self.devices, node.name)
        changes: list[HealthTransition] = []
        for source in _NODE_SOURCES:
            changes += self.tracker.update(now, source, [o for o in found if o.source == source])
        return self._absorb(changes)

    def feed_devices(self, touched: Iterable[ids.NodeName] | None, now: float) -> list[HealthTransition]:
        """Re-read the ``dra`` findings of ``touched`` nodes (None: of every member), after a
        ResourceSlice or DeviceTaintRule changed."""
        if touched is None:
            found = [o for n in sorted(self.members) for o in dra.observations(self.spec, self.devices, n)]
            return self._absorb(self.tracker.update(now, "dra", found))
        changes: list[HealthTransition] = []
        for name in sorted(touched):
            found = dra.observations(self.spec, self.devices, name) if name in self.members else []
            scope = health.node_elements(name, self.spec.rails)
            changes += self.tracker.update(now, "dra", found, scope=scope)
        return self._absorb(changes)

    def feed_prometheus(self, found: list[health.Observation], now: float) -> list[HealthTransition]:
        """Replace the ``prometheus`` findings in full (one telemetry round)."""
        return self._absorb(self.tracker.update(now, "prometheus", found))

    def tick(self, now: float) -> list[HealthTransition]:
        return self._absorb(self.tracker.tick(now))

    def _absorb(self, changes: list[HealthTransition]) -> list[HealthTransition]:
        # The one way health reaches the index, shared with the simulator and the benchmarks.
        if changes:
            self.index.apply_health(self.tracker.effective())
            self.version += 1
        return changes

    # --- restart --------------------------------------------------------------------------

    def restore(self, status: Mapping[str, Any]) -> None:
        """Resume health from the status a previous operator wrote (since, recoveringSince)."""
        rows = []
        for raw in status.get("degraded") or ():
            try:
                rows.append(api.HealthRecord.model_validate(raw))
            except ValueError:
                continue  # a malformed row: that element starts afresh
        records = core_status.records_from_status(rows)
        if records:
            self.tracker.restore(records)
            self.index.apply_health(self.tracker.effective())
            self.version += 1

    # --- readers --------------------------------------------------------------------------

    def build(self) -> index.BuildResult:
        return self.index.snapshot()

    def all_conflicts(self) -> tuple[conflicts.ConflictInfo, ...]:
        contested = tuple(
            conflicts.multiple_topologies(node, list(owners))
            for node, owners in sorted(self.contested.items(), key=lambda kv: index.natural_key(kv[0]))
        )
        return self.build().conflicts + contested

    def health(self) -> Mapping[health.ElementId, health.ElementHealth]:
        return self.tracker.effective()


def first_error(e: ValueError) -> str:
    """The first error of a refused spec, with its path (``spec.tiers.0.name: ...``)."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        first = errors()[0] if errors() else None
        if first is not None:
            where = ".".join(str(p) for p in first.get("loc", ()))
            return f"spec.{where}: {first.get('msg', '')}" if where else str(first.get("msg", ""))
    return str(e)

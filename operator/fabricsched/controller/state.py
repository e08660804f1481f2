"""The operator's one in-memory view of the cluster, kept current by the list-and-watch.

Flow: watch event -> ``apply_*``/``delete_*`` (thin, incremental) -> counters and change
notifications -> readers take a ``snapshots.TopologySnapshot`` (cached per generation) and run the
pure engine on it. The extender runs in the same process and the same event loop, so there
is no locking: call everything from the loop thread.

What is kept, and why it stays small at 10k nodes x 50k pods:
- nodes as ``k8s.NodeInfo`` (labels, allocatable, conditions; heartbeats are dropped, so a
  status heartbeat compares equal and costs one dict lookup);
- only pods that request an extended resource (a ``/`` in the name: GPUs) or claim DRA devices,
  as ``k8s.PodUsage`` with labels and annotations cut down to the gang conventions;
- Jobs as ``ports.job_types.JobInfo`` (a handful of fields);
- per node, the extended resources its active pods hold (updated on every pod change, so free
  GPUs never need a pass over all pods);
- per FabricTopology, the free GPUs of every host of its fabric (``snapshots.FreeMap``), moved one
  node at a time as pods bind and end; rebuilt only with the fabric (nodes, labels, health, spec);
- per FabricTopology, its spec, its nodes and a ``topology.health.HealthTracker``.

Readers:
- ``snapshot(name)`` -> ``snapshots.TopologySnapshot`` (fabric + free GPUs + spec), lazily per
  generation; its free-GPU map is shared copy-on-write (a later bind copies it first), so a
  snapshot per bind costs no pass over the hosts and one kept across an ``await`` never changes;
- ``pods``, ``jobs``, ``nodes``, ``topologies`` read-only mappings;
- ``subscribe(callback)``: called synchronously with a ``ports.changes.Change`` after the state moved
  (pod bound or ended, job finished or deleted, element health changed, topology changed).
  Callbacks must be quick and must not call ``apply_*``; schedule async work instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from fabricsched import ids
from fabricsched.api import topology as api
from fabricsched.controller import dra_gpus, fabrics, job_index, optin, placed_log, pod_records, snapshots
from fabricsched.ports import changes
from fabricsched.ports import jobs as job_types
from fabricsched.telemetry import poller
from fabricsched.topology import dra, gpus, health
from fabricsched.topology import nodes as k8s

logger = logging.getLogger(__name__)

PodKey = tuple[str, str]
"""(namespace, name) of a pod."""

JobKey = job_index.JobKey


@dataclass(frozen=True)
class TopologyObject:
    """What was last seen of a FabricTopology object itself (valid spec or not)."""

    name: ids.TopologyName
    uid: str
    generation: int
    """``metadata.generation``: status.observedGeneration once reported."""
    status: Mapping[str, Any]
    """The status as last seen on the object (to write only what changed)."""
    invalid: str | None = None
    """Why the spec was refused (Ready=False); None for a valid spec."""


class ClusterState:
    """Nodes, GPU pods, Jobs and FabricTopologies, updated incrementally.

    ``clock`` returns seconds since the epoch; it dates health transitions (hysteresis), and
    tests pass a fake one.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._nodes: dict[ids.NodeName, k8s.NodeInfo] = {}
        self._pods: dict[PodKey, k8s.PodUsage] = {}
        self._pods_by_namespace: dict[str, dict[PodKey, k8s.PodUsage]] = {}
        """The same pods per namespace: a gang's pods share one, so finding them costs a pass
        over that namespace, not over 50,000 pods."""
        self._unbound: dict[PodKey, k8s.PodUsage] = {}
        """The same pods not on a node: what waits to be scheduled, found without that pass."""
        self._jobs = job_index.JobIndex()
        self._used: dict[ids.NodeName, dict[str, int]] = {}
        self._claims: dict[ids.NodeName, tuple[str, ...]] = {}
        """Topologies selecting each node (only nodes selected by at least one)."""
        self._fabrics: dict[ids.TopologyName, fabrics.TopologyFabric] = {}
        self._objects: dict[ids.TopologyName, TopologyObject] = {}
        self._subscribers: list[changes.Subscriber] = []
        self._snapshots: dict[ids.TopologyName, snapshots.TopologySnapshot] = {}
        self._free: dict[ids.TopologyName, snapshots.FreeMap] = {}
        self._synced = False
        self.devices = dra.DeviceIndex()
        """DRA devices and DeviceTaintRules (``controller.dra`` keeps it current): source ``dra``."""
        self.optin = optin.OptInWatch(clock, lambda: {tf.spec.gpu_resource for tf in self._fabrics.values()})
        """Opted-in namespaces and their GPU pods that missed the webhook (``controller.optin``)."""
        self.dra = dra_gpus.DraGpus(self.devices)
        """Claims, templates, DeviceClasses, ComputeDomains: GPUs through DRA (docs/dra.md)."""
        self.generation = 0
        """Bumped by every change that can alter a snapshot (nodes, GPU pods, topologies, health)."""
        self.usage_generation = 0
        """The part of ``generation`` bumped by GPU pods starting or ending: capacity, not the
        fabric's shape or health (the status reporter writes those changes less often)."""
        self._placed = placed_log.PlacedLog()
        """Which pods on nodes changed: preemption's index of running workloads follows them."""

    # --- readiness ----------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """True once the initial listings of nodes, pods, Jobs, FabricTopologies and the DRA kinds
        the cluster serves are applied."""
        return self._synced

    def mark_synced(self) -> None:
        """The initial listings are in. Health sources are fed in full only now: a topology
        restored from its status before its nodes were listed must not start recovery waits for
        nodes it has not seen yet."""
        if self._synced:
            return
        self._synced = True
        now = self._clock()
        for name, tf in self._fabrics.items():
            self._emit_health(name, tf.feed_all_nodes(self._nodes.values(), now)
                              + tf.feed_links(now))

    # --- subscription -------------------------------------------------------------------

    def subscribe(self, callback: changes.Subscriber) -> changes.Unsubscribe:
        """Call ``callback`` after each change; returns a function that unsubscribes."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def _emit(self, change: changes.Change) -> None:
        for callback in list(self._subscribers):
            try:
                callback(change)
            except Exception:
                # A broken subscriber must not stop the state from following the cluster.
                logger.exception("state subscriber failed on %s", type(change).__name__)

    # --- read access --------------------------------------------------------------------

    @property
    def nodes(self) -> Mapping[ids.NodeName, k8s.NodeInfo]:
        return self._nodes

    @property
    def pods(self) -> Mapping[PodKey, k8s.PodUsage]:
        """GPU pods only (pods requesting an extended resource)."""
        return self._pods

    @property
    def placed_pods_version(self) -> int:
        """Bumped whenever the record of a pod on a node (before or after) is added, replaced or
        removed: preemption keeps its index of running workloads while it stays put."""
        return self._placed.version

    def placed_pods_since(self, version: int) -> set[PodKey] | None:
        """The pods on nodes whose records changed after ``version`` (a ``placed_pods_version``);
        None when that is too long ago to tell."""
        return self._placed.since(version)

    @property
    def unbound_pods(self) -> Mapping[PodKey, k8s.PodUsage]:
        """The GPU pods not on a node (those of ``pods`` without one), ended ones included."""
        return self._unbound

    def pods_in(self, namespace: str) -> Mapping[PodKey, k8s.PodUsage]:
        """The GPU pods of one namespace (those of ``pods`` whose key starts with it)."""
        return self._pods_by_namespace.get(namespace, {})

    @property
    def jobs(self) -> Mapping[JobKey, job_types.JobInfo]:
        return self._jobs.jobs

    @property
    def topologies(self) -> Mapping[ids.TopologyName, fabrics.TopologyFabric]:
        return self._fabrics

    def element_health(self, name: ids.TopologyName) -> Mapping[health.ElementId, health.ElementHealth]:
        tf = self._fabrics.get(name)
        return tf.health() if tf is not None else {}

    @property
    def objects(self) -> Mapping[ids.TopologyName, TopologyObject]:
        """Every FabricTopology seen, including those whose spec was refused (no fabric)."""
        return self._objects

    def topology_holding_most(self, nodes: Collection[ids.NodeName]) -> ids.TopologyName | None:
        """The topology whose fabric holds most of ``nodes``, the first by name on a
        tie; None when none holds any. The extender asks this for all the nodes the scheduler
        passes (10k), so it costs a set intersection per topology, not a lookup per node, and
        with a single topology only the search for one node it holds."""
        # Only hosts of the fabric count: a member left out by a conflict cannot hold a pod.
        if len(self._fabrics) == 1:
            ((name, tf),) = self._fabrics.items()
            return None if tf.build().fabric.hosts.keys().isdisjoint(nodes) else name
        wanted = set(nodes)
        counts = {name: len(tf.build().fabric.hosts.keys() & wanted)
                  for name, tf in sorted(self._fabrics.items())}
        best = max(counts, key=counts.__getitem__, default=None)
        return best if best is not None and counts[best] > 0 else None

    def used(self, node: ids.NodeName, resource: str) -> int:
        """Units of ``resource`` held by active pods on ``node``."""
        return self._used.get(node, {}).get(resource, 0)


    def snapshot(self, name: ids.TopologyName) -> snapshots.TopologySnapshot | None:
        """The topology at the current generation (None: unknown or invalid topology)."""
        cached = self._snapshots.get(name)
        if cached is not None and cached.generation == self.generation:
            return cached
        tf = self._fabrics.get(name)
        if tf is None:
            return None
        built = tf.build()
        resource = tf.spec.gpu_resource
        held = self._free.get(name)
        if held is None or held.fabric is not built.fabric or held.resource != resource:
            free = gpus.free_of(built.fabric, lambda h: self._taken(tf, h))
            held = self._free[name] = snapshots.FreeMap(built.fabric, resource, free)
        held.shared = True
        snap = snapshots.TopologySnapshot(
            name, tf.spec, built.fabric, held.free, tf.all_conflicts(), self.generation
        )
        self._snapshots[name] = snap
        return snap

    def _taken(self, tf: fabrics.TopologyFabric, node: ids.NodeName) -> int:
        return tf.taken(self._nodes.get(node), self.used(node, tf.spec.gpu_resource), self.dra.claims)

    def counted(self, pod: k8s.PodUsage) -> k8s.PodUsage:
        """``pod`` with the GPUs its DRA claims ask for counted (``claim_gpus``, ``uncounted``)."""
        return self.dra.count(pod, self._fabrics.values())

    # --- nodes --------------------------------------------------------------------------

    def apply_node(self, body: Mapping[str, Any]) -> None:
        info = k8s.NodeInfo.from_manifest(body)
        old = self._nodes.get(info.name)
        if old == info:
            return  # a heartbeat: nothing the fabric sees has changed
        self._nodes[info.name] = info
        self.generation += 1
        self._reclaim(info.name, info, self._clock())

    def delete_node(self, name: str) -> None:
        node = ids.NodeName(name)
        if self._nodes.pop(node, None) is None:
            return
        self.generation += 1
        self._reclaim(node, None, self._clock())

    def _reclaim(self, name: ids.NodeName, info: k8s.NodeInfo | None, now: float) -> None:
        """Recompute which topologies select ``name`` and update every one concerned."""
        claimants = tuple(sorted(t for t, tf in self._fabrics.items() if info and tf.selects(info)))
        before = self._claims.get(name, ())
        if claimants:
            self._claims[name] = claimants
        else:
            self._claims.pop(name, None)
        for topology in sorted(set(before) | set(claimants)):
            tf = self._fabrics.get(ids.TopologyName(topology))
            if tf is not None:
                self._emit_health(tf.name, tf.place(info, name, claimants, now))

    def _emit_health(self, topology: ids.TopologyName, moved: list[fabrics.HealthTransition]) -> None:
        if moved:
            self.generation += 1
        for change in moved:
            self._emit(changes.HealthChanged(topology, change))

    # --- pods ---------------------------------------------------------------------------

    def apply_pod(self, body: Mapping[str, Any]) -> None:
        metadata = body.get("metadata") or {}
        key = (str(metadata.get("namespace") or "default"), str(metadata.get("name")))
        old = self._pods.get(key)
        if old is None and not pod_records.requests_extended(body):
            return  # not a GPU pod: not ours, not stored
        pod = pod_records.trimmed(self.counted(k8s.PodUsage.from_manifest(body)))
        if old == pod:
            return
        if old is not None and old.uid != pod.uid:
            # Recreated under the same name while we missed the delete: end the old one first.
            self._forget_pod(key, old)
            old = None
        if old is None:
            self.optin.pod_added(pod, metadata.get("creationTimestamp"), self._synced)
        if pod.node is not None or (old is not None and old.node is not None):
            self._placed.moved((key,))
        self._store(key, pod)
        was_active = old is not None and old.active
        if was_active != pod.active or (old is not None and old.node != pod.node):
            if old is not None and was_active:
                self._hold(old, -1)
            if pod.active:
                self._hold(pod, +1)
            self.generation += 1
            self.usage_generation += 1
        if pod.node is not None and (old is None or old.node is None) and pod.active:
            self._emit(changes.PodBound(pod))
        if was_active and not pod.active and old is not None:
            self._emit(changes.PodEnded(pod))

    def _store(self, key: PodKey, pod: k8s.PodUsage) -> None:
        self._pods[key] = self._pods_by_namespace.setdefault(key[0], {})[key] = pod
        if pod.node is None:
            self._unbound[key] = pod
        else:
            self._unbound.pop(key, None)

    def delete_pod(self, namespace: str, name: str) -> None:
        old = self._pods.get((namespace, name))
        if old is not None:
            self._forget_pod((namespace, name), old)

    def _forget_pod(self, key: PodKey, old: k8s.PodUsage) -> None:
        del self._pods[key]
        self._unbound.pop(key, None)
        if old.node is not None:
            self._placed.moved((key,))
        in_namespace = self._pods_by_namespace.get(key[0], {})
        in_namespace.pop(key, None)
        if not in_namespace:
            self._pods_by_namespace.pop(key[0], None)
        if old.active:
            self._hold(old, -1)
            self.generation += 1
            self.usage_generation += 1
        # Unbound pods too: a gang whose pods are all deleted before binding frees its plan.
        self._emit(changes.PodEnded(old, deleted=True))

    def _hold(self, pod: k8s.PodUsage, sign: int) -> None:
        assert pod.node is not None
        held = self._used.setdefault(pod.node, {})
        for resource, amount in pod.requests.items():
            held[resource] = held.get(resource, 0) + sign * amount
            if held[resource] <= 0:
                del held[resource]
        if not held:
            del self._used[pod.node]
        self._refree((pod.node,))

    def _refree(self, touched: Collection[ids.NodeName]) -> None:
        for name, free in self._free.items():
            tf = self._fabrics.get(name)
            for node in touched:
                host = free.fabric.hosts.get(node)
                if host is not None and tf is not None:
                    free.set(node, max(0, host.gpus - self._taken(tf, node)))

    # --- jobs ---------------------------------------------------------------------------

    def apply_job(self, body: Mapping[str, Any]) -> None:
        for change in self._jobs.apply(body):
            self._emit(change)

    def delete_job(self, namespace: str, name: str) -> None:
        for change in self._jobs.delete(namespace, name):
            self._emit(change)

    def job_by_uid(self, namespace: str, uid: str) -> job_types.JobInfo | None:
        """The Job with that UID in ``namespace`` (pods name their Job by owner UID)."""
        return self._jobs.by_uid(namespace, uid)

    # --- topologies ---------------------------------------------------------------------

    def apply_topology(self, name: str, body: Mapping[str, Any]) -> None:
        """A FabricTopology was listed, created or edited; status-only edits cost a comparison.

        A new object resumes health from its status (``since``, ``recoveringSince``), so a
        restarted operator continues recovery waits instead of restarting them.
        """
        tname = ids.TopologyName(name)
        metadata = body.get("metadata") or {}
        generation = int(metadata.get("generation") or 0)
        uid = str(metadata.get("uid") or "")
        status = body.get("status") or {}
        previous = self._objects.get(tname)
        if previous is not None and previous.uid != uid:
            self._drop_topology(tname)  # deleted and recreated while the delete went unseen
        try:
            spec = api.FabricTopologySpec.model_validate(body.get("spec") or {})
        except ValueError as e:
            # The CRD schema should have refused it; keep the reason for Ready=False.
            self._objects[tname] = TopologyObject(tname, uid, generation, status, fabrics.first_error(e))
            self._drop_topology(tname)
            return
        self._objects[tname] = TopologyObject(tname, uid, generation, status)
        existing = self._fabrics.get(tname)
        now = self._clock()
        if existing is not None and existing.spec == spec:
            existing.object_generation = generation
            return
        if existing is None:
            tf = fabrics.TopologyFabric(tname, spec, generation, uid, self.devices)
            tf.restore(status)
            self._fabrics[tname] = tf
        else:
            tf = existing
            tf.respec(spec, generation)
        self.generation += 1
        self.dra.topology_changed()
        self._recontest(tname, now)
        self.refresh_claims(())  # pods with claims listed before the topology count its GPUs now
        if self._synced:
            self._emit_health(tname, tf.feed_all_nodes(self._nodes.values(), now) + tf.feed_links(now))
        self._emit(changes.TopologyChanged(tname))

    def delete_topology(self, name: str) -> None:
        tname = ids.TopologyName(name)
        self._objects.pop(tname, None)
        self._drop_topology(tname)

    def _drop_topology(self, tname: ids.TopologyName) -> None:
        tf = self._fabrics.pop(tname, None)
        if tf is None:
            return
        self._snapshots.pop(tname, None)
        self._free.pop(tname, None)
        self.generation += 1
        self._recontest(tname, self._clock())
        self._emit(changes.TopologyChanged(tname, deleted=True))

    def _recontest(self, tname: ids.TopologyName, now: float) -> None:
        """Topology ``tname`` was added, changed or dropped: the topologies selecting each node may
        change (its nodes contested by, or freed from, another), and its own nodes are placed anew."""
        for node_name, info in self._nodes.items():
            before = self._claims.get(node_name, ())
            claimants = tuple(sorted(t for t, f in self._fabrics.items() if f.selects(info)))
            if claimants == before and tname not in claimants:
                continue
            if claimants:
                self._claims[node_name] = claimants
            else:
                self._claims.pop(node_name, None)
            for topology in sorted((set(before) | set(claimants)) & self._fabrics.keys()):
                other = self._fabrics[ids.TopologyName(topology)]
                self._emit_health(other.name, other.place(info, node_name, claimants, now))

    # --- telemetry (fabricsched.telemetry feeds these) -----------------------------------

    def feed_telemetry(self, name: ids.TopologyName, found: list[health.Observation]) -> None:
        """One telemetry round's ``prometheus`` findings for topology ``name`` (in full)."""
        tf = self._fabrics.get(name)
        if tf is not None:
            self._emit_health(name, tf.feed_prometheus(found, self._clock()))

    def set_telemetry(self, name: ids.TopologyName, availability: poller.Availability | None) -> None:
        """Whether the topology's Prometheus answers (status condition TelemetryUnavailable)."""
        tf = self._fabrics.get(name)
        if tf is not None and tf.telemetry != availability:
            tf.telemetry = availability
            tf.version += 1
            self.generation += 1

    def refeed_devices(self, touched: Collection[ids.NodeName] | None) -> None:
        """DRA devices of ``touched`` nodes (None: a taint rule, so every node) changed in ``devices``:
        their GPU devices may have too (``spec.draGpus``), so they are placed again."""
        now = self._clock()
        for node in sorted(touched or ()):
            if node in self._nodes:
                self.generation += 1
                self._reclaim(node, self._nodes[node], now)
        for name, tf in self._fabrics.items():
            self._emit_health(name, tf.feed_devices(touched, now))

    def refresh_claims(self, touched: Collection[ids.NodeName]) -> None:
        """DRA claims moved: the free GPUs of ``touched`` nodes (allocations), and the counts
        of pods with claims (claims, templates, classes, ComputeDomains)."""
        moved = self.dra.recount(self._pods, self._fabrics.values(), self._pods_by_namespace)
        for key, pod in moved.items():
            self._store(key, pod)
        self._placed.moved(moved)
        if not moved and not touched:
            return  # a claim the counts do not read (from a template) and no allocation moved
        self.generation += 1
        self.usage_generation += 1
        self._refree(touched)

    # --- hysteresis clock ---------------------------------------------------------------

    def tick(self) -> None:
        """Apply recoveries whose wait is over; call every second or so."""
        now = self._clock()
        for name, tf in self._fabrics.items():
            self._emit_health(name, tf.tick(now))


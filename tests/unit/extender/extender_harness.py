"""Test harness of the extender: the extender's ``Service`` on the real cluster state, with
in-memory stand-ins for the API server.

``Harness`` builds a ``ClusterState`` from node manifests (tests/builders.py), a FabricPlacement
store kept in a dict, an Event log and a clock the test moves, and the ``Service`` that wires the
book, the coordinator and the writer on them.

The default fabric, ``ib-east``: two spines, two leaves each, four 8-GPU hosts per leaf,
oversubscription 2:1 at the leaf.

    s1: l1 (l1-h0..h3), l2 (l2-h0..h3)        s2: l3 (l3-h0..h3), l4 (l4-h0..h3)
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import prometheus_client

from builders import PodBuilder, make_node, make_pod, make_topology, topograph_tiers
from fabricsched import ids
from fabricsched.controller import state as cluster_state
from fabricsched.extender import service as extender_service
from fabricsched.extender.decide import budgets, coordinator, owners, pod_identity
from fabricsched.extender.decide.answers import FilterAnswer
from fabricsched.ports import errors, notices
from fabricsched.topology import nodes
from timing import Clock

TOPOLOGY = "ib-east"
LAYOUT = {"s1": ("l1", "l2"), "s2": ("l3", "l4")}


class MemoryStore:
    """FabricPlacement objects by (namespace, name), with the API server's status-on-create rule."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.writes = 0
        self.fail = False

    async def load(self) -> list[dict[str, Any]]:
        return [dict(o) for o in self.objects.values()]

    async def create(self, manifest: dict[str, Any]) -> None:
        if self.fail:
            raise errors.Unavailable("API server away")
        meta = manifest["metadata"]
        # As the API server does: a created object has no status until the status is written.
        self.objects.setdefault(
            (meta["namespace"], meta["name"]), {k: v for k, v in manifest.items() if k != "status"}
        )

    async def save(self, manifest: dict[str, Any]) -> None:
        if self.fail:
            raise errors.Unavailable("API server away")
        self.writes += 1
        meta = manifest["metadata"]
        key = (meta["namespace"], meta["name"])
        if manifest["status"]["phase"] == "Released" and not meta.get("ownerReferences"):
            self.objects.pop(key, None)
            return
        self.objects[key] = manifest

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        return self.objects[(namespace, name)]


@dataclass
class EventLog:
    """The operator's Event recorder (``notices.Recorder``) as a list: a pod's Events name the
    pod, any other object's ``Kind/name``."""

    events: list[tuple[str, str, str, bool]] = field(default_factory=list)

    def record(self, ref: notices.ObjectRef, notice: notices.Notice, now: float) -> None:
        who = ref.name if ref.kind == "Pod" else f"{ref.kind}/{ref.name}"
        self.events.append((who, notice.reason, notice.message, notice.type == "Warning"))

    def reasons(self) -> list[str]:
        return [e[1] for e in self.events]


class PlayedEvictions:
    """Preemption's API calls played in memory (``preemption_options.PreemptionCalls``): no
    budgets, namespaces without labels; each eviction recorded, then handed to ``on_evict``
    (e.g. to mark the pod terminating on the state, as a kubelet keeps its containers running)."""

    def __init__(self, on_evict: Callable[[str], None] = lambda name: None) -> None:
        self.evicted: list[str] = []
        self._on_evict = on_evict
        self.api_waited_s = 0.0

    async def budgets(self, namespace: str) -> Sequence[budgets.Budget]:
        return ()

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return {}

    async def evict(self, namespace: str, name: str, uid: str) -> None:
        self.evicted.append(name)
        self._on_evict(name)


class Harness:
    def __init__(
        self,
        node_manifests: Iterable[dict[str, Any]] = (),
        ttl_s: float = 120.0,
        spec: dict[str, Any] | None = None,
        options: coordinator.CoordinatorOptions | None = None,
        state: cluster_state.ClusterState | None = None,
        store: MemoryStore | None = None,
        owner_fetcher: owners.OwnerFetcher | None = None,
        pods: pod_identity.PodLookup | None = None,
        registry: prometheus_client.CollectorRegistry | None = None,
        restart_placement: str = "previous",
    ) -> None:
        """``state`` and ``store``: a restarted process on the same cluster and API server."""
        self.clock = Clock()
        if state is None:
            state = cluster_state.ClusterState(self.clock)
            for body in node_manifests:
                state.apply_node(body)
            topology = spec or make_topology(topograph_tiers(2)).to_wire()
            if not spec:
                topology["tiers"][0]["oversubscription"] = 2.0
            state.apply_topology(
                TOPOLOGY, {"metadata": {"name": TOPOLOGY, "generation": 1}, "spec": topology}
            )
            state.mark_synced()
        self.state = state
        self.store = store if store is not None else MemoryStore()
        self.events = EventLog()
        self.service = extender_service.Service(
            self.state, self.store, None, self.events, self.clock,
            extender_service.ServiceOptions(reservation_ttl_s=ttl_s, restart_placement=restart_placement),
            registry=registry,
            owner_fetcher=owner_fetcher, pods=pods,
        )
        if options is not None:
            # The service builds its coordinator from its own options: the same parts with these.
            self.service.coordinator = coordinator.Coordinator(
                parts_of(self.service.coordinator), self.clock, options
            )
        self.book = self.service.book
        self.writer = self.service.writer
        self.coordinator = self.service.coordinator
        self.state.subscribe(self.coordinator.on_change)
        self.uid = 0

    def run(self, coro: Any) -> Any:
        return asyncio.run(coro)

    def restore(self) -> None:
        """What ``Service._restore`` does once the state is synced: the stored plans, read back."""
        self.coordinator.restore(extender_service._readable(self.run(self.store.load())))

    def job(self, name: str, pods: int, namespace: str = "train", create_pods: bool = True) -> str:
        """An Indexed Job of ``pods`` 8-GPU pods; as the Job controller does, its pods are created
        with it (unbound), so the gang is complete when its first pod is filtered. A test filters
        each pod again with its own shape; ``create_pods=False`` leaves them to the test."""
        uid = f"job-{name}-{self.uid}"
        self.uid += 1
        self.state.apply_job(
            {
                "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed"},
                "status": {},
            }
        )
        for rank in range(pods if create_pods else 0):
            self.state.apply_pod(self.pod(name, uid, rank, namespace=namespace).build())
        return uid

    def pod(self, job: str, uid: str, rank: int, gpus: int = 8, namespace: str = "train") -> PodBuilder:
        return make_pod(f"{job}-{rank}", namespace).job(job, uid, rank).gpus(gpus).scheduler("fabricsched")

    def filter(
        self, pod: PodBuilder, candidates: Sequence[str] | None = None, created: float | None = None
    ) -> FilterAnswer:
        """The filter call for ``pod``; ``created`` (seconds on the test clock) is its
        ``creationTimestamp``, which the builder leaves out."""
        names = list(candidates) if candidates is not None else self.free_nodes(pod)
        manifest = pod.build()
        if created is not None:
            stamp = datetime.datetime.fromtimestamp(created, datetime.UTC)
            manifest["metadata"]["creationTimestamp"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        self.state.apply_pod(manifest)
        answer: FilterAnswer = self.run(self.coordinator.filter(manifest, names))
        self.run(self.writer.flush(1.0))
        return answer

    def bind(self, pod: PodBuilder, node: str) -> None:
        self.state.apply_pod(pod.on(node).build())

    def place(
        self, pod: PodBuilder, candidates: Sequence[str] | None = None, created: float | None = None
    ) -> str:
        """Filter, then bind where the filter points (what the scheduler would do)."""
        answer = self.filter(pod, candidates, created)
        assert len(answer.passed) == 1, answer
        self.bind(pod, answer.passed[0])
        return answer.passed[0]

    def free_nodes(self, pod: PodBuilder) -> list[str]:
        """Nodes the kube-scheduler would pass: enough free GPUs for the pod (it ignores reservations)."""
        want = nodes.PodUsage.from_manifest(pod.build()).gpus("nvidia.com/gpu")
        free = {n: f for t in self.state.topologies if (s := self.state.snapshot(t)) is not None
                for n, f in s.free_gpus.items()}
        return [n for n in self.state.nodes if free.get(ids.NodeName(n), 0) >= want]

    def end_job(self, name: str, uid: str, pods: int, namespace: str = "train") -> None:
        self.state.apply_job(
            {
                "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed"},
                "status": {"conditions": [{"type": "Complete", "status": "True"}]},
            }
        )


def parts_of(made: coordinator.Coordinator) -> coordinator.Parts:
    """The parts a coordinator was built with (to build another one on them)."""
    return coordinator.Parts(
        made.state, made.book, made.writer, made.events, made.owners, made.path_health, made.workloads,
        made.pending, made.follower, made._session, made.identity,
    )


def fabric_nodes(degraded_hosts: Sequence[str] = (), gpus: int = 8) -> list[dict[str, Any]]:
    out = []
    for spine, leaves in LAYOUT.items():
        for leaf in leaves:
            for i in range(4):
                name = f"{leaf}-h{i}"
                node = make_node(name).leaf(leaf).spine(spine).gpus(gpus)
                if name in degraded_hosts:
                    node.condition("FabricLinkDegraded", True, "symbol errors on mlx5_2")
                out.append(node.build())
    return out


def relabel(h: Harness, node: str, value: str | None) -> None:
    """Node ``node`` of the default fabric again, with ``fabricsched.io/fabric-health`` set to
    ``value`` (None: unset); the writes that follow are flushed."""
    leaf, spine = node.split("-")[0], {"l1": "s1", "l2": "s1", "l3": "s2", "l4": "s2"}[node.split("-")[0]]
    builder = make_node(node).leaf(leaf).spine(spine).gpus(8)
    if value is not None:
        builder.label("fabricsched.io/fabric-health", value)
    h.state.apply_node(builder.build())
    h.run(h.writer.flush(1.0))


def leaf_of(node: str) -> str:
    return node.split("-")[0]

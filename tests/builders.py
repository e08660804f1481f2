"""Fixture builders: Node, Pod and FabricTopology manifests as the API server shows them.

    make_node("n1").leaf("l1").spine("s1").gpus(8).condition("FabricLinkDegraded", True).build()

returns the v1 Node dict ``kubectl get node n1 -o yaml`` would print (the parts fabricsched
reads). ``.info()`` gives the ``NodeInfo`` directly. Tier shortcuts use Topograph's labels
(``fabric.topograph.run/tier-N``); ``.aws(...)``, ``.gke(...)`` and ``.nvidia(...)`` set the cloud
and NVIDIA label families; ``.tier(label, value)`` sets any other.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Self

from fabricsched.api import topology as api
from fabricsched.topology import nodes

GPU = "nvidia.com/gpu"
TOPOGRAPH = "fabric.topograph.run/tier-{}"
AWS = "topology.k8s.aws/network-node-layer-{}"
NVIDIA = "network.topology.nvidia.com/{}"
GKE = "cloud.google.com/gce-topology-{}"
HEARTBEAT = "2024-05-01T12:00:00Z"


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._labels: dict[str, str] = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
        self._name = name
        self._allocatable: dict[str, str] = {"cpu": "96", "memory": "1966080Mi", "pods": "110"}
        self._conditions: dict[str, dict[str, str]] = {
            "Ready": _condition("Ready", True, "KubeletReady", "kubelet is posting ready status"),
        }
        self._unschedulable = False

    def label(self, key: str, value: str) -> Self:
        self._labels[key] = value
        return self

    def unlabel(self, key: str) -> Self:
        self._labels.pop(key, None)
        return self

    def tier(self, label: str, value: str) -> Self:
        return self.label(label, value)

    def leaf(self, value: str) -> Self:
        return self.label(TOPOGRAPH.format(0), value)

    def spine(self, value: str) -> Self:
        return self.label(TOPOGRAPH.format(1), value)

    def core(self, value: str) -> Self:
        return self.label(TOPOGRAPH.format(2), value)

    def aws(self, layer1: str, layer2: str, layer3: str, layer4: str | None = None,
            instance_type: str = "p5.48xlarge") -> Self:
        """EKS labels: layer-1 is the TOP of the hierarchy, layer-3 (or 4) the closest to the host."""
        self.label(AWS.format(1), layer1).label(AWS.format(2), layer2).label(AWS.format(3), layer3)
        self.label("node.kubernetes.io/instance-type", instance_type)
        return self.label(AWS.format(4), layer4) if layer4 is not None else self

    def nvidia(self, leaf: str, spine: str, core: str | None = None) -> Self:
        self.label(NVIDIA.format("leaf"), leaf).label(NVIDIA.format("spine"), spine)
        return self.label(NVIDIA.format("core"), core) if core is not None else self

    def gke(self, block: str, subblock: str, host: str | None = None) -> Self:
        self.label(GKE.format("block"), block).label(GKE.format("subblock"), subblock)
        return self.label(GKE.format("host"), host) if host is not None else self

    def gpus(self, count: int | str, resource: str = GPU) -> Self:
        self._allocatable[resource] = str(count)
        if resource == GPU:
            self._labels["nvidia.com/gpu.present"] = "true"
        return self

    def allocatable(self, resource: str, quantity: str) -> Self:
        self._allocatable[resource] = quantity
        return self

    def condition(self, ctype: str, status: bool | str, message: str = "", reason: str = "") -> Self:
        self._conditions[ctype] = _condition(ctype, status, reason or ctype, message)
        return self

    def health(self, state: str) -> Self:
        return self.label(api.HEALTH_LABEL, state)

    def unschedulable(self, value: bool = True) -> Self:
        self._unschedulable = value
        return self

    def build(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self._name, "labels": dict(self._labels),
                         "uid": f"uid-{self._name}", "resourceVersion": "1"},
            "spec": {},
            "status": {
                "allocatable": dict(self._allocatable),
                "capacity": dict(self._allocatable),
                "conditions": copy.deepcopy(list(self._conditions.values())),
            },
        }
        if self._unschedulable:
            body["spec"]["unschedulable"] = True
        return body

    def info(self) -> nodes.NodeInfo:
        return nodes.NodeInfo.from_manifest(self.build())


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def node_list(*builders: NodeBuilder) -> dict[str, Any]:
    """A v1 NodeList, as ``kubectl get nodes -o yaml`` prints it."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
            "items": [b.build() for b in builders]}


def _condition(ctype: str, status: bool | str, reason: str, message: str) -> dict[str, str]:
    text = status if isinstance(status, str) else ("True" if status else "False")
    return {"type": ctype, "status": text, "reason": reason, "message": message,
            "lastHeartbeatTime": HEARTBEAT, "lastTransitionTime": HEARTBEAT}


class PodBuilder:
    def __init__(self, name: str, namespace: str) -> None:
        self._meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                                      "labels": {}, "annotations": {}}
        self._containers: list[dict[str, Any]] = [{"name": "main", "image": "trainer:1", "resources": {}}]
        self._init: list[dict[str, Any]] = []
        self._spec: dict[str, Any] = {"schedulerName": "default-scheduler"}
        self._phase = "Pending"
        self._container_states: list[dict[str, Any]] = []

    def gpus(self, count: int, resource: str = GPU, limit_only: bool = False) -> Self:
        key = "limits" if limit_only else "requests"
        res = self._containers[0]["resources"]
        res.setdefault(key, {})[resource] = str(count)
        if not limit_only:
            res.setdefault("limits", {})[resource] = str(count)
        return self

    def container(self, gpus: int, resource: str = GPU) -> Self:
        self._containers.append({"name": f"c{len(self._containers)}", "image": "trainer:1",
                                 "resources": {"requests": {resource: str(gpus), "cpu": "1"}}})
        return self

    def init_container(self, gpus: int, resource: str = GPU, sidecar: bool = False) -> Self:
        c: dict[str, Any] = {"name": f"init{len(self._init)}", "image": "setup:1",
                             "resources": {"requests": {resource: str(gpus)}}}
        if sidecar:
            c["restartPolicy"] = "Always"
        self._init.append(c)
        return self

    def on(self, node: str) -> Self:
        self._spec["nodeName"] = node
        if self._phase == "Pending":
            self._phase = "Running"
        return self

    def phase(self, phase: str) -> Self:
        self._phase = phase
        return self

    def terminating(self, containers_done: bool = False) -> Self:
        self._meta["deletionTimestamp"] = HEARTBEAT
        state = {"terminated": {"exitCode": 0}} if containers_done else {"running": {}}
        self._container_states = [{"name": c["name"], "state": state} for c in self._containers]
        return self

    def grace(self, seconds: int) -> Self:
        """``spec.terminationGracePeriodSeconds``."""
        self._spec["terminationGracePeriodSeconds"] = seconds
        return self

    def priority(self, value: int) -> Self:
        """``spec.priority``, as the API server sets it from the pod's PriorityClass."""
        self._spec["priority"] = value
        return self

    def label(self, key: str, value: str) -> Self:
        self._meta["labels"][key] = value
        return self

    def annotate(self, key: str, value: str) -> Self:
        self._meta["annotations"][key] = value
        return self

    def gang(self, name: str, size: int | None = None) -> Self:
        self.label("fabricsched.io/gang", name)
        return self.annotate("fabricsched.io/gang-size", str(size)) if size is not None else self

    def job(self, name: str, uid: str, index: int | None = None) -> Self:
        self.label("batch.kubernetes.io/job-name", name)
        self._meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
                                          "controller": True, "blockOwnerDeletion": True}]
        if index is not None:
            self.label("batch.kubernetes.io/job-completion-index", str(index))
        return self

    def scheduler(self, name: str) -> Self:
        self._spec["schedulerName"] = name
        return self

    def spec_field(self, key: str, value: Any) -> Self:
        """Any other ``spec`` field as given (``priority``, ``nodeSelector``, ``affinity``)."""
        self._spec[key] = copy.deepcopy(value)
        return self

    def build(self) -> dict[str, Any]:
        spec = {**self._spec, "containers": copy.deepcopy(self._containers)}
        if self._init:
            spec["initContainers"] = copy.deepcopy(self._init)
        status: dict[str, Any] = {"phase": self._phase}
        if self._container_states:
            status["containerStatuses"] = copy.deepcopy(self._container_states)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": copy.deepcopy(self._meta), "spec": spec,
                "status": status}

    def usage(self) -> nodes.PodUsage:
        return nodes.PodUsage.from_manifest(self.build())


def make_pod(name: str, namespace: str = "default") -> PodBuilder:
    return PodBuilder(name, namespace)


def make_topology(
    tiers: Sequence[tuple[str, str] | tuple[str, str, float]],
    **spec: Any,
) -> api.FabricTopologySpec:
    """A FabricTopologySpec: ``tiers`` as (name, nodeLabel[, oversubscription]), lowest first;
    other fields by their wire (camelCase) or Python names."""
    rows = [{"name": t[0], "nodeLabel": t[1], **({"oversubscription": t[2]} if len(t) > 2 else {})}
            for t in tiers]
    return api.FabricTopologySpec.model_validate({"tiers": rows, **spec})


def topograph_tiers(count: int = 2) -> list[tuple[str, str]]:
    names = ["leaf", "spine", "core"]
    return [(names[i], TOPOGRAPH.format(i)) for i in range(count)]

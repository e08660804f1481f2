"""The extender behind a real kube-scheduler: Indexed Jobs with ``schedulerName: fabricsched``.

A cluster of its own (the session cluster has only the default scheduler): the local control
plane plus the second kube-scheduler from the shipped template, ``fabricsched run`` as a
subprocess, 16 nodes of 8 GPUs in 2 spines x 2 leaves x 4 hosts. kwok plays the kubelets
(bound pods go Running), and every test removes its pods at the end so the next one starts
on an empty fabric.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from clusterkit import find_binaries_or_skip, new_namespace, stop_process
from waiting import wait_for

from fabricsched.cluster import commands, controlplane, kwok, nodes, processes, rest, samples

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = "ib-test"
GPU = "nvidia.com/gpu"
PLACEMENTS = "/apis/fabricsched.io/v1alpha1/namespaces/{ns}/fabricplacements"
TOPOLOGIES = "/apis/fabricsched.io/v1alpha1/fabrictopologies"


def trainer_spec(gpus: int) -> dict[str, Any]:
    """The pod spec of one training rank, scheduled by fabricsched."""
    return {
        "schedulerName": "fabricsched",
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "train",
                "image": "trainer:1",
                "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}},
            }
        ],
    }


class Operator:
    """``fabricsched run`` as a subprocess, restartable (the SIGKILL test kills it)."""

    def __init__(
        self, kubeconfig: Path, log_dir: Path, extender_port: int, health_port: int, args: Sequence[str] = ()
    ) -> None:
        self.kubeconfig = kubeconfig
        self.args = list(args)
        self.log_dir = log_dir
        self.extender_port, self.health_port = extender_port, health_port
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = itertools.count(1)

    @property
    def extender_url(self) -> str:
        return f"http://127.0.0.1:{self.extender_port}"

    def start(self) -> None:
        path = self.log_dir / f"fabricsched-run-{next(self.starts)}.log"
        with path.open("wb") as log:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "fabricsched.cli",
                    "run",
                    f"--kubeconfig={self.kubeconfig}",
                    f"--extender-address=127.0.0.1:{self.extender_port}",
                    f"--health-address=127.0.0.1:{self.health_port}",
                    *self.args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        wait_for("fabricsched run ready", self._ready, timeout=60)

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            pytest.fail(f"fabricsched run exited: {self.log_tail()}", pytrace=False)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as r:
                ready = r.status == 200
            with urllib.request.urlopen(f"{self.extender_url}/openapi.json", timeout=2) as r:
                return ready and r.status == 200
        except OSError:
            return False

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)

    def log_tail(self) -> str:
        logs = sorted(self.log_dir.glob("fabricsched-run-*.log"))
        return processes.log_tail(logs[-1], 40) if logs else ""


class Fabric:
    """The module's cluster: API client, node layout, the operator."""

    def __init__(
        self,
        plane: controlplane.ControlPlane,
        api: rest.Client,
        operator: Operator,
        leaf_of: dict[str, str],
        spine_of: dict[str, str],
    ) -> None:
        self.plane, self.api, self.operator = plane, api, operator
        self.leaf_of, self.spine_of = leaf_of, spine_of

    def namespace(self) -> str:
        return new_namespace(self.api, "x")

    def job(
        self,
        namespace: str,
        name: str,
        pods: int,
        gpus: int = 8,
        annotations: dict[str, str] | None = None,
        placement: dict[str, Any] | None = None,
    ) -> None:
        """An Indexed Job; ``placement`` is merged into the pod spec (nodeSelector, affinity)."""
        spec = {**trainer_spec(gpus), **(placement or {})}
        template = {"metadata": {"annotations": annotations or {}}, "spec": spec}
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "parallelism": pods,
                "completions": pods,
                "completionMode": "Indexed",
                "backoffLimit": 0,
                "template": template,
            },
        }
        self.api.call("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body)

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api.call("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
        return items

    def placed(self, namespace: str, job: str, pods: int) -> list[str]:
        """Nodes of the Job's pods by rank, once all are bound; marks them Running."""

        def bound() -> list[str] | None:
            found = {
                int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): p
                for p in self.pods(namespace)
                if p["metadata"]["labels"].get("job-name") == job
            }
            if len(found) < pods or not all(p["spec"].get("nodeName") for p in found.values()):
                return None
            for p in found.values():
                if p["status"].get("phase") == "Pending":
                    kwok.finish(self.api, namespace, p["metadata"]["name"], "Running")
            return [found[r]["spec"]["nodeName"] for r in range(pods)]

        result: list[str] = wait_for(f"{pods} pods of {namespace}/{job} bound", bound, timeout=60)
        return result

    def placement(self, namespace: str, name: str) -> dict[str, Any] | None:
        status, body = self.api.request("GET", PLACEMENTS.format(ns=namespace) + f"/{name}")
        return body if status == 200 else None

    def topology_status(self) -> dict[str, Any]:
        found: dict[str, Any] = self.api.call("GET", f"{TOPOLOGIES}/{TOPOLOGY}").get("status") or {}
        return found

    def settled(self) -> bool:
        """Every GPU free, none reserved, every element healthy: what the topology's status
        shows once the extender has let go of the last test's gangs (it counts reserved GPUs
        as taken) and the operator has applied the last health change."""
        status = self.topology_status()
        gpus = status.get("gpus") or {}
        return bool(gpus.get("total")) and gpus.get("free") == gpus["total"] and not status.get("degraded")

    def unhealthy(self, kind: str, name: str) -> bool:
        """The topology's status lists the node (kind node) or domain (kind domain): the state
        the extender decides on has the change (the status is computed from that state)."""
        key = "node" if kind == "node" else "domain"
        records = self.topology_status().get("degraded", [])
        return any(r.get("kind") == kind and r.get(key) == name for r in records)

    def label_health(self, node: str, state: str | None) -> None:
        patch = {"metadata": {"labels": {"fabricsched.io/fabric-health": state}}}
        self.api.call("PATCH", f"/api/v1/nodes/{node}", patch, rest.MERGE_PATCH)

    def set_links(self, links: list[dict[str, Any]]) -> None:
        path = f"/apis/fabricsched.io/v1alpha1/fabrictopologies/{TOPOLOGY}"
        self.api.call("PATCH", path, {"spec": {"links": links}}, rest.MERGE_PATCH)

    def clean(self, namespace: str) -> None:
        self.api.request(
            "DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs", {"propagationPolicy": "Background"}
        )
        for pod in self.pods(namespace):
            kwok.delete_now(self.api, namespace, pod["metadata"]["name"])
        self.api.request("DELETE", f"/api/v1/namespaces/{namespace}")


@contextlib.contextmanager
def fabric_cluster(root: Path, operator_args: Sequence[str] = ()) -> Iterator[Fabric]:
    """The control plane with fabricsched's scheduler, the CRDs, 16 kwok hosts, the topology and
    ``fabricsched run`` (with ``operator_args``)."""
    find_binaries_or_skip()
    # The extender's port is chosen first: the scheduler's configuration names it.
    extender_port, health_port = processes.free_ports(2)
    scheduler = commands.fabricsched_scheduler(f"http://127.0.0.1:{extender_port}")
    plane = controlplane.up(root / "cluster", extra_schedulers=[scheduler])
    api = plane.client()
    operator = Operator(plane.kubeconfig, root, extender_port, health_port, operator_args)
    try:
        subprocess.run(
            [
                str(plane.binaries.kubectl),
                f"--kubeconfig={plane.kubeconfig}",
                "apply",
                "--server-side",
                "-f",
                str(REPO / "crds"),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        for crd in ("fabrictopologies", "fabricplacements"):
            wait_for(
                f"CRD {crd}",
                lambda crd=crd: api.request("GET", f"/apis/fabricsched.io/v1alpha1/{crd}")[0] == 200,
            )
        manifests = samples.sample_fabric(spines=2, leaves_per_spine=2, hosts_per_leaf=4, gpus=8)
        nodes.create(api, manifests, datetime.datetime.now(datetime.UTC))
        topology = samples.demo_topology(TOPOLOGY)
        topology["spec"]["links"] = []
        topology["spec"]["health"] = {"recoverAfterSeconds": 0}
        api.call("POST", "/apis/fabricsched.io/v1alpha1/fabrictopologies", topology)
        leaf_of = {m["metadata"]["name"]: m["metadata"]["labels"][samples.TOPOGRAPH.leaf] for m in manifests}
        spine_of = {
            m["metadata"]["name"]: m["metadata"]["labels"][samples.TOPOGRAPH.spine] for m in manifests
        }
        operator.start()
        yield Fabric(plane, api, operator, leaf_of, spine_of)
    finally:
        operator.stop()
        api.close()
        plane.down()


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    with fabric_cluster(tmp_path_factory.mktemp("extender-cluster")) as cluster:
        yield cluster


@pytest.fixture
def ns(fabric: Fabric) -> Iterator[str]:
    name = fabric.namespace()
    yield name
    fabric.clean(name)
    # The next test starts with every GPU free, no reservation left and a healthy fabric.
    wait_for("pods gone", lambda: not fabric.pods(name), timeout=60)
    wait_for("every GPU free and healthy in the topology's status", fabric.settled, timeout=60)


def leaf_changes(fabric: Fabric, placed: list[str]) -> int:
    return sum(1 for a, b in itertools.pairwise(placed) if fabric.leaf_of[a] != fabric.leaf_of[b])


def test_a_gang_that_fits_one_leaf_lands_in_one_leaf(fabric: Fabric, ns: str) -> None:
    fabric.job(ns, "a", pods=4)
    placed = fabric.placed(ns, "a", 4)
    assert len({fabric.leaf_of[n] for n in placed}) == 1 and len(set(placed)) == 4
    placement = wait_for(
        "FabricPlacement a Bound",
        lambda: (
            p if (p := fabric.placement(ns, "a")) and p.get("status", {}).get("phase") == "Bound" else None
        ),
    )
    assert [r["node"] for r in placement["spec"]["ranks"]] == placed
    assert placement["metadata"]["ownerReferences"][0]["kind"] == "Job"


def test_a_two_leaf_gang_stays_under_one_spine_and_off_a_leaf_with_degraded_uplinks(
    fabric: Fabric,
    ns: str,
) -> None:
    degraded = sorted(set(fabric.leaf_of.values()))[0]
    fabric.set_links(
        [
            {
                "tier": "leaf",
                "domain": degraded,
                "state": "degraded",
                "capacity": 0.25,
                "reason": "4 of 16 uplinks flapping",
            }
        ]
    )
    try:
        wait_for(f"leaf {degraded} degraded in the topology's status",
                 lambda: fabric.unhealthy("domain", degraded))
        fabric.job(ns, "wide", pods=6)
        placed = fabric.placed(ns, "wide", 6)
    finally:
        fabric.set_links([])
    leaves = {fabric.leaf_of[n] for n in placed}
    assert len(leaves) == 2 and degraded not in leaves
    assert len({fabric.spine_of[n] for n in placed}) == 1
    # Ranks follow the fabric: one leaf, then the other.
    assert leaf_changes(fabric, placed) == 1


def test_a_single_pod_job_goes_to_a_host_with_a_degraded_link(fabric: Fabric, ns: str) -> None:
    host = sorted(fabric.leaf_of)[5]
    fabric.label_health(host, "degraded")
    try:
        wait_for(f"host {host} degraded in the topology's status", lambda: fabric.unhealthy("node", host))
        fabric.job(ns, "solo", pods=1, gpus=2)
        assert fabric.placed(ns, "solo", 1) == [host]
    finally:
        fabric.label_health(host, None)


def test_a_required_tier_gang_that_cannot_fit_stays_pending_with_an_event_naming_the_tier(
    fabric: Fabric,
    ns: str,
) -> None:
    fabric.job(ns, "huge", pods=5, annotations={"fabricsched.io/required-tier": "leaf"})

    def event() -> dict[str, Any] | None:
        items = fabric.api.call("GET", f"/api/v1/namespaces/{ns}/events")["items"]
        return next((e for e in items if e["reason"] == "FabricTierUnsatisfiable"), None)

    found = wait_for("an Event saying the leaf tier cannot be met", event, timeout=60)
    assert "leaf" in found["message"] and found["involvedObject"]["kind"] == "Pod"

    def all_unschedulable() -> list[dict[str, Any]] | None:
        # The scheduler's own verdict on every pod of the gang, not a moment of not being bound.
        pods = fabric.pods(ns)
        conditions = [c for p in pods for c in p["status"].get("conditions") or ()]
        verdicts = [c for c in conditions if c["type"] == "PodScheduled"]
        done = len(pods) == 5 and len(verdicts) == 5
        return pods if done and all(c["reason"] == "Unschedulable" for c in verdicts) else None

    pods = wait_for("every pod of the gang marked Unschedulable", all_unschedulable, timeout=60)
    assert all(not p["spec"].get("nodeName") for p in pods)


def test_no_reservation_is_lost_over_a_sigkill_and_a_host_degraded_meanwhile_is_avoided(
    fabric: Fabric,
    ns: str,
) -> None:
    # Gang a: 4 ranks, all 4 pods exist (a gang is planned only then), but ranks 2 and 3 carry
    # a scheduling gate: they stay unscheduled, so their ranks stay reserved.
    gate = "example.com/held"

    def gang_pod(rank: int) -> dict[str, Any]:
        spec = trainer_spec(8)
        if rank >= 2:
            spec["schedulingGates"] = [{"name": gate}]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"a-{rank}",
                "labels": {"fabricsched.io/gang": "a"},
                "annotations": {"fabricsched.io/gang-size": "4", "fabricsched.io/rank": str(rank)},
            },
            "spec": spec,
        }

    for rank in (2, 3, 0, 1):
        fabric.api.call("POST", f"/api/v1/namespaces/{ns}/pods", gang_pod(rank))
    placement = wait_for(
        "gang a planned with 2 bound ranks",
        lambda: (
            p
            if (p := fabric.placement(ns, "a")) and len(p.get("status", {}).get("boundRanks", [])) == 2
            else None
        ),
    )
    planned = [r["node"] for r in placement["spec"]["ranks"]]
    reserved = planned[2:]

    fabric.operator.kill()
    home = fabric.leaf_of[planned[0]]
    others = sorted(n for n, leaf in fabric.leaf_of.items() if leaf != home)
    degraded = others[0]
    fabric.label_health(degraded, "degraded")
    try:
        fabric.operator.start()
        fabric.job(ns, "b", pods=2)
        placed_b = fabric.placed(ns, "b", 2)
        assert not set(placed_b) & set(planned), (placed_b, planned)
        assert degraded not in placed_b
        # The reserved ranks are still waiting on their nodes for gang a's last pods: ungate them.
        for rank in (2, 3):
            fabric.api.call("PATCH", f"/api/v1/namespaces/{ns}/pods/a-{rank}",
                            {"spec": {"schedulingGates": None}}, "application/merge-patch+json")

        def late() -> list[str] | None:
            pods = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in fabric.pods(ns)}
            got = [pods.get("a-2"), pods.get("a-3")]
            return [n for n in got if n] if all(got) else None

        assert wait_for("gang a's last ranks bound", late, timeout=60) == reserved
    finally:
        fabric.label_health(degraded, None)
    print(json.dumps({"planned": planned, "b": placed_b}))


def test_a_gang_held_for_locality_waits_with_an_event_then_lands_in_one_leaf(fabric: Fabric, ns: str) -> None:
    """``block`` runs split 2 + 2 over the two leaves of one spine; ``g`` (4 ranks, that spine
    only, locality-wait 600s) could only split the same way next to its traffic (1.33x against
    a floor of 1.00x), so it waits; when ``block`` is gone it lands in one leaf."""
    spine = sorted(set(fabric.spine_of.values()))[0]
    leaves = sorted({fabric.leaf_of[n] for n, s in fabric.spine_of.items() if s == spine})
    hosts = {leaf: sorted(n for n, at in fabric.leaf_of.items() if at == leaf) for leaf in leaves}
    blocking = hosts[leaves[0]][:2] + hosts[leaves[1]][:2]
    only = {"key": "kubernetes.io/hostname", "operator": "In", "values": blocking}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [only]}]}}}
    fabric.job(ns, "block", pods=4, placement={"affinity": affinity})
    assert sorted(fabric.placed(ns, "block", 4)) == sorted(blocking)

    fabric.job(
        ns, "g", pods=4, annotations={"fabricsched.io/locality-wait": "600s"},
        placement={"nodeSelector": {samples.TOPOGRAPH.spine: spine}},
    )

    def waiting() -> dict[str, Any] | None:
        items = fabric.api.call("GET", f"/api/v1/namespaces/{ns}/events")["items"]
        return next((e for e in items if e["reason"] == "FabricWaitingForLocality"), None)

    event = wait_for("an Event saying gang g waits for locality", waiting, timeout=60)
    assert "within 5% of its floor 1.00x: best now 1.33x" in event["message"], event["message"]
    # A held gang holds nothing: its FabricPlacement is Pending, no ranks, the hold as its reason.
    # The status follows the object's creation (a second request): wait for both.
    pending = wait_for("g Pending", lambda: p if (p := fabric.placement(ns, "g")) and "status" in p else None,
                       timeout=10)
    assert pending["status"]["phase"] == "Pending" and pending["spec"]["ranks"] == []
    reserved = next(c for c in pending["status"]["conditions"] if c["type"] == "Reserved")
    assert reserved["reason"] == "HeldForLocality" and "best now 1.33x" in reserved["message"]
    held = [p for p in fabric.pods(ns) if p["metadata"]["name"].startswith("g-")]
    assert held and not any(p["spec"].get("nodeName") for p in held)

    # The blocking gang ends. The kube-scheduler drops finished pods from its view at once (a
    # cluster event: it retries the held pods), while the extender keeps the gang's ranks for
    # replacement pods until its Job completes: the retry still waits. The Job's completion is
    # no scheduler event, so the next retry comes with the next cluster event, or at the latest
    # after podMaxInUnschedulablePodsDuration (5 min): a node label stands for that event here.
    for pod in fabric.pods(ns):
        if pod["metadata"]["name"].startswith("block-"):
            kwok.finish(fabric.api, ns, pod["metadata"]["name"], "Succeeded")
    wait_for(
        "gang block released",
        lambda: (p := fabric.placement(ns, "block")) is not None
        and p.get("status", {}).get("phase") == "Released",
        timeout=60,
    )
    nudged = hosts[leaves[0]][0]
    patch = {"metadata": {"labels": {"fabricsched.test/nudge": "1"}}}
    fabric.api.call("PATCH", f"/api/v1/nodes/{nudged}", patch, rest.MERGE_PATCH)
    try:
        placed = fabric.placed(ns, "g", 4)
    finally:
        patch = {"metadata": {"labels": {"fabricsched.test/nudge": None}}}
        fabric.api.call("PATCH", f"/api/v1/nodes/{nudged}", patch, rest.MERGE_PATCH)
    assert len({fabric.leaf_of[n] for n in placed}) == 1, placed
    # The status follows the object's creation in the background: wait for it, then read it.
    wait_for(
        "gang g's placement status",
        lambda: "status" in ((p := fabric.placement(ns, "g")) or {}) and p is not None,
        timeout=30,
    )
    planned = fabric.placement(ns, "g")
    assert planned is not None and planned["status"]["commSlowdown"] == 1.0

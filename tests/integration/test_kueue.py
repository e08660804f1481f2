"""Kueue decides whether a JobSet starts, fabricsched where its pods go (real Kueue, real JobSet
controller, the fabricsched scheduler over the sample fabric of 16 hosts of 8 GPUs, 4 per leaf).

The demo's Kueue act (kueuedemo.py, run by `make demo-kueue`): a ClusterQueue of 32 GPUs (one
leaf) admits one 4 x 8-GPU JobSet at a time: the first is admitted and placed in one leaf, the
second stays suspended with no pod and no FabricPlacement until the first finishes (its pods are
marked Succeeded through kwok), then is placed in turn.
A JobSet of a higher WorkloadPriorityClass makes Kueue evict the running one: its
FabricPlacement is released and its GPUs free as soon as its pods are gone.

fabricsched's own preemption leaves a Kueue-admitted JobSet alone (its pods carry Kueue's
``kueue.x-k8s.io/local-queue-name``): an urgent gang (a PriorityClass of 1000, no queue) with the
rest of the fabric taken at its own priority waits, and says why on its Pending FabricPlacement
(reason ``PreemptionBlocked``); its pods show only the kube-scheduler's "Insufficient
nvidia.com/gpu", the extender never being asked while every GPU is taken.

The module's operator serves the namespace opt-in webhook (registered as ``cluster up`` does):
in a labelled namespace, Kueue's JobSet webhook suspends a JobSet whose template names no
scheduler, and fabricsched's pod webhook names fabricsched on the pods made once Kueue admits
it; the pods carry both (the scheduler name, Kueue's queue label) and land as one gang.
Kueue's own pod webhooks (its plain-pod integration) are not registered here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import harness
import kueuedemo
import kueuekit
import pytest
from controllerkit import Controller
from harness import Fabric, trainer_spec
from waiting import holds_for, wait_for

from fabricsched.api import admission
from fabricsched.cluster import jobset, kwok, rest

pytestmark = pytest.mark.integration

JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
PLACEMENTS = "/apis/fabricsched.io/v1alpha1/namespaces/{ns}/fabricplacements"
PRIORITIES = "/apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses"
RANKS, GPUS = 4, 8


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    """The usual sample fabric, its operator serving the namespace opt-in webhook too."""
    root = tmp_path_factory.mktemp("kueue-cluster")
    with harness.fabric_cluster(root, kind=Fabric, webhook=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def jobset_controller_here(fabric: Fabric) -> Iterator[jobset.Controller]:
    controller = jobset.start(fabric.plane)
    try:
        yield controller
    finally:
        controller.stop()


@pytest.fixture(scope="module")
def kueue(fabric: Fabric, jobset_controller_here: jobset.Controller) -> Iterator[Controller]:
    """Kueue against this module's cluster; started after the JobSet controller."""
    controller = kueuekit.start(fabric.plane)
    try:
        yield controller
    finally:
        controller.stop()


@pytest.fixture
def queue(fabric: Fabric, ns: str, kueue: Controller) -> Iterator[str]:
    name = kueuekit.queues(fabric.api, ns, gpus=RANKS * GPUS)
    yield name
    kueuekit.delete_queues(fabric.api, ns)


def submit(fabric: Fabric, ns: str, name: str, queue: str, priority: str | None = None,
           spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JobSet as the API server stored it (after the admission webhooks)."""
    labels = {kueuekit.QUEUE_LABEL: queue}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    job = {"parallelism": RANKS, "completions": RANKS, "completionMode": "Indexed", "backoffLimit": 0,
           "template": {"spec": spec or trainer_spec(GPUS)}}
    created: dict[str, Any] = fabric.api.call("POST", JOBSETS.format(ns=ns), {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": job}}]}})
    return created


def suspended(fabric: Fabric, ns: str, name: str) -> bool:
    return bool(fabric.api.call("GET", JOBSETS.format(ns=ns) + f"/{name}")["spec"].get("suspend"))


def pods_of(fabric: Fabric, ns: str, name: str) -> list[dict[str, Any]]:
    return [p for p in fabric.pods(ns)
            if (p["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/jobset-name") == name
            and not p["metadata"].get("deletionTimestamp")]


def placed(fabric: Fabric, ns: str, name: str) -> list[str]:
    """Nodes of the JobSet's pods by completion index once all are bound (marked Running)."""
    def ready() -> list[str] | None:
        found = {int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): p
                 for p in pods_of(fabric, ns, name)}
        if len(found) < RANKS or not all(p["spec"].get("nodeName") for p in found.values()):
            return None
        for pod in found.values():
            if pod["status"].get("phase") == "Pending":
                kwok.finish(fabric.api, ns, pod["metadata"]["name"], "Running")
        return [found[r]["spec"]["nodeName"] for r in range(RANKS)]

    nodes: list[str] = wait_for(f"{RANKS} pods of JobSet {ns}/{name} bound", ready, timeout=90)
    return nodes


def placement_phase(fabric: Fabric, ns: str, name: str) -> str | None:
    status, body = fabric.api.request("GET", PLACEMENTS.format(ns=ns) + f"/{name}")
    return str((body.get("status") or {}).get("phase")) if status == 200 else None


def one_gang_in_one_leaf(fabric: Fabric, ns: str, name: str, nodes: list[str]) -> None:
    assert len(set(nodes)) == RANKS  # one 8-GPU rank per 8-GPU host: none over its GPUs
    assert len({fabric.leaf_of[n] for n in nodes}) == 1
    wait_for(f"FabricPlacement {name} Bound", lambda: placement_phase(fabric, ns, name) == "Bound",
             timeout=30)
    ranks = fabric.api.call("GET", PLACEMENTS.format(ns=ns) + f"/{name}")["spec"]["ranks"]
    assert [r["node"] for r in ranks] == nodes


def free_gpus(fabric: Fabric) -> int:
    return int((fabric.topology_status().get("gpus") or {}).get("free", -1))


def test_a_queue_admitting_one_jobset_at_a_time_and_fabricsched_placing_each(
    fabric: Fabric, ns: str, queue: str,
) -> None:
    """The demo's Kueue act (``make demo-kueue``) as it runs there, checked against the cluster."""
    said: list[str] = []
    act = kueuedemo.run(fabric.api, ns, queue, harness.TOPOLOGY, say=said.append, hold=5.0)
    assert said == act.lines

    # While the first ran, the second was Kueue's alone: suspended, no quota, no pod, no plan.
    assert act.queued is not None
    assert act.queued.suspended and act.queued.workload
    assert act.queued.quota.startswith("False: ") and "insufficient" in act.queued.quota, act.queued
    assert (act.queued.pods, act.queued.bound, act.queued.placement) == (0, 0, None)
    first_nodes = [r["node"] for r in sorted(act.first["spec"]["ranks"], key=lambda r: r["rank"])]
    assert len(first_nodes) == RANKS and len({fabric.leaf_of[n] for n in first_nodes}) == 1

    # Then the second, placed by fabricsched as one gang, its pods on its plan's nodes.
    second = placed(fabric, ns, kueuedemo.SECOND)
    one_gang_in_one_leaf(fabric, ns, kueuedemo.SECOND, second)
    assert [r["node"] for r in sorted(act.second["spec"]["ranks"], key=lambda r: r["rank"])] == second
    assert act.first_after in (None, "Released")
    assert not suspended(fabric, ns, kueuedemo.SECOND)

    # What the demo prints, in this order: the first placed (its leaf, ranks, nodes), the
    # second queued, the first finished, the second placed.
    text = "\n".join(said)
    order = [text.index(f"Kueue admitted {kueuedemo.FIRST}; fabricsched placed it"),
             text.index(f"JobSet {ns}/{kueuedemo.SECOND} waits in the queue"),
             text.index(f"{kueuedemo.FIRST} finishes"),
             text.index(f"Kueue admitted {kueuedemo.SECOND} once")]
    assert order == sorted(order)
    rows = [line.split() for line in said if line.startswith(f"{kueuedemo.FIRST} ")]
    assert [row[3] for row in rows] == first_nodes  # JOBSET RANK POD NODE LEAF ...
    assert {row[4] for row in rows} == {fabric.leaf_of[first_nodes[0]]}
    assert "  pods: 0 (0 bound); FabricPlacement: none" in said


def test_a_jobset_kueue_evicts_releases_its_placement_and_gpus_at_once(
    fabric: Fabric, ns: str, queue: str,
) -> None:
    priorities = {f"low-{ns}": 10, f"high-{ns}": 1000}
    for name, value in priorities.items():
        fabric.api.call("POST", PRIORITIES, {"apiVersion": "kueue.x-k8s.io/v1beta2",
                                             "kind": "WorkloadPriorityClass",
                                             "metadata": {"name": name}, "value": value})
    try:
        total = int(fabric.topology_status()["gpus"]["total"])
        submit(fabric, ns, "low", queue, priority=f"low-{ns}")
        low = placed(fabric, ns, "low")
        one_gang_in_one_leaf(fabric, ns, "low", low)
        wait_for("low's GPUs taken in the topology's status",
                 lambda: free_gpus(fabric) == total - RANKS * GPUS, timeout=30)

        submit(fabric, ns, "high", queue, priority=f"high-{ns}")
        wait_for("low evicted (suspended by Kueue)", lambda: suspended(fabric, ns, "low"), timeout=60)
        wait_for("low's pods gone", lambda: not pods_of(fabric, ns, "low"), timeout=60)
        gone = time.monotonic()
        wait_for("low's FabricPlacement released",
                 lambda: placement_phase(fabric, ns, "low") in (None, "Released"), timeout=10)
        released_after = time.monotonic() - gone
        assert released_after < 5, f"released {released_after:.1f} s after the pods went"
        high = placed(fabric, ns, "high")
        one_gang_in_one_leaf(fabric, ns, "high", high)
        # The evicted gang holds nothing: only high's GPUs are taken.
        wait_for("only high's GPUs taken", lambda: free_gpus(fabric) == total - RANKS * GPUS, timeout=30)
        assert suspended(fabric, ns, "low") and not pods_of(fabric, ns, "low")
    finally:
        for kind in ("low", "high"):
            fabric.api.request("DELETE", JOBSETS.format(ns=ns) + f"/{kind}")
        for name in priorities:
            fabric.api.request("DELETE", f"{PRIORITIES}/{name}")


PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


def test_fabricscheds_preemption_leaves_a_kueue_admitted_jobset_alone(
    fabric: Fabric, ns: str, queue: str,
) -> None:
    urgent = f"urgent-{ns}"
    fabric.api.call("POST", PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                               "metadata": {"name": urgent}, "value": 1000})
    try:
        submit(fabric, ns, "admitted", queue)  # priority 0, admitted by Kueue
        admitted = placed(fabric, ns, "admitted")
        one_gang_in_one_leaf(fabric, ns, "admitted", admitted)
        kept = {p["metadata"]["uid"] for p in pods_of(fabric, ns, "admitted")}
        # Kueue v0.17 labels the pods of a workload it admitted with their LocalQueue.
        assert all((p["metadata"].get("labels") or {}).get("kueue.x-k8s.io/local-queue-name") == queue
                   for p in pods_of(fabric, ns, "admitted"))
        # The other three leaves taken at the urgent priority (no queue: Kueue ignores them).
        for name in ("fill-a", "fill-b", "fill-c"):
            fabric.job(ns, name, RANKS, placement={"priorityClassName": urgent})
            fabric.placed(ns, name, RANKS)
        # An urgent gang fits nowhere; the only lower-priority workload is Kueue's.
        fabric.job(ns, "urgent", RANKS, placement={"priorityClassName": urgent})

        def blocked() -> str | None:
            found = fabric.placement(ns, "urgent")
            for condition in ((found or {}).get("status") or {}).get("conditions") or ():
                if condition.get("reason") == "PreemptionBlocked":
                    return str(condition.get("message"))
            return None
        message = wait_for("urgent's FabricPlacement PreemptionBlocked", blocked, timeout=30)
        assert "only protected victims: 1 lower-priority workloads are protected (1 managed by Kueue)" \
            in message, message

        def untouched() -> bool:
            live = pods_of(fabric, ns, "admitted")
            urgent_pods = [p for p in fabric.pods(ns)
                           if (p["metadata"].get("labels") or {}).get("job-name") == "urgent"]
            return ({p["metadata"]["uid"] for p in live} == kept
                    and all(p["status"].get("phase") == "Running" for p in live)
                    and not any(p["spec"].get("nodeName") for p in urgent_pods))
        holds_for("Kueue's pods running, the urgent gang unbound", untouched, seconds=5)
        assert placement_phase(fabric, ns, "admitted") == "Bound"
        # The reason is on the FabricPlacement only: with every GPU taken the kube-scheduler's
        # own resource filter rejects each node before the extender is asked, so the pods
        # show just that.
        pod = next(p for p in fabric.pods(ns)
                   if (p["metadata"].get("labels") or {}).get("job-name") == "urgent")
        scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
        assert "Insufficient nvidia.com/gpu" in scheduled["message"] and "Kueue" not in scheduled["message"]
    finally:
        fabric.api.request("DELETE", JOBSETS.format(ns=ns) + "/admitted")
        fabric.api.request("DELETE", f"{PRIORITY_CLASSES}/{urgent}")


def test_the_opt_in_webhook_and_kueues_webhooks_act_on_the_same_jobset_and_its_pods(
    fabric: Fabric, ns: str, queue: str,
) -> None:
    opt_in = {"metadata": {"labels": {admission.NAMESPACE_LABEL: admission.NAMESPACE_LABEL_VALUE}}}
    fabric.api.call("PATCH", f"/api/v1/namespaces/{ns}", opt_in, rest.MERGE_PATCH)
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
             "spec": {k: v for k, v in trainer_spec(GPUS).items() if k != "schedulerName"}}

    def webhook_on() -> bool:  # the API server picks the namespace label up from its informer
        created = fabric.api.call("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", probe)
        return bool(created["spec"].get("schedulerName") == "fabricsched")
    wait_for("the opt-in webhook names fabricsched on a dry-run GPU pod", webhook_on, timeout=30)

    # A template naming no scheduler: Kueue's JobSet webhook suspends the JobSet at creation,
    # its controller unsuspends it once admitted; fabricsched's pod webhook names the scheduler
    # on each pod the Job controller then makes.
    unnamed = {k: v for k, v in trainer_spec(GPUS).items() if k != "schedulerName"}
    stored = submit(fabric, ns, "optin", queue, spec=unnamed)
    assert stored["spec"].get("suspend") is True  # Kueue's webhook
    nodes = placed(fabric, ns, "optin")
    one_gang_in_one_leaf(fabric, ns, "optin", nodes)
    for pod in pods_of(fabric, ns, "optin"):
        assert pod["spec"]["schedulerName"] == "fabricsched"  # fabricsched's webhook
        assert pod["metadata"]["labels"].get("kueue.x-k8s.io/local-queue-name") == queue  # Kueue's
    template = fabric.api.call("GET", JOBSETS.format(ns=ns) + "/optin")["spec"]["replicatedJobs"][0]
    assert "schedulerName" not in template["template"]["spec"]["template"]["spec"]

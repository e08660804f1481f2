"""Hostile tenants against the real control plane: no pod may stop GPU scheduling for others.

A cluster of its own from ``harness.fabric_cluster`` (the local control plane, the second
kube-scheduler from the shipped template, ``fabricsched run`` as a subprocess, 16 nodes of 8
GPUs in 2 spines x 2 leaves x 4 hosts); the conftest's ``ns`` releases each test's namespace.
Every attack is one pod (or one node) made through the API server, exactly as any user who may
create a pod could; while it exists, ``/healthz`` must answer within 2 s and a new 2-pod gang
must bind within 10 s. Every request goes to loopback addresses, and each test makes a bounded
number of them.
"""

from __future__ import annotations

import copy
import datetime
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from harness import GPU, Fabric, fabric_cluster, trainer_spec
from waiting import holds_for, paced, wait_for

from fabricsched.cluster import kwok, nodes, samples

HEALTHZ_BUDGET_S = 2.0
BIND_BUDGET_S = 10.0
REASON_BYTES_PER_NODE = 200
WAKE_BUDGET_S = 15.0


class Abuse(Fabric):
    """The module's cluster, with the attacker's requests and the checks that serving goes on."""

    def pod(self, namespace: str, name: str, labels: dict[str, str] | None = None,
            annotations: dict[str, str] | None = None, gpus: int = 8,
            extra: dict[str, str] | None = None, node: str | None = None) -> dict[str, Any]:
        spec = trainer_spec(gpus)
        if extra:  # extended resources cannot be overcommitted: the limit equals the request
            spec["containers"][0]["resources"]["requests"].update(extra)
            spec["containers"][0]["resources"]["limits"].update(extra)
        if node:
            spec["nodeName"] = node  # bound at creation, as a user may do without any scheduler
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
                "spec": spec}
        created: dict[str, Any] = self.api.call("POST", f"/api/v1/namespaces/{namespace}/pods", body)
        return created

    def indexed_job(self, namespace: str, name: str, pods: int) -> None:
        body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                         "backoffLimit": 0, "template": {"spec": trainer_spec(8)}}}
        self.api.call("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body)

    def bound_within(self, namespace: str, names: set[str] | None, job: str | None, count: int,
                     budget_s: float) -> list[str]:
        """Nodes of the ``count`` pods (named, or of ``job``) once all are bound, within ``budget_s``."""
        started = time.monotonic()

        def bound() -> list[str] | None:
            found = [p for p in self.pods(namespace)
                     if (names is not None and p["metadata"]["name"] in names)
                     or (job is not None and p["metadata"].get("labels", {}).get("job-name") == job)]
            if len(found) < count or not all(p["spec"].get("nodeName") for p in found):
                return None
            return [p["spec"]["nodeName"] for p in found]

        placed: list[str] = wait_for(f"{count} pods bound in {namespace}", bound, timeout=budget_s + 5,
                                     interval=0.2)
        took = time.monotonic() - started
        assert took <= budget_s, f"bound after {took:.1f} s (budget {budget_s} s)"
        return placed  # a bound pod holds its GPUs whatever its phase: no kubelet is needed

    def healthz_answers_quickly(self, probes: int = 6, interval_s: float = 0.5) -> float:
        """Probe ``/healthz`` a few times; each must answer 200 within the budget. The slowest."""
        slowest = 0.0

        def probe() -> None:
            nonlocal slowest
            started = time.monotonic()
            url = f"http://127.0.0.1:{self.operator.health_port}/healthz"
            with urllib.request.urlopen(url, timeout=HEALTHZ_BUDGET_S) as response:
                assert response.status == 200
            slowest = max(slowest, time.monotonic() - started)

        paced(probe, probes, interval_s)
        return slowest

    def filter(self, pod: dict[str, Any], node_names: list[str]) -> bytes:
        request = urllib.request.Request(
            f"{self.operator.extender_url}/filter",
            data=json.dumps({"Pod": pod, "NodeNames": node_names}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            body: bytes = response.read()
            return body

    def tried(self, namespace: str, name: str) -> bool:
        """The scheduler has tried the pod and refused it (its PodScheduled condition says so):
        fabricsched's filter has answered about it."""
        pod = self.api.call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        conditions = (pod.get("status") or {}).get("conditions") or ()
        return any((c["type"], c["status"], c.get("reason")) == ("PodScheduled", "False", "Unschedulable")
                   for c in conditions)

    def quiet_and_refused(self, namespace: str, job: str, pods: int) -> bool:
        """Every bound pod of ``namespace`` Running (kwok is done: no pod update is left for the
        scheduler to retry others on) and every pod of ``job`` refused by the scheduler."""
        found = self.pods(namespace)
        bound = [p for p in found if p["spec"].get("nodeName")]
        settled = all((p.get("status") or {}).get("phase") == "Running" for p in bound)
        waiting = [p["metadata"]["name"] for p in found
                   if p["metadata"].get("labels", {}).get("job-name") == job]
        return settled and len(waiting) == pods and all(self.tried(namespace, n) for n in waiting)

    def none_bound(self, namespace: str, job: str) -> bool:
        return not any(p["spec"].get("nodeName") for p in self.pods(namespace)
                       if p["metadata"].get("labels", {}).get("job-name") == job)


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Abuse]:
    """The sample fabric, its health left at the defaults."""
    root = tmp_path_factory.mktemp("abuse-cluster")
    with fabric_cluster(root, recover_after_s=None, kind=Abuse) as cluster:
        yield cluster


def fabric_nodes(fabric: Abuse) -> list[str]:
    items = fabric.api.call("GET", "/api/v1/nodes?labelSelector=nvidia.com/gpu.present%3Dtrue")["items"]
    return sorted(n["metadata"]["name"] for n in items)


def test_a_quantity_bomb_pod_and_node_neither_stall_the_loop_nor_other_gangs(
    fabric: Abuse, ns: str
) -> None:
    bomb = "1e1000000"
    # A pod asking for a made-up resource (the API server accepts the quantity; it never binds)...
    fabric.pod(ns, "bomb", extra={"example.com/foo": bomb})
    # ...and a node claiming that many GPUs inside the fabric (whoever may write node status).
    node = copy.deepcopy(samples.sample_fabric(1, 1, 1)[0])
    node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = "bomb-node"
    for part in ("capacity", "allocatable"):
        node["status"][part][GPU] = bomb
        node["status"][part]["example.com/foo"] = bomb
    nodes.create(fabric.api, [node], datetime.datetime.now(datetime.UTC))
    try:
        slowest = fabric.healthz_answers_quickly()
        fabric.indexed_job(ns, "after-bomb", 2)
        placed = fabric.bound_within(ns, None, "after-bomb", 2, BIND_BUDGET_S)
        assert "bomb-node" not in placed  # it holds no GPUs for fabricsched
        assert fabric.operator.process is not None and fabric.operator.process.poll() is None
        print(f"quantity bomb: slowest /healthz {slowest * 1000:.0f} ms")
    finally:
        nodes.delete(fabric.api, ["bomb-node"])


@pytest.mark.parametrize("rank", ["²", "٣"], ids=["superscript two", "arabic-indic three"])
def test_a_poison_rank_on_a_bound_and_a_pending_pod_stops_no_other_gang_not_even_after_a_restart(
    fabric: Abuse, ns: str, rank: str
) -> None:
    hosts = fabric_nodes(fabric)
    poison = {"fabricsched.io/gang": "poison", "fabricsched.io/gang-size": "2", "fabricsched.io/rank": rank}
    # One bound at creation (restore reads it), one left to the scheduler (filter reads it).
    fabric.pod(ns, "poison-bound", labels={"fabricsched.io/gang": "poison"},
                annotations={k: v for k, v in poison.items() if k != "fabricsched.io/gang"}, node=hosts[-1])
    fabric.pod(ns, "poison-pending", labels={"fabricsched.io/gang": "poison"},
                annotations={k: v for k, v in poison.items() if k != "fabricsched.io/gang"})
    wait_for("the scheduler refused poison-pending", lambda: fabric.tried(ns, "poison-pending"))
    fabric.operator.kill()
    fabric.operator.start()  # restore runs over every stored pod, the poison ones included
    fabric.healthz_answers_quickly(probes=3)
    # An Indexed Job (ranks from the completion index) and a labelled gang (ranks assigned by
    # fabricsched over every stored pod): both bind in time.
    fabric.indexed_job(ns, "after-poison", 2)
    fabric.bound_within(ns, None, "after-poison", 2, BIND_BUDGET_S)
    for i in range(2):
        fabric.pod(ns, f"free-{i}", labels={"fabricsched.io/gang": "free"},
                    annotations={"fabricsched.io/gang-size": "2"})
    fabric.bound_within(ns, {"free-0", "free-1"}, None, 2, BIND_BUDGET_S)
    fabric.healthz_answers_quickly(probes=2)
    pending = fabric.api.call("GET", f"/api/v1/namespaces/{ns}/pods/poison-pending")
    assert not pending["spec"].get("nodeName")
    # The poison pod's own reason names the annotation, briefly.
    answer = json.loads(fabric.filter(pending, hosts))
    reasons = set(answer["FailedNodes"].values()) | set(answer["FailedAndUnresolvableNodes"].values())
    assert answer["NodeNames"] == [] and reasons, answer
    assert all("fabricsched.io/rank" in r and len(r.encode()) <= 160 for r in reasons), reasons


@pytest.mark.parametrize("annotation", ["fabricsched.io/gang-size", "fabricsched.io/required-tier"])
def test_a_100_kb_annotation_keeps_the_filter_answer_under_200_bytes_per_node(
    fabric: Abuse, ns: str, annotation: str
) -> None:
    labels = {"fabricsched.io/gang": "big"}
    annotations = {annotation: "x" * 100 * 1024}
    if annotation != "fabricsched.io/gang-size":
        annotations["fabricsched.io/gang-size"] = "2"
    pod = fabric.pod(ns, "big", labels=labels, annotations=annotations)
    # The 16 fabric hosts and names of 484 more: what a 500-node cluster's scheduler would send.
    names = fabric_nodes(fabric)
    names += [f"gpu-extra-{i:03d}" for i in range(500 - len(names))]
    body = fabric.filter(pod, names)
    answer = json.loads(body)
    failed = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
    assert len(failed) == len(names) and answer["NodeNames"] == []
    per_node = len(body) / len(names)
    assert per_node < REASON_BYTES_PER_NODE, f"{per_node:.0f} bytes per node"
    assert max(len(r.encode()) for r in failed.values()) <= 160
    print(f"{annotation}: {len(body)} bytes for {len(names)} nodes ({per_node:.0f} per node)")
    fabric.healthz_answers_quickly(probes=2)


def test_a_duplicated_rank_names_the_rank_and_the_other_pods_of_the_gang_still_bind(
    fabric: Abuse, ns: str
) -> None:
    gang = {"fabricsched.io/gang": "dup"}

    def ranked(rank: str) -> dict[str, str]:
        return {"fabricsched.io/gang-size": "2", "fabricsched.io/rank": rank}

    # Both pods first: a gang is planned only once its pods exist.
    fabric.pod(ns, "dup-0", labels=gang, annotations=ranked("0"))
    fabric.pod(ns, "dup-1", labels=gang, annotations=ranked("1"))
    placed = fabric.bound_within(ns, {"dup-0", "dup-1"}, None, 2, BIND_BUDGET_S)
    first = fabric.api.call("GET", f"/api/v1/namespaces/{ns}/pods/dup-0")["spec"]["nodeName"]
    assert first in placed
    def booked() -> bool:
        status = (fabric.placement(ns, "dup") or {}).get("status") or {}
        return len(status.get("boundRanks", [])) == 2

    wait_for("both binds in fabricsched's book (its FabricPlacement lists them)", booked)
    twin = fabric.pod(ns, "dup-0-twin", labels=gang, annotations=ranked("0"))
    answer = json.loads(fabric.filter(twin, fabric_nodes(fabric)))
    reasons = set(answer["FailedNodes"].values()) | set(answer["FailedAndUnresolvableNodes"].values())
    assert answer["NodeNames"] == [] and len(reasons) == 1, answer
    (reason,) = reasons
    assert "rank 0 of gang" in reason and first in reason and "0 pods" not in reason, reason
    pending = fabric.api.call("GET", f"/api/v1/namespaces/{ns}/pods/dup-0-twin")
    assert not pending["spec"].get("nodeName")


def test_a_lone_pod_claiming_nearly_every_host_does_not_stop_a_12_pod_gang(fabric: Abuse, ns: str) -> None:
    # 15 of the 16 hosts: before the pods-exist barrier its plan held all but one host.
    hoarder = fabric.pod(ns, "hoarder", annotations={"fabricsched.io/gang-size": "15"})
    wait_for("the scheduler refused the hoarder", lambda: fabric.tried(ns, hoarder["metadata"]["name"]))
    fabric.indexed_job(ns, "after-hoarder", 12)
    placed = fabric.bound_within(ns, None, "after-hoarder", 12, 30.0)
    assert len(set(placed)) == 12
    pending = fabric.api.call("GET", f"/api/v1/namespaces/{ns}/pods/{hoarder['metadata']['name']}")
    assert not pending["spec"].get("nodeName")
    held = fabric.api.call("GET", f"/apis/fabricsched.io/v1alpha1/namespaces/{ns}/fabricplacements")
    assert [p["spec"].get("gang") for p in held["items"]] == ["after-hoarder"], held["items"]


WRONG_TYPED_PODS = {
    "labels as a list": {"metadata": {"name": "p", "namespace": "x", "labels": ["a"]}},
    "annotations as a string": {"metadata": {"name": "p", "namespace": "x", "annotations": "a"}},
    "containers as an object": {"metadata": {"name": "p", "namespace": "x"},
                                "spec": {"containers": {"a": 1}}},
    "a quantity as an object": {"metadata": {"name": "p", "namespace": "x"},
                                "spec": {"containers": [{"resources": {"requests": {GPU: {"a": 1}}}}]}},
}


def test_wrong_typed_pod_fields_get_400_from_both_verbs_and_serving_goes_on(fabric: Abuse) -> None:
    names = fabric_nodes(fabric)[:3]
    for what, pod in WRONG_TYPED_PODS.items():
        for verb in ("/filter", "/prioritize"):
            request = urllib.request.Request(
                f"{fabric.operator.extender_url}{verb}",
                data=json.dumps({"Pod": pod, "NodeNames": names}).encode(),
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    status = response.status
            except urllib.error.HTTPError as e:
                status = e.code
            assert status == 400, (what, verb, status)
    fabric.healthz_answers_quickly(probes=2)


def forged_pod(namespace: str, name: str, uid: str) -> dict[str, Any]:
    """A pod body as the kube-scheduler would send it, for a pod the API server may not hold."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid,
                         "annotations": {"fabricsched.io/gang-size": "1"}},
            "spec": trainer_spec(8), "status": {"phase": "Pending"}}


def test_forged_filter_calls_reserve_nothing_and_write_nothing(fabric: Abuse, ns: str) -> None:
    hosts = fabric_nodes(fabric)
    # Real pods wait for a scheduler nobody runs: only the forged calls below reach fabricsched.
    spec = {**trainer_spec(8), "schedulerName": "nobody"}

    def create(name: str) -> dict[str, Any]:
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
        made: dict[str, Any] = fabric.api.call("POST", f"/api/v1/namespaces/{ns}/pods", body)
        return made

    real = create("real")
    fabric.api.call("DELETE", f"/api/v1/namespaces/{ns}/pods/real", {"gracePeriodSeconds": 0})
    create("held")  # a pod with this name exists, under another UID than the forged one
    forgeries = {
        "a pod never created": forged_pod(ns, "ghost", "00000000-0000-0000-0000-000000000001"),
        "a deleted pod": forged_pod(ns, "real", real["metadata"]["uid"]),
        "the right name and a wrong UID": forged_pod(ns, "held", "00000000-0000-0000-0000-000000000002"),
        "a pod in kube-system": forged_pod("kube-system", "ghost", "00000000-0000-0000-0000-000000000003"),
    }
    for what, pod in forgeries.items():
        for _ in range(3):  # the negative answer is remembered: asking again costs nothing more
            answer = json.loads(fabric.filter(pod, hosts))
            reasons = set(answer["FailedNodes"].values())
            assert answer["NodeNames"] == [] and len(answer["FailedNodes"]) == len(hosts), (what, answer)
            assert all(r.startswith("unknown pod") and len(r.encode()) <= 160 for r in reasons), what
    def written() -> list[dict[str, Any]]:
        placements = fabric.api.call("GET", "/apis/fabricsched.io/v1alpha1/fabricplacements")["items"]
        return [p["metadata"] for p in placements if p["metadata"]["namespace"] in (ns, "kube-system")]

    # A background write would land within a second: none does.
    holds_for("no FabricPlacement written for a forged pod", lambda: not written(), 1.0)
    placements = fabric.api.call("GET", "/apis/fabricsched.io/v1alpha1/fabricplacements")["items"]
    assert not [p["metadata"] for p in placements if p["metadata"]["namespace"] in (ns, "kube-system")]
    # Nothing is reserved: a gang needing every host binds at once.
    fabric.indexed_job(ns, "whole", 16)
    placed = fabric.bound_within(ns, None, "whole", 16, 30.0)
    assert len(set(placed)) == 16


def test_a_waiting_gang_starts_soon_after_its_blockers_pods_succeed(fabric: Abuse, ns: str) -> None:
    # The blocker holds 12 of the 16 hosts; the waiting gang needs 8, so it is refused (NoFit)
    # and its pods sit among the kube-scheduler's unschedulable pods.
    fabric.indexed_job(ns, "blocker", 12)
    fabric.bound_within(ns, None, "blocker", 12, 30.0)
    fabric.indexed_job(ns, "waiting", 8)

    def refused() -> bool:
        events = fabric.api.call("GET", f"/api/v1/namespaces/{ns}/events")["items"]
        return any(e.get("reason") == "FailedScheduling" and "waiting" in e["involvedObject"]["name"]
                   for e in events)

    wait_for("the waiting gang refused", refused, timeout=30)
    # Past the scheduler's first retries: every pod refused once the last pod update is in, and
    # none placed over a few more seconds; the pods wait for a cluster event.
    wait_for("every bound pod Running and every waiting pod refused",
             lambda: fabric.quiet_and_refused(ns, "waiting", 8), timeout=30)
    holds_for("the waiting gang unplaced", lambda: fabric.none_bound(ns, "waiting"), 3.0)
    # The blocker's pods succeed. The kube-scheduler frees their nodes at once (and retries the
    # waiting pods), but fabricsched keeps the ranks for replacement pods until the Job itself
    # completes, a moment later: that retry is refused, and the Job's completion is no event
    # the scheduler acts on. Only fabricsched's own signal wakes the gang then.
    ended_at = time.monotonic()
    for pod in fabric.pods(ns):
        if pod["metadata"].get("labels", {}).get("job-name") == "blocker":
            kwok.finish(fabric.api, ns, pod["metadata"]["name"], "Succeeded")
    placed = fabric.bound_within(ns, None, "waiting", 8, WAKE_BUDGET_S)
    took = time.monotonic() - ended_at
    assert len(set(placed)) == 8
    print(f"waiting gang bound {took:.1f} s after its blocker's pods succeeded")


def test_a_waiting_gang_starts_soon_after_a_blocker_with_reserved_ranks_is_deleted(
    fabric: Abuse, ns: str
) -> None:
    # The blocker is a labelled gang of 12: 10 ranks bound, 2 reserved behind a scheduling gate.
    # Its reservation is let go only after its pods are gone (fabricsched's housekeeping), after
    # the kube-scheduler has seen the deletions: only fabricsched's own signal wakes the gang.
    for rank in range(12):
        spec = trainer_spec(8)
        if rank >= 10:
            spec["schedulingGates"] = [{"name": "example.com/held"}]
        fabric.api.call("POST", f"/api/v1/namespaces/{ns}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"blocker-{rank}", "labels": {"fabricsched.io/gang": "blocker"},
                         "annotations": {"fabricsched.io/gang-size": "12",
                                         "fabricsched.io/rank": str(rank)}},
            "spec": spec})
    fabric.bound_within(ns, {f"blocker-{r}" for r in range(10)}, None, 10, 30.0)
    fabric.indexed_job(ns, "waiting", 8)

    def refused() -> bool:
        events = fabric.api.call("GET", f"/api/v1/namespaces/{ns}/events")["items"]
        return any(e.get("reason") == "FailedScheduling" and "waiting" in e["involvedObject"]["name"]
                   for e in events)

    wait_for("the waiting gang refused", refused, timeout=30)
    wait_for("every bound pod Running and every waiting pod refused",
             lambda: fabric.quiet_and_refused(ns, "waiting", 8), timeout=30)
    holds_for("the waiting gang unplaced", lambda: fabric.none_bound(ns, "waiting"), 3.0)
    deleted_at = time.monotonic()
    for rank in range(12):
        fabric.api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/blocker-{rank}",
                            {"gracePeriodSeconds": 0})
    placed = fabric.bound_within(ns, None, "waiting", 8, WAKE_BUDGET_S)
    took = time.monotonic() - deleted_at
    assert len(set(placed)) == 8
    print(f"waiting gang bound {took:.1f} s after its blocker (with reserved ranks) was deleted")

"""Faults on the real control plane: the API server, etcd, fabricsched itself, nodes, namespaces.

A cluster of its own from ``harness.fabric_cluster`` (the local control plane with the second
kube-scheduler from the shipped template, ``fabricsched run`` as a subprocess, 16 nodes of 8
GPUs in 2 spines x 2 leaves x 4 hosts). Each test injects one fault while gangs exist and
checks what must hold through it: the process keeps answering ``/healthz``, a gang submitted
afterwards binds, a planned gang finishes on its plan (no split), and no node ever holds more
GPUs than it has (no double booking). Ranks are held reserved (planned, not bound) with a
scheduling gate on their pods, as a real gang whose last pods are slow to arrive would be.
"""

from __future__ import annotations

import collections
import datetime
import os
import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from harness import GPU, PLACEMENTS, Fabric, fabric_cluster, trainer_spec
from waiting import holds_for, wait_for

from fabricsched.cluster import nodes, processes, rest

GATE = "example.com/held"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
GPUS_PER_NODE = 8
SCHEDULER = "kube-scheduler-fabricsched"
AFTER_OUTAGE_S = 150.0
"""How long a gang submitted after an API server outage may take to bind (a generous bound)."""


class Faults(Fabric):
    """The module's cluster, with the faults to inject and the invariants to check."""

    def healthz(self, timeout: float = 2.0) -> bool:
        url = f"http://127.0.0.1:{self.operator.health_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def api_ready(self) -> bool:
        try:
            return self.api.request("GET", "/readyz")[0] == 200
        except OSError:
            return False

    def gated_gang(self, namespace: str, name: str, size: int, held: set[int]) -> None:
        """A labelled gang of ``size`` 8-GPU pods; the ranks in ``held`` wait behind a gate."""
        for rank in range(size):
            spec = trainer_spec(GPUS_PER_NODE)
            if rank in held:
                spec["schedulingGates"] = [{"name": GATE}]
            body = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{name}-{rank}", "labels": {"fabricsched.io/gang": name},
                                 "annotations": {"fabricsched.io/gang-size": str(size),
                                                 "fabricsched.io/rank": str(rank)}},
                    "spec": spec}
            self.api.call("POST", f"/api/v1/namespaces/{namespace}/pods", body)

    def ungate(self, namespace: str, pod: str) -> None:
        self.api.call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{pod}",
                      {"spec": {"schedulingGates": None}}, rest.MERGE_PATCH)

    def planned(self, namespace: str, name: str, bound: int) -> list[str]:
        """The gang's planned node per rank, once ``bound`` of its ranks are bound."""
        placement = wait_for(
            f"{namespace}/{name} planned with {bound} bound ranks",
            lambda: p if (p := self.placement(namespace, name))
            and len((p.get("status") or {}).get("boundRanks", [])) >= bound else None,
        )
        return [r["node"] for r in sorted(placement["spec"]["ranks"], key=lambda r: r["rank"])]

    def pod_nodes(self, namespace: str) -> dict[str, str | None]:
        return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in self.pods(namespace)}

    def no_double_booking(self) -> dict[str, int]:
        """GPUs held per node by every bound, unfinished pod of the cluster; none over 8."""
        held: dict[str, int] = collections.Counter()
        for pod in self.api.call("GET", "/api/v1/pods")["items"]:
            node = pod["spec"].get("nodeName")
            if not node or pod["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            for container in pod["spec"]["containers"]:
                held[node] += int((container.get("resources", {}).get("requests") or {}).get(GPU, 0))
        over = {n: g for n, g in held.items() if g > GPUS_PER_NODE}
        assert not over, f"nodes with more GPUs bound than they have: {over}"
        return held

    def scheduler_pid(self) -> int:
        """The running kube-scheduler process of the fabricsched profile (its supervisor's child)."""
        records, _ = processes.read_state(self.plane.dir / "state.json")
        supervisor = next(r for r in records if r.component == SCHEDULER)
        found: list[int] = wait_for(f"{SCHEDULER} running", lambda: processes.children(supervisor.pid))
        return found[0]

    def scheduler_sees_gone(self, namespace: str, node: str) -> None:
        """The fabricsched kube-scheduler's cache has ``node`` cordoned or deleted: a probe pod
        (no GPUs: the extender is not asked) pinned to it is refused, then removed. A probe the
        scheduler bound (its cache had not seen the change yet) is removed and asked again."""
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
                 "spec": {"schedulerName": "fabricsched", "terminationGracePeriodSeconds": 0,
                          "nodeSelector": {"kubernetes.io/hostname": node},
                          "containers": [{"name": "probe", "image": "probe:1"}]}}
        path = f"/api/v1/namespaces/{namespace}/pods/probe"

        def answered() -> str | None:
            found = self.api.call("GET", path)
            if (found.get("spec") or {}).get("nodeName"):
                return "bound"
            status = found.get("status") or {}
            refused = any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                          for c in status.get("conditions") or ())
            return "refused" if refused else None

        for _ in range(3):
            self.api.call("POST", f"/api/v1/namespaces/{namespace}/pods", probe)
            try:
                answer = wait_for(f"the fabricsched scheduler answering a pod pinned to {node}", answered)
            finally:
                self.api.request("DELETE", path, {"gracePeriodSeconds": 0})
                wait_for("the probe pod gone", lambda: self.api.request("GET", path)[0] == 404)
            if answer == "refused":
                return
        raise AssertionError(f"the fabricsched scheduler still binds pods to {node}")

    def log_lines(self, pattern: str) -> int:
        logs = sorted(self.operator.log_dir.glob("fabricsched-run-*.log"))
        text = "".join(p.read_text(errors="replace") for p in logs)
        return len(re.findall(pattern, text))


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faults]:
    with fabric_cluster(tmp_path_factory.mktemp("faults-cluster"), kind=Faults) as cluster:
        yield cluster


@pytest.fixture
def ns(faults: Faults) -> Iterator[str]:
    name = faults.namespace()
    yield name
    if faults.api_ready():
        faults.release(name, timeout=90)


def test_the_api_server_down_for_30_s_and_back(faults: Faults, ns: str) -> None:
    faults.job(ns, "before", pods=4)
    before = faults.placed(ns, "before", 4)
    faults.plane.stop_component("kube-apiserver")
    probes = 0

    def answers() -> bool:
        nonlocal probes
        probes += 1
        return faults.healthz()

    try:
        holds_for("fabricsched run answering /healthz with the API server down", answers, 30, interval=1.0)
        assert faults.operator.process is not None and faults.operator.process.poll() is None
    finally:
        faults.plane.start_component("kube-apiserver")
    wait_for("the API server back", faults.api_ready, timeout=60)
    back_at = time.monotonic()
    faults.job(ns, "after", pods=4)
    # The fabricsched kube-scheduler lost its lease in the outage and exited; its supervisor
    # started it again, and it waits for its informers (refused until the API server's RBAC is
    # ready) and for the old lease to expire (15 s) before it schedules: about a minute.
    # The watches resumed: the extender saw the new gang's binds and wrote them.
    wait_for("gang after Bound", lambda: (p := faults.placement(ns, "after"))
             and (p.get("status") or {}).get("phase") == "Bound", timeout=AFTER_OUTAGE_S)
    took = time.monotonic() - back_at
    after = faults.placed(ns, "after", 4)
    assert faults.placed(ns, "before", 4) == before and not set(before) & set(after)
    faults.no_double_booking()
    assert faults.healthz()
    print(f"API server down 30 s: {probes} /healthz probes answered; a 4-pod gang bound {took:.1f} s "
          f"after the API server was back")


def test_an_etcd_restart(faults: Faults, ns: str) -> None:
    faults.job(ns, "before", pods=2)
    before = faults.placed(ns, "before", 2)
    faults.plane.stop_component("etcd")
    try:
        holds_for("fabricsched run answering /healthz with etcd down", faults.healthz, 5, interval=1.0)
    finally:
        faults.plane.start_component("etcd")
    wait_for("the API server ready again", faults.api_ready, timeout=60)
    faults.job(ns, "after", pods=4)
    after = faults.placed(ns, "after", 4)
    assert not set(before) & set(after)
    faults.no_double_booking()


def test_a_kill_9_right_after_a_gangs_first_plan_keeps_the_plan(faults: Faults, ns: str) -> None:
    faults.job(ns, "g", pods=6)
    placement = wait_for("the first plan of g", lambda: faults.placement(ns, "g"), interval=0.05)
    seen = time.monotonic()
    faults.operator.kill()
    killed_after = time.monotonic() - seen
    plan = [r["node"] for r in sorted(placement["spec"]["ranks"], key=lambda r: r["rank"])]
    faults.operator.start()
    placed = faults.placed(ns, "g", 6)
    assert placed == plan, (placed, plan)
    assert len({faults.spine_of[n] for n in placed}) == 1, "split across spines"
    faults.no_double_booking()
    print(f"killed {killed_after * 1000:.0f} ms after the plan was first seen; "
          f"bound {sum(1 for n in faults.pod_nodes(ns).values() if n)} of 6 on the plan")


def test_a_gang_whose_plan_was_lost_after_its_first_bind_is_planned_around_it(
    faults: Faults, ns: str
) -> None:
    # The first answer does not wait for the plan's object: a kill before it lands leaves rank 0
    # bound with no plan. Here the object is deleted while fabricsched is down, which leaves
    # the same state behind at the restart.
    faults.gated_gang(ns, "lost", 4, held={1, 2, 3})
    first = faults.planned(ns, "lost", bound=1)[0]
    faults.operator.kill()
    faults.api.call("DELETE", PLACEMENTS.format(ns=ns) + "/lost")
    faults.operator.start()
    for rank in (1, 2, 3):
        faults.ungate(ns, f"lost-{rank}")
    placed = wait_for("every rank of lost bound", lambda: (
        n if all((n := faults.pod_nodes(ns)).values()) and len(n) == 4 else None), timeout=60)
    assert placed["lost-0"] == first, placed
    assert {faults.leaf_of[n] for n in placed.values()} == {faults.leaf_of[first]}, placed
    reasons = wait_for("the plan's status written", lambda: (
        ((faults.placement(ns, "lost") or {}).get("status") or {}).get("reasons")))
    assert "planned around ranks 0, bound without a plan" in reasons, reasons
    faults.no_double_booking()


@pytest.mark.parametrize("fault", ["cordoned", "deleted"])
def test_a_reserved_ranks_node_cordoned_or_deleted_moves_the_rank_by_the_gang_rule(
    faults: Faults, ns: str, fault: str
) -> None:
    # Ranks 0 and 1 bind, rank 2 stays reserved behind its gate.
    faults.gated_gang(ns, "r", 3, held={2})
    plan = faults.planned(ns, "r", bound=2)
    home, spine = faults.leaf_of[plan[0]], faults.spine_of[plan[0]]
    # The leaf's last free host goes down: the moving rank must leave the leaf, not take it.
    spare = next(n for n, leaf in sorted(faults.leaf_of.items()) if leaf == home and n not in plan)
    faults.label_health(spare, "down")
    victim = plan[2]
    created = faults.api.call("GET", f"/api/v1/nodes/{victim}")
    try:
        wait_for("the spare host down in the topology's status", lambda: faults.unhealthy("node", spare))
        if fault == "cordoned":
            faults.api.call("PATCH", f"/api/v1/nodes/{victim}", {"spec": {"unschedulable": True}},
                            rest.MERGE_PATCH)
        else:
            faults.api.call("DELETE", f"/api/v1/nodes/{victim}")
        faults.scheduler_sees_gone(ns, victim)
        if fault == "deleted":
            wait_for("fabricsched's state without the host (the topology's status)",
                     lambda: faults.topology_status().get("nodes") == len(faults.leaf_of) - 1)
        faults.ungate(ns, "r-2")
        moved: str = wait_for("rank 2 bound", lambda: faults.pod_nodes(ns).get("r-2"), timeout=60)
        assert moved not in (victim, spare), moved
        assert faults.spine_of[moved] == spine, f"rank 2 left its spine for {moved}"
        final = faults.planned(ns, "r", bound=3)
        assert final[:2] == plan[:2] and final[2] == moved
        slowdown = ((faults.placement(ns, "r") or {}).get("status") or {}).get("commSlowdown")
        assert slowdown is not None and 1 <= slowdown < 1e9, slowdown
        faults.no_double_booking()
    finally:
        faults.label_health(spare, None)
        if fault == "cordoned":
            faults.api.call("PATCH", f"/api/v1/nodes/{victim}", {"spec": {"unschedulable": None}},
                            rest.MERGE_PATCH)
        else:
            for pod in faults.pods(ns):  # the deleted node's pods go with it
                if pod["spec"].get("nodeName") == victim:
                    faults.api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}",
                                       {"gracePeriodSeconds": 0})
            nodes.create(faults.api, [_fresh(created)], datetime.datetime.now(datetime.UTC))


def _fresh(node: dict[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in node["metadata"].items() if k in ("name", "labels", "annotations")}
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": {},
            "status": {k: v for k, v in node["status"].items()
                       if k in ("capacity", "allocatable", "conditions")}}


def test_a_namespace_deleted_with_reserved_gangs_frees_them_and_leaves_no_write_loop(
    faults: Faults, ns: str
) -> None:
    doomed = faults.namespace()
    # A Job-less gang and an Indexed Job, each with ranks reserved behind gates: 14 of 16 hosts.
    faults.gated_gang(doomed, "labelled", 6, held={2, 3, 4, 5})
    faults.planned(doomed, "labelled", bound=2)
    gated = {"schedulingGates": [{"name": GATE}]}
    faults.job(doomed, "job", pods=8, placement=gated)
    # A gang is planned once all its pods exist; the gate keeps them off the scheduler, so it
    # is asked here as the scheduler would ask for rank 0 (every fabric host a candidate).
    faults.api.call("PATCH", f"/api/v1/namespaces/{doomed}/pods/{_job_pod(faults, doomed, 0)}",
                    {"spec": {"schedulingGates": None}}, rest.MERGE_PATCH)
    faults.planned(doomed, "job", bound=1)
    # Reserved GPUs count as taken in the topology's status (written every few seconds).
    wait_for("14 hosts taken in the topology's status",
             lambda: faults.topology_status().get("gpus", {}).get("free") == 2 * GPUS_PER_NODE)
    faults.api.call("DELETE", f"/api/v1/namespaces/{doomed}")
    deleted_at = time.monotonic()
    wait_for("every GPU free in the topology's status", faults.settled, timeout=60)
    freed_after = time.monotonic() - deleted_at
    # Every host is needed by this gang: it fits only with both reservations gone.
    faults.job(ns, "whole", pods=16)
    faults.placed(ns, "whole", 16)
    failed = rf"could not (write|create) FabricPlacement {doomed}/"
    writes_then = faults.log_lines(failed)
    holds_for(f"no retried write into {doomed}", lambda: faults.log_lines(failed) == writes_then, 10.0)
    writes_now = faults.log_lines(failed)
    assert writes_now == writes_then, f"{writes_now - writes_then} retried writes into {doomed} in 10 s"
    faults.no_double_booking()
    print(f"namespace deleted: its reservations freed {freed_after:.1f} s later; "
          f"{writes_now} failed writes into it in all")


def _job_pod(faults: Faults, namespace: str, index: int) -> str:
    def find() -> str | None:
        for pod in faults.pods(namespace):
            labels = pod["metadata"].get("labels", {})
            if labels.get("job-name") == "job" and labels.get(COMPLETION_INDEX) == str(index):
                return str(pod["metadata"]["name"])
        return None
    found: str = wait_for(f"pod {index} of {namespace}/job", find)
    return found


def test_a_killed_scheduler_is_restarted_by_the_local_tooling(faults: Faults, ns: str) -> None:
    first = faults.scheduler_pid()
    os.kill(first, signal.SIGKILL)
    second: int = wait_for("the scheduler restarted",
                           lambda: (p := faults.scheduler_pid()) != first and p, timeout=30)
    assert second != first
    faults.job(ns, "after", pods=2)
    faults.placed(ns, "after", 2)



def test_a_reserved_rank_whose_host_degrades_later_moves_off_it(faults: Faults, ns: str) -> None:
    faults.gated_gang(ns, "d", 3, held={2})
    plan = faults.planned(ns, "d", bound=2)
    degraded = plan[2]
    faults.label_health(degraded, "degraded")
    try:
        wait_for("the host degraded in the topology's status", lambda: faults.unhealthy("node", degraded))
        faults.ungate(ns, "d-2")
        moved: str = wait_for("rank 2 bound", lambda: faults.pod_nodes(ns).get("d-2"), timeout=60)
        assert moved != degraded and faults.leaf_of[moved] == faults.leaf_of[plan[0]], (moved, plan)
        faults.no_double_booking()
    finally:
        faults.label_health(degraded, None)

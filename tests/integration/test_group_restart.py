"""A group restarted as a whole lands again where it ran (issue 35): the real JobSet controller
over the sample fabric (16 hosts of 8 GPUs, 4 per leaf, 2 leaves per spine), every host healthy.

A JobSet of one Job of 4 pods of 8 GPUs (``backoffLimit: 0``, ``failurePolicy.maxRestarts: 1``)
lands as one gang in one leaf. Then one 8-GPU pod runs in the other spine, so best fit alone
would now take that spine's free leaf (the tightest fit). One rank exits 1 (its status written
as a kubelet reports it: kwok never fails a pod by itself): its Job fails, the JobSet's failure
policy deletes and makes every Job again, every old pod ends and the gang's plan is Released.
The new pods are the same gang (the JobSet keeps its UID): by default they land on their
previous hosts, rank by rank, and the FabricPlacement says "back on its previous hosts"; with
``fabricsched run --restart-placement fresh`` best fit takes the other spine, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from harness import Fabric, trainer_spec
from waiting import wait_for

from fabricsched.cluster import jobset, kwok, rest

pytestmark = pytest.mark.integration

JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
SIZE = 4


@pytest.fixture(scope="module")
def jobsets(fabric: Fabric) -> Iterator[jobset.Controller]:
    controller = jobset.start(fabric.plane)
    try:
        yield controller
    finally:
        controller.stop()


def submit(fabric: Fabric, ns: str, name: str) -> None:
    job = {"parallelism": SIZE, "completions": SIZE, "completionMode": "Indexed", "backoffLimit": 0,
           "template": {"spec": trainer_spec(8)}}
    fabric.api.call("POST", JOBSETS.format(ns=ns), {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
        "spec": {"failurePolicy": {"maxRestarts": 1},
                 "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": job}}]}})


def live_group(fabric: Fabric, ns: str, name: str) -> dict[int, dict[str, Any]]:
    found = {}
    for pod in fabric.pods(ns):
        labels = pod["metadata"].get("labels") or {}
        if labels.get(JOBSET_NAME) != name or pod["metadata"].get("deletionTimestamp"):
            continue
        if pod["status"].get("phase") not in ("Failed", "Succeeded") and COMPLETION_INDEX in labels:
            found[int(labels[COMPLETION_INDEX])] = pod
    return found


def bound_group(fabric: Fabric, ns: str, name: str, attempt: str) -> dict[int, dict[str, Any]]:
    """The group's pods of restart ``attempt`` by rank once all are bound (marked Running)."""
    def ready() -> dict[int, dict[str, Any]] | None:
        found = live_group(fabric, ns, name)
        if len(found) < SIZE or not all(p["spec"].get("nodeName") for p in found.values()):
            return None
        if any((p["metadata"].get("labels") or {}).get(RESTART_ATTEMPT) != attempt for p in found.values()):
            return None
        for pod in found.values():
            if pod["status"].get("phase") == "Pending":
                kwok.finish(fabric.api, ns, pod["metadata"]["name"], "Running")
        return dict(sorted(found.items()))

    pods: dict[int, dict[str, Any]] = wait_for(f"JobSet {name} attempt {attempt} bound", ready, timeout=120)
    return pods


def load_elsewhere(fabric: Fabric, ns: str, home: str) -> None:
    """One 8-GPU pod on a host of the other spine: that spine is now the tightest fit for 4 pods."""
    other = sorted(n for n, spine in fabric.spine_of.items() if spine != fabric.spine_of[home])[0]
    spec = {**trainer_spec(8), "nodeName": other}
    fabric.api.call("POST", f"/api/v1/namespaces/{ns}/pods",
                    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "load"}, "spec": spec})
    kwok.finish(fabric.api, ns, "load", "Running")


def fail(fabric: Fabric, ns: str, pod: dict[str, Any]) -> None:
    """``pod``'s container exited 1, as a kubelet writes it."""
    container = pod["spec"]["containers"][0]
    fabric.api.call("PATCH", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/status", {"status": {
        "phase": "Failed", "containerStatuses": [{
            "name": container["name"], "image": container["image"], "imageID": "", "ready": False,
            "restartCount": 0, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}},
        rest.MERGE_PATCH)


def run_and_restart(fabric: Fabric, ns: str, name: str) -> tuple[list[str], list[str], dict[str, Any]]:
    """The group's nodes by rank before and after a whole-group restart, and its plan after."""
    before = [p["spec"]["nodeName"] for p in bound_group(fabric, ns, name, "0").values()]
    assert len(set(before)) == SIZE and len({fabric.leaf_of[n] for n in before}) == 1, before
    load_elsewhere(fabric, ns, before[0])
    fail(fabric, ns, live_group(fabric, ns, name)[2])
    after = [p["spec"]["nodeName"] for p in bound_group(fabric, ns, name, "1").values()]
    assert len(set(after)) == SIZE and len({fabric.leaf_of[n] for n in after}) == 1, after

    def bound_plan() -> dict[str, Any] | None:
        # The new plan's object once Bound (the old one, Released, is deleted at its release).
        found = fabric.placement(ns, name)
        return found if found and (found.get("status") or {}).get("phase") == "Bound" else None
    placement: dict[str, Any] = wait_for(f"the plan of {name} Bound", bound_plan, timeout=30)
    assert [r["node"] for r in placement["spec"]["ranks"]] == after
    return before, after, placement


def test_a_jobset_restarted_as_a_whole_lands_again_on_its_hosts_by_rank(
    fabric: Fabric, ns: str, jobsets: jobset.Controller,
) -> None:
    submit(fabric, ns, "resume")
    before, after, placement = run_and_restart(fabric, ns, "resume")
    assert after == before
    assert placement["status"]["reasons"][0] == "back on its previous hosts", placement["status"]["reasons"]


def test_with_restart_placement_fresh_best_fit_alone_takes_the_tighter_spine(
    fabric: Fabric, ns: str, jobsets: jobset.Controller,
) -> None:
    fabric.operator.kill()
    fabric.operator.args.append("--restart-placement=fresh")
    try:
        fabric.operator.start()
        submit(fabric, ns, "anew")
        before, after, placement = run_and_restart(fabric, ns, "anew")
        # The whole-group restart is planned from scratch: the spine with the load is tighter.
        assert fabric.spine_of[after[0]] != fabric.spine_of[before[0]], (before, after)
        assert not any("previous" in r for r in placement["status"]["reasons"])
    finally:
        fabric.operator.kill()
        fabric.operator.args.remove("--restart-placement=fresh")
        fabric.operator.start()

"""The extender behind a real kube-scheduler: Indexed Jobs with ``schedulerName: fabricsched``.

The conftest's ``fabric`` (``harness.fabric_cluster``): a control plane of its own with the
second kube-scheduler from the shipped template, ``fabricsched run`` as a subprocess, 16 nodes
of 8 GPUs in 2 spines x 2 leaves x 4 hosts. kwok plays the kubelets (bound pods go Running),
and every test's ``ns`` is released at its end so the next one starts on an empty fabric.
"""

from __future__ import annotations

import json
from typing import Any

from harness import Fabric, leaf_changes, trainer_spec
from waiting import wait_for

from fabricsched.cluster import kwok, rest, samples


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

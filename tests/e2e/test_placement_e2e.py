"""Placement on a real cluster: the chart's scheduler, extender and operator together.

The same rules the integration tests check on the local control plane (docs/design.md, placement
rules), through the installed chart: a gang that fits one leaf stays in one leaf; a larger one
takes the fewest leaves under one spine; a gang avoids a degraded host when a healthy placement
exists; a single-GPU pod takes the degraded host; a hard tier constraint that cannot be met waits.
"""

from __future__ import annotations

import os
from typing import Any

from e2ekit import GROUP, INTERVAL_S, TIMEOUT_S, VERSION, Fabric, Host
from waiting import holds_for, wait_for

PAUSE_IMAGE = os.environ.get("FABRICSCHED_E2E_IMAGE", "registry.k8s.io/pause:3.10")
SCHEDULER_NAME = "fabricsched"


def submit_gang(batch_v1: Any, namespace: str, name: str, pods: int, gpus: int, resource: str,
                annotations: dict[str, str] | None = None) -> None:
    """An Indexed Job of ``pods`` pods, ``gpus`` GPUs each, scheduled by fabricsched."""
    batch_v1.create_namespaced_job(namespace, {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {
                    "schedulerName": SCHEDULER_NAME,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "worker",
                        "image": PAUSE_IMAGE,
                        "resources": {"limits": {resource: str(gpus)}},
                    }],
                },
            },
        },
    })


def job_pods(core_v1: Any, namespace: str, job: str) -> list[Any]:
    selector = f"batch.kubernetes.io/job-name={job}"
    return list(core_v1.list_namespaced_pod(namespace, label_selector=selector).items)


def wait_bound(core_v1: Any, namespace: str, job: str, pods: int) -> dict[int, str]:
    """rank -> node, once every pod of the gang is bound."""

    def bound() -> dict[int, str] | None:
        ranks = {
            int(p.metadata.annotations["batch.kubernetes.io/job-completion-index"]): p.spec.node_name
            for p in job_pods(core_v1, namespace, job) if p.spec.node_name
        }
        return ranks if len(ranks) == pods else None

    return wait_for(f"the {pods} pods of {namespace}/{job} to be bound", bound, timeout=TIMEOUT_S,
                    interval=INTERVAL_S)


def placement(custom_objects: Any, namespace: str, gang: str) -> dict[str, Any]:
    return wait_for(
        f"FabricPlacement {namespace}/{gang} to be Bound",
        lambda: _bound_placement(custom_objects, namespace, gang),
        timeout=60,
        interval=INTERVAL_S,
    )


def _bound_placement(custom_objects: Any, namespace: str, gang: str) -> dict[str, Any] | None:
    from kubernetes.client.exceptions import ApiException

    try:
        found: dict[str, Any] = custom_objects.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "fabricplacements", gang)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return found if found.get("status", {}).get("phase") == "Bound" else None


def check_plan_matches_binding(plan: dict[str, Any], ranks: dict[int, str]) -> None:
    planned = {entry["rank"]: entry["node"] for entry in plan["spec"]["ranks"]}
    assert planned == ranks, f"pods bound elsewhere than planned: plan {planned}, bound {ranks}"


def test_gang_that_fits_one_leaf_stays_in_one_leaf(
    fabric: Fabric, core_v1: Any, batch_v1: Any, custom_objects: Any, namespace: str,
) -> None:
    # Two pods of half a host each: the default scheduler would spread them over two hosts.
    gpus = max(1, fabric.gpus_per_host // 2)
    submit_gang(batch_v1, namespace, "one-leaf", pods=2, gpus=gpus, resource=fabric.gpu_resource)
    ranks = wait_bound(core_v1, namespace, "one-leaf", 2)
    leaves = {fabric.host(node).leaf for node in ranks.values()}
    assert len(leaves) == 1, f"a gang that fits one leaf spread over {sorted(leaves)}: {ranks}"
    plan = placement(custom_objects, namespace, "one-leaf")
    assert plan["spec"]["domains"]["leaf"] == sorted(leaves)
    check_plan_matches_binding(plan, ranks)
    # Rank order follows the fabric: consecutive ranks share a host when they fit on one.
    if 2 * gpus <= fabric.gpus_per_host:
        assert ranks[0] == ranks[1], f"two ranks that fit one host were split: {ranks}"


def test_gang_larger_than_a_leaf_takes_two_leaves_under_one_spine(
    fabric: Fabric, core_v1: Any, batch_v1: Any, custom_objects: Any, namespace: str,
) -> None:
    hosts_per_leaf = min(len(hosts) for hosts in fabric.leaves().values())
    pods = hosts_per_leaf + 1  # one more whole host than the smallest leaf holds
    submit_gang(batch_v1, namespace, "two-leaves", pods=pods, gpus=fabric.gpus_per_host,
                resource=fabric.gpu_resource)
    ranks = wait_bound(core_v1, namespace, "two-leaves", pods)
    placed = [fabric.host(node) for node in ranks.values()]
    assert len({h.name for h in placed}) == pods, "whole-host pods share a host"
    assert len({h.spine for h in placed}) == 1, f"the gang crossed spines: {ranks}"
    assert len({h.leaf for h in placed}) == 2, f"the gang did not take the fewest leaves: {ranks}"
    plan = placement(custom_objects, namespace, "two-leaves")
    assert len(plan["spec"]["domains"]["leaf"]) == 2
    assert len(plan["spec"]["domains"]["spine"]) == 1
    check_plan_matches_binding(plan, ranks)


def test_gang_avoids_a_degraded_host_when_a_healthy_placement_exists(
    fabric: Fabric, degraded_host: Host, core_v1: Any, batch_v1: Any, custom_objects: Any, namespace: str,
) -> None:
    # Two whole hosts under one spine: the degraded host's spine has a healthy alternative only
    # in the other spine, which is entirely healthy.
    submit_gang(batch_v1, namespace, "healthy", pods=2, gpus=fabric.gpus_per_host,
                resource=fabric.gpu_resource)
    ranks = wait_bound(core_v1, namespace, "healthy", 2)
    assert degraded_host.name not in ranks.values(), f"the gang uses degraded {degraded_host.name}: {ranks}"
    assert len({fabric.host(node).spine for node in ranks.values()}) == 1
    plan = placement(custom_objects, namespace, "healthy")
    assert plan["status"].get("degradedPath") is False


def test_single_gpu_pod_goes_to_the_degraded_host(
    fabric: Fabric, degraded_host: Host, core_v1: Any, batch_v1: Any, namespace: str,
) -> None:
    # A one-pod job does not use the fabric: it loses nothing on the degraded host and leaves
    # healthy hosts whole for gangs.
    submit_gang(batch_v1, namespace, "single", pods=1, gpus=1, resource=fabric.gpu_resource)
    ranks = wait_bound(core_v1, namespace, "single", 1)
    assert ranks[0] == degraded_host.name


def test_required_tier_that_no_leaf_can_hold_waits(
    fabric: Fabric, core_v1: Any, batch_v1: Any, namespace: str,
) -> None:
    largest_leaf = max(len(hosts) for hosts in fabric.leaves().values())
    pods = largest_leaf + 1
    submit_gang(batch_v1, namespace, "must-share-a-leaf", pods=pods, gpus=fabric.gpus_per_host,
                resource=fabric.gpu_resource, annotations={"fabricsched.io/required-tier": "leaf"})
    wait_for("the gang's pods to exist",
             lambda: len(job_pods(core_v1, namespace, "must-share-a-leaf")) == pods,
             timeout=TIMEOUT_S, interval=INTERVAL_S)
    # fabricsched answered: its Event on a pod of the gang names the tier it cannot meet (with the
    # extender down the pods would wait too, but no such Event would come).
    event = wait_for("fabricsched's FabricTierUnsatisfiable Event on a pod of the gang",
                     lambda: tier_event(core_v1, namespace, "must-share-a-leaf"),
                     timeout=TIMEOUT_S, interval=INTERVAL_S)
    assert "leaf" in event.message, event.message

    def unplaced() -> list[str]:
        pods = job_pods(core_v1, namespace, "must-share-a-leaf")
        return [p.spec.node_name for p in pods if p.spec.node_name]

    # Long enough for several scheduling attempts; a hard constraint waits rather than spreads.
    holds_for("no pod of a gang no leaf can hold placed", lambda: unplaced() == [], 20, interval=INTERVAL_S)
    bound = unplaced()
    assert bound == [], f"a gang no leaf can hold was (partly) placed: {bound}"


def tier_event(core_v1: Any, namespace: str, job: str) -> Any:
    """fabricsched's Event saying the gang's required tier cannot be met, on one of its pods."""
    for event in core_v1.list_namespaced_event(namespace).items:
        involved = event.involved_object
        if (event.reason == "FabricTierUnsatisfiable" and involved.kind == "Pod"
                and (involved.name or "").startswith(f"{job}-")):
            return event
    return None


def test_pod_without_gpus_is_scheduled_as_usual(core_v1: Any, namespace: str) -> None:
    # managedResources: the scheduler does not call the extender for it.
    core_v1.create_namespaced_pod(namespace, {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cpu-only"},
        "spec": {"schedulerName": SCHEDULER_NAME, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "main", "image": PAUSE_IMAGE}]},
    })
    node = wait_for("the CPU-only pod to be bound",
                    lambda: core_v1.read_namespaced_pod("cpu-only", namespace).spec.node_name, timeout=60,
                    interval=INTERVAL_S)
    assert node

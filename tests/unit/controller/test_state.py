"""ClusterState: incremental updates, change notifications, claims, snapshots, restore."""

from __future__ import annotations

import pytest
from controller_harness import RECOVER_S, Harness, gpu_node, topology_body

import builders
from fabricsched import ids
from fabricsched.ports import changes
from fabricsched.topology import fabric
from timing import START

IB = ids.TopologyName("ib")


def free(h: Harness, node: str) -> int:
    snap = h.state.snapshot(IB)
    assert snap is not None
    return snap.free_gpus[ids.NodeName(node)]


def test_snapshot_holds_selected_gpu_nodes_only(synced: Harness) -> None:
    synced.state.apply_node(builders.make_node("cpu-1").leaf("l1").spine("s1").label("gpu", "yes").build())
    synced.state.apply_node(gpu_node("other").unlabel("gpu").build())
    snap = synced.state.snapshot(IB)
    assert snap is not None
    assert sorted(snap.fabric.hosts) == ["l1-h0", "l1-h1", "l2-h0", "l2-h1"]
    assert synced.state.topology_holding_most([ids.NodeName("cpu-1")]) is None
    assert synced.state.topology_holding_most([ids.NodeName("l1-h0")]) == IB


def test_a_heartbeat_changes_nothing(synced: Harness) -> None:
    body = gpu_node("l1-h0").build()
    body["status"]["conditions"][0]["lastHeartbeatTime"] = "2030-01-01T00:00:00Z"
    before = synced.state.generation
    snap = synced.state.snapshot(IB)
    synced.state.apply_node(body)
    assert synced.state.generation == before
    assert synced.state.snapshot(IB) is snap


def test_bound_gpu_pod_lowers_free_gpus_and_notifies(synced: Harness) -> None:
    pod = builders.make_pod("p", "train").gpus(6).on("l1-h0")
    synced.state.apply_pod(pod.build())
    assert free(synced, "l1-h0") == 2
    assert [c.pod.name for c in synced.of(changes.PodBound)] == ["p"]
    synced.state.apply_pod(pod.phase("Succeeded").build())
    assert free(synced, "l1-h0") == 8
    ended = synced.of(changes.PodEnded)
    assert [(c.pod.name, c.deleted) for c in ended] == [("p", False)]


def test_pending_pod_holds_nothing_until_bound(synced: Harness) -> None:
    pod = builders.make_pod("p", "train").gpus(8)
    synced.state.apply_pod(pod.build())
    assert free(synced, "l1-h1") == 8 and not synced.of(changes.PodBound)
    synced.state.apply_pod(pod.on("l1-h1").build())
    assert free(synced, "l1-h1") == 0 and len(synced.of(changes.PodBound)) == 1


def test_deleting_a_bound_pod_frees_its_gpus(synced: Harness) -> None:
    synced.state.apply_pod(builders.make_pod("p", "train").gpus(4).on("l2-h0").build())
    synced.state.delete_pod("train", "p")
    assert free(synced, "l2-h0") == 8
    assert [(c.pod.name, c.deleted) for c in synced.of(changes.PodEnded)] == [("p", True)]
    assert ("train", "p") not in synced.state.pods


def test_pods_are_also_kept_per_namespace(synced: Harness) -> None:
    for name, namespace in (("a", "train"), ("b", "train"), ("c", "eval")):
        synced.state.apply_pod(builders.make_pod(name, namespace).gpus(1).build())
    assert sorted(synced.state.pods_in("train")) == [("train", "a"), ("train", "b")]
    synced.state.delete_pod("train", "a")
    synced.state.delete_pod("eval", "c")
    assert list(synced.state.pods_in("train")) == [("train", "b")]
    assert synced.state.pods_in("eval") == {} and synced.state.pods_in("nowhere") == {}


def test_unbound_pods_are_those_of_pods_without_a_node(synced: Harness) -> None:
    """The pods that wait, kept as they change (the preemption sweep and the page read them
    every second instead of passing over every pod)."""
    state = synced.state
    for name in ("a", "b", "c"):
        state.apply_pod(builders.make_pod(name, "train").gpus(1).build())
    state.apply_pod(builders.make_pod("a", "train").gpus(1).on("l1-h0").build())
    state.apply_pod(builders.make_pod("d", "train").gpus(1).on("l1-h1").build())
    state.delete_pod("train", "c")
    assert sorted(state.unbound_pods) == [("train", "b")]
    assert state.unbound_pods == {k: p for k, p in state.pods.items() if p.node is None}
    state.apply_pod(builders.make_pod("b", "train").gpus(1).phase("Failed").build())
    assert state.unbound_pods[("train", "b")].phase == "Failed"  # the record as it is now


def test_pods_without_gpu_requests_are_not_kept(synced: Harness) -> None:
    synced.state.apply_pod(builders.make_pod("web", "apps").on("l1-h0").build())
    assert synced.state.pods == {}
    assert not synced.of(changes.PodBound)


def test_kept_pods_carry_their_labels_and_only_gang_annotations(synced: Harness) -> None:
    # Every label (a PodDisruptionBudget may select on ``team``); annotations of the gang conventions.
    pod = (builders.make_pod("p", "train").gpus(8).gang("g", 2).label("team", "x")
           .annotate("checksum/config", "abc").job("j", "uid-j", index=0))
    synced.state.apply_pod(pod.build())
    kept = synced.state.pods[("train", "p")]
    assert set(kept.labels) == {"fabricsched.io/gang", "batch.kubernetes.io/job-name",
                                "batch.kubernetes.io/job-completion-index", "team"}
    assert not kept.labels_cut
    assert set(kept.annotations) == {"fabricsched.io/gang-size"}


def job_body(name: str = "j", uid: str = "uid-j", finished: str | None = None,
             deleting: bool = False) -> dict[str, object]:
    status: dict[str, object] = {}
    if finished:
        status["conditions"] = [{"type": finished, "status": "True"}]
    meta: dict[str, object] = {"name": name, "namespace": "train", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"parallelism": 4, "completions": 8, "completionMode": "Indexed"},
            "status": status}


def test_jobs_report_finished_and_deleted_once(synced: Harness) -> None:
    synced.state.apply_job(job_body())
    job = synced.state.jobs[("train", "j")]
    assert (job.pods, job.finished) == (4, False)
    assert synced.state.job_by_uid("train", "uid-j") == job
    synced.state.apply_job(job_body(finished="Complete"))
    synced.state.apply_job(job_body(finished="Complete"))
    synced.state.delete_job("train", "j")
    assert [c.job.name for c in synced.of(changes.JobFinished)] == ["j"]
    deleted = synced.of(changes.JobDeleted)
    assert len(deleted) == 1 and deleted[0].job.deleted


def test_a_recreated_job_ends_the_old_one(synced: Harness) -> None:
    synced.state.apply_job(job_body(uid="old"))
    synced.state.apply_job(job_body(uid="new"))
    assert [c.job.uid for c in synced.of(changes.JobDeleted)] == ["old"]
    assert synced.state.jobs[("train", "j")].uid == "new"


def test_condition_degrades_at_once_and_recovers_after_the_wait(synced: Harness) -> None:
    synced.state.apply_node(gpu_node("l1-h0").condition("FabricLinkDegraded", True, "symbol errors").build())
    snap = synced.state.snapshot(IB)
    assert snap is not None and snap.fabric.hosts[ids.NodeName("l1-h0")].state is fabric.HealthState.DEGRADED
    synced.state.apply_node(gpu_node("l1-h0").condition("FabricLinkDegraded", False).build())
    synced.clock.advance(RECOVER_S - 1)
    synced.state.tick()
    assert ids.NodeName("l1-h0") in {e.name for e in synced.state.topologies[IB].health()}
    synced.clock.advance(1)
    synced.state.tick()
    assert synced.state.topologies[IB].health() == {}
    kinds = [c.change.kind for c in synced.of(changes.HealthChanged)]
    assert kinds == ["degraded", "recovering", "recovered"]


def test_node_selected_by_two_topologies_belongs_to_none(synced: Harness) -> None:
    synced.state.apply_topology("other", topology_body("other", uid="uid-other",
                                                       nodeSelector={"matchLabels": {"leaf": "one"}}))
    synced.state.apply_node(gpu_node("l1-h0").label("leaf", "one").build())
    assert synced.state.topology_holding_most([ids.NodeName("l1-h0")]) is None
    snap = synced.state.snapshot(IB)
    assert snap is not None and ids.NodeName("l1-h0") not in snap.fabric.hosts
    assert [(c.kind, c.node) for c in snap.conflicts] == [("multipleTopologies", "l1-h0")]
    synced.state.delete_topology("other")
    assert synced.state.topology_holding_most([ids.NodeName("l1-h0")]) == IB
    snap = synced.state.snapshot(IB)
    assert snap is not None and snap.conflicts == ()


def test_editing_the_selector_moves_nodes(synced: Harness) -> None:
    synced.state.apply_topology("ib", topology_body(generation=2, nodeSelector={"matchLabels": {"x": "y"}}))
    snap = synced.state.snapshot(IB)
    assert snap is not None and not snap.fabric.hosts
    assert synced.state.objects[IB].generation == 2


def test_invalid_spec_has_no_fabric_and_a_reason(harness: Harness) -> None:
    harness.state.apply_topology("bad", topology_body("bad", tiers=[]))
    obj = harness.state.objects[ids.TopologyName("bad")]
    assert obj.invalid is not None and "tiers" in obj.invalid
    assert harness.state.snapshot(ids.TopologyName("bad")) is None


def test_broken_subscriber_does_not_stop_updates(synced: Harness) -> None:
    def broken(_: changes.Change) -> None:
        raise RuntimeError("boom")

    synced.state.subscribe(broken)
    synced.state.apply_pod(builders.make_pod("p", "train").gpus(2).on("l1-h0").build())
    assert free(synced, "l1-h0") == 6


RESTORED = {
    "degraded": [{
        "kind": "node", "node": "l1-h0", "state": "degraded", "capacity": 0.5,
        "since": "2023-11-14T22:13:00Z", "recoveringSince": "2023-11-14T22:13:19Z",
        "sources": [{"source": "condition", "reason": "FabricLinkDegraded: symbol errors"}],
    }],
}


@pytest.mark.parametrize("topology_first", [True, False],
                         ids=["topology listed before its nodes", "nodes listed before the topology"])
def test_restart_resumes_a_recovery_wait(harness: Harness, topology_first: bool) -> None:
    # START is 22:13:20Z; the wait began at 22:13:19Z and lasts 3 s.
    def topology() -> None:
        harness.state.apply_topology("ib", topology_body(status=RESTORED))

    if topology_first:
        topology()
    harness.fabric({"l1": 2})
    if not topology_first:
        topology()
    harness.state.mark_synced()
    record = harness.state.topologies[IB].health()
    assert [(e.name, r.recovering_since) for e, r in record.items()] == [("l1-h0", START - 1)]
    assert not harness.of(changes.HealthChanged)  # nothing changed: no Event on restart
    harness.clock.advance(1.5)
    harness.state.tick()
    assert harness.state.topologies[IB].health() != {}
    harness.clock.advance(1)
    harness.state.tick()
    assert harness.state.topologies[IB].health() == {}


def test_restart_keeps_a_degraded_node_degraded_since_the_old_time(harness: Harness) -> None:
    status = {"degraded": [dict(RESTORED["degraded"][0], recoveringSince=None)]}
    harness.state.apply_topology("ib", topology_body(status=status))
    harness.state.apply_node(gpu_node("l1-h0").condition("FabricLinkDegraded", True, "symbol errors").build())
    harness.state.mark_synced()
    harness.clock.advance(60)
    harness.state.tick()
    (record,) = harness.state.topologies[IB].health().values()
    assert (record.since, record.recovering_since) == (START - 20, None)
    assert not harness.of(changes.HealthChanged)

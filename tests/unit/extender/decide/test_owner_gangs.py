"""Owner-sized gangs through the coordinator: one key for identify, prioritize, bind tracking,
admission and restore (issue 11 items 2 and 3). The owners come from an in-memory fetcher
standing in for the API server's GETs; pods are labelled as the JobSet controller labels them
(sigs.k8s.io/jobset pkg/controllers/jobset_controller.go, labelAndAnnotateObject)."""

from __future__ import annotations

from extender_harness import Harness, fabric_nodes, leaf_of, relabel
from owner_objects import Owners, jobset, jobset_pod

from builders import PodBuilder, make_pod
from fabricsched.extender.book import objects
from fabricsched.extender.decide import verdicts


def with_owners(harness: Harness) -> Owners:
    owners = Owners()
    harness.coordinator.owners.fetcher = owners
    return owners


def test_a_jobset_of_two_jobs_of_three_binds_every_pod_on_its_planned_rank(harness: Harness) -> None:
    owners = with_owners(harness)
    owners.objects[("JobSet", "train", "llm")] = jobset("llm", "uid-js")
    pods = [jobset_pod("llm", "uid-js", j, c) for j in range(2) for c in range(3)]
    for pod in pods:
        harness.state.apply_pod(pod.build())
    placed = []
    for rank, pod in enumerate(pods):
        node = harness.place(pod)
        (entry,) = harness.book.entries()
        assert entry.size == 6 and entry.ranks[rank] == node, (rank, node, entry.ranks)
        assert harness.coordinator.prioritize(pod.on(node).build(), [node]).planned == node
        placed.append(node)
    (entry,) = harness.book.entries()
    assert sorted(entry.bound) == list(range(6)) and entry.job_name is None
    assert len({leaf_of(n) for n in placed}) == 2  # six 8-GPU pods on four-host leaves: two leaves
    assert owners.reads == 1


def test_a_jobset_plan_survives_a_restart_under_the_same_key(harness: Harness) -> None:
    owners = with_owners(harness)
    owners.objects[("JobSet", "train", "llm")] = jobset("llm", "uid-js", jobs=1, pods=2)
    pods = [jobset_pod("llm", "uid-js", 0, c) for c in range(2)]
    for pod in pods:
        harness.state.apply_pod(pod.build())
    first = harness.place(pods[0])
    again = Harness(fabric_nodes())
    again.store.objects = harness.store.objects
    again.state.apply_pod(pods[0].on(first).build())
    again.state.apply_pod(pods[1].build())
    again.coordinator.owners.fetcher = owners
    again.restore()
    (entry,) = again.book.entries()
    assert entry.key == "train/llm@uid-js" and entry.bound == {0: first}
    second = again.place(pods[1])
    assert second == entry.ranks[1]


def test_a_jobset_waits_for_its_last_gpu_pod_sized_by_the_owner_not_by_the_pods(harness: Harness) -> None:
    owners = with_owners(harness)
    owners.objects[("JobSet", "train", "llm")] = jobset("llm", "uid-js")
    pod = jobset_pod("llm", "uid-js", 0, 0).annotate("fabricsched.io/gang-size", "1")
    answer = harness.filter(pod)
    assert set(answer.failed.values()) == {"waiting for 5 more pods of gang train/llm"}
    assert len(harness.book) == 0


def test_a_pod_of_a_jobset_not_read_yet_waits_named_and_never_places_alone(harness: Harness) -> None:
    owners = with_owners(harness)
    answer = harness.filter(jobset_pod("ghost", "uid-g", 0, 0))
    (reason,) = set(answer.failed.values())
    assert answer.passed == [] and reason == "gang not identified: JobSet train/'ghost' does not exist"
    assert len(reason.encode()) <= verdicts.MAX_REASON_BYTES
    assert harness.events.reasons() == ["GangUnresolved"] and len(harness.book) == 0
    harness.filter(jobset_pod("ghost", "uid-g", 0, 0))
    assert harness.events.reasons() == ["GangUnresolved"]  # once per interval
    assert owners.reads == 1  # asked again only after the retry interval


def test_an_unreadable_replica_spec_is_named_in_the_reason(harness: Harness) -> None:
    owners = with_owners(harness)
    broken = jobset("llm", "uid-js")
    broken["spec"]["replicatedJobs"] = {"not": "a list"}
    owners.objects[("JobSet", "train", "llm")] = broken
    (reason,) = set(harness.filter(jobset_pod("llm", "uid-js", 0, 0)).failed.values())
    assert reason.startswith("gang not identified: JobSet train/'llm' is unreadable: spec.replicatedJobs")


def test_a_gang_whose_pods_ask_different_gpu_counts_is_refused(harness: Harness) -> None:
    owners = with_owners(harness)
    owners.objects[("JobSet", "train", "llm")] = jobset("llm", "uid-js", jobs=1, pods=2)
    harness.state.apply_pod(jobset_pod("llm", "uid-js", 0, 1, gpus=4).build())
    answer = harness.filter(jobset_pod("llm", "uid-js", 0, 0))
    (reason,) = set(answer.failed.values())
    assert "different GPU counts" in reason and answer.passed == [] and len(harness.book) == 0
    assert "GangUnresolved" in harness.events.reasons()


def test_a_gang_podgroup_is_one_gang_and_a_basic_one_is_not(harness: Harness) -> None:
    owners = with_owners(harness)
    owners.objects[("PodGroup", "train", "pg")] = {
        "kind": "PodGroup", "metadata": {"name": "pg", "uid": "uid-pg"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}}

    def member(i: int) -> PodBuilder:
        pod = make_pod(f"pg-{i}", "train").gpus(8).scheduler("fabricsched")
        pod._spec["schedulingGroup"] = {"podGroupName": "pg"}
        return pod

    for i in range(3):
        harness.state.apply_pod(member(i).build())
    placed = [harness.place(member(i)) for i in range(3)]
    (entry,) = harness.book.entries()
    assert entry.key == "train/pg@podgroup" and sorted(entry.bound) == [0, 1, 2]
    assert len({leaf_of(n) for n in placed}) == 1
    assert objects.manifest_of(entry)["spec"]["jobUID"] == "podgroup"


def test_path_events_of_a_jobset_gang_go_to_the_jobset_also_after_a_restart(harness: Harness) -> None:
    owners = with_owners(harness)
    owners.objects[("JobSet", "train", "llm")] = jobset("llm", "uid-js", jobs=1, pods=2)
    pods = [jobset_pod("llm", "uid-js", 0, c) for c in range(2)]
    for pod in pods:
        harness.state.apply_pod(pod.build())
    placed = [harness.place(pod) for pod in pods]
    harness.events.events.clear()
    relabel(harness, placed[0], "degraded")
    subjects = sorted(s for s, why, _, _ in harness.events.events if why == "PathDegraded")
    assert subjects == ["FabricPlacement/llm", "JobSet/llm"]

    again = Harness(fabric_nodes())
    again.store.objects = harness.store.objects
    for pod, node in zip(pods, placed, strict=True):
        again.state.apply_pod(pod.on(node).build())
    again.restore()
    relabel(again, placed[1], "degraded")
    subjects = sorted(s for s, why, _, _ in again.events.events if why == "PathDegraded")
    assert subjects == ["FabricPlacement/llm", "JobSet/llm"]


def test_path_events_of_a_podgroup_gang_name_the_podgroup_with_its_uid(harness: Harness) -> None:
    owners = with_owners(harness)
    owners.objects[("PodGroup", "train", "pg")] = {
        "kind": "PodGroup", "metadata": {"name": "pg", "uid": "uid-pg"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    pods = []
    for i in range(2):
        pod = make_pod(f"pg-{i}", "train").gpus(8).scheduler("fabricsched")
        pod._spec["schedulingGroup"] = {"podGroupName": "pg"}
        harness.state.apply_pod(pod.build())
        pods.append(pod)
    placed = [harness.place(pod) for pod in pods]
    (entry,) = harness.book.entries()
    ref = harness.coordinator.workloads.workload_of(entry)
    assert ref is not None and (ref.kind, ref.name, ref.uid) == ("PodGroup", "pg", "uid-pg")
    harness.events.events.clear()
    relabel(harness, placed[0], "degraded")
    assert "PodGroup/pg" in {s for s, why, _, _ in harness.events.events if why == "PathDegraded"}

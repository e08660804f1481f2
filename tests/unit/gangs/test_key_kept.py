"""The gang key kept on a pod's record (``gangs.key_of``): computed once per record when the
pod alone decides it, never kept when a PodGroup's policy (read from the owners) decides it."""

from __future__ import annotations

import dataclasses

from gang_lookups import Owners

from builders import make_pod
from fabricsched import gangs
from fabricsched.topology import nodes


class Counting(Owners):
    """The owners, counting the PodGroup reads (the only read the key makes)."""

    reads = 0

    def pod_group(self, namespace: str, name: str) -> gangs.PodGroupFacts | None:
        self.reads += 1
        return super().pod_group(namespace, name)


def job_pod() -> nodes.PodUsage:
    manifest = make_pod("train-0", "train").gpus(8).label("batch.kubernetes.io/job-name", "train").build()
    manifest["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "uid-train", "controller": True}]
    return nodes.PodUsage.from_manifest(manifest)


def test_a_job_pods_key_is_kept_on_its_record_and_a_new_record_starts_without_it() -> None:
    pod = job_pod()
    key = gangs.key_of(pod, Owners())
    assert key == "train/train@uid-train"
    assert pod.derived == {"gang-key": key}
    assert gangs.key_of(pod, Owners()) == key
    changed = dataclasses.replace(pod, node="n1")
    assert changed.derived == {} and changed == dataclasses.replace(pod, node="n1")
    assert pod == job_pod()  # what is kept is no part of the record's value


def test_a_podgroup_pods_key_follows_the_podgroup_read_now() -> None:
    manifest = make_pod("p-0", "train").gpus(8).build()
    manifest["spec"]["schedulingGroup"] = {"podGroupName": "pg"}
    pod = nodes.PodUsage.from_manifest(manifest)
    gang = Counting(pod_groups={"pg": gangs.PodGroupFacts("pg", "uid-pg", gang_min_count=3)})
    basic = Counting(pod_groups={"pg": gangs.PodGroupFacts("pg", "uid-pg", gang_min_count=None)})
    assert gangs.key_of(pod, gang) == "train/pg@podgroup"
    assert gangs.key_of(pod, basic) != "train/pg@podgroup"  # a basic policy falls through
    assert gangs.key_of(pod, gang) == "train/pg@podgroup"
    assert (gang.reads, basic.reads, pod.derived) == (2, 1, {})

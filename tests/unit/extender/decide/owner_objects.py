"""Owner objects as the API server serves them (a JobSet with an initializer Job and a GPU Job),
pods labelled as the JobSet controller labels them (sigs.k8s.io/jobset
pkg/controllers/jobset_controller.go, labelAndAnnotateObject), and an in-memory owner fetcher."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from builders import PodBuilder, make_pod
from fabricsched.gangs import sources as gang_sources


class Owners:
    """The API server's owner objects: kind, namespace, name -> manifest."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.reads = 0

    async def get(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.reads += 1
        return self.objects.get((kind, namespace, name))


def job_template(pods: int, gpus: int) -> dict[str, Any]:
    resources = {"requests": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {"spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                     "template": {"spec": {"containers": [{"name": "c", "resources": resources}]}}}}


def jobset(name: str, uid: str, jobs: int = 2, pods: int = 3, gpus: int = 8) -> dict[str, Any]:
    return {"kind": "JobSet", "metadata": {"name": name, "namespace": "train", "uid": uid},
            "spec": {"replicatedJobs": [
                {"name": "initializer", "replicas": 1, "template": job_template(1, 0)},
                {"name": "node", "replicas": jobs, "template": job_template(pods, gpus)},
            ]}}


def jobset_pod(name: str, uid: str, job_index: int, completion: int, gpus: int = 8) -> PodBuilder:
    job = f"{name}-node-{job_index}"
    pod = make_pod(f"{job}-{completion}-x", "train").job(job, f"uid-{job}", completion)
    for key, value in {
        gang_sources.JOBSET_NAME: name, gang_sources.JOBSET_UID: uid,
        gang_sources.JOBSET_REPLICATED_JOB: "node", gang_sources.JOBSET_JOB_INDEX: str(job_index),
        gang_sources.JOBSET_GLOBAL_INDEX: str(1 + job_index),
    }.items():
        pod.label(key, value)
    return pod.gpus(gpus).scheduler("fabricsched")

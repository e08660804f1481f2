"""A pod that names a workload which does not own it waits, and its reason names the workload, so
a user can find it (``kubectl get pytorchjob ghost``)."""

from __future__ import annotations

from gang_lookups import Owners

from builders import make_pod
from fabricsched import gangs


def test_a_kubeflow_worker_without_an_owner_waits_with_a_reason_naming_its_job() -> None:
    pod = (make_pod("ghost-worker-0", "train").gpus(8)
           .label("training.kubeflow.org/job-name", "ghost")
           .label("training.kubeflow.org/replica-type", "worker")
           .label("training.kubeflow.org/replica-index", "0").usage())
    found = gangs.identify(pod, Owners())
    assert isinstance(found, gangs.Unsized)
    assert "ghost" in found.reason and "train/ghost" in found.reason
    assert "train/ghost" in found.missing
    # Never a lone pod: its key is the training job's, whatever its owner turns out to be.
    assert gangs.key_of(pod, Owners()) == "train/ghost"


def test_the_named_job_in_the_reason_is_bounded() -> None:
    name = "g" * 100_000
    pod = (make_pod("worker-0", "train").gpus(8)
           .label("training.kubeflow.org/job-name", name)
           .label("training.kubeflow.org/replica-index", "0").usage())
    found = gangs.identify(pod, Owners())
    assert isinstance(found, gangs.Unsized)
    assert len(found.reason) < 400 and len(found.missing) < 200

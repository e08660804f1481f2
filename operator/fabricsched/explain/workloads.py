"""The workload kinds ``explain`` knows: where to read them and how to find their pods.

Pure data and matching, no I/O: ``reader`` fetches, ``report`` matches FabricPlacements to the
workload. A gang's FabricPlacement names its workload by an owner reference (Jobs), by
``spec.jobUID`` (the owner's UID in the gang key), or by ``spec.gang`` (the workload's name,
plus the group index for a LeaderWorkerSet).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fabricsched.explain import bounds


@dataclass(frozen=True)
class WorkloadKind:
    kind: str
    group: str
    """API group; empty for the core group."""
    version: str
    plural: str
    pod_label: str
    """Label on the workload's pods whose value is ``pod_value`` of the workload."""
    pod_value: str = "name"
    """``name`` or ``uid``: which of the workload's fields ``pod_label`` carries."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str, name: str) -> str:
        return f"/apis/{self.api_version}/namespaces/{namespace}/{self.plural}/{name}"

    def pod_selector(self, name: str, uid: str) -> str:
        return f"{self.pod_label}={uid if self.pod_value == 'uid' else name}"


KINDS: tuple[WorkloadKind, ...] = (
    WorkloadKind("Job", "batch", "v1", "jobs", "batch.kubernetes.io/controller-uid", "uid"),
    WorkloadKind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", "jobset.sigs.k8s.io/jobset-name"),
    WorkloadKind("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs", "training.kubeflow.org/job-name"),
    WorkloadKind("MPIJob", "kubeflow.org", "v2beta1", "mpijobs", "training.kubeflow.org/job-name"),
    WorkloadKind(
        "LeaderWorkerSet",
        "leaderworkerset.x-k8s.io",
        "v1",
        "leaderworkersets",
        "leaderworkerset.sigs.k8s.io/name",
    ),
    # A TrainJob runs as a JobSet of the same name: its pods carry the JobSet's label.
    WorkloadKind(
        "TrainJob", "trainer.kubeflow.org", "v1alpha1", "trainjobs", "jobset.sigs.k8s.io/jobset-name"
    ),
)
"""Tried in this order for a NAME that is no FabricPlacement; the first that exists wins."""


def kind_named(kind: str) -> WorkloadKind | None:
    return next((k for k in KINDS if k.kind == kind), None)


def belongs_to(placement: Mapping[str, Any], kind: str, name: str, uid: str) -> bool:
    """True when the FabricPlacement is (one of) the workload's gang(s)."""
    metadata = bounds.mapping(placement, "metadata")
    for owner in bounds.items(metadata, "ownerReferences", 16):
        if isinstance(owner, Mapping) and uid and owner.get("uid") == uid:
            return True
    spec = bounds.mapping(placement, "spec")
    if uid and spec.get("jobUID") == uid:
        return True
    gang = spec.get("gang")
    if not isinstance(gang, str):
        return False
    if gang == name:
        return True
    # One gang per LeaderWorkerSet group: NAME-<group index>.
    suffix = gang.removeprefix(f"{name}-")
    return kind == "LeaderWorkerSet" and suffix != gang and suffix.isascii() and suffix.isdigit()


def owner_of(placement: Mapping[str, Any]) -> tuple[WorkloadKind, str] | None:
    """The known workload kind and name a FabricPlacement's owner reference names."""
    metadata = bounds.mapping(placement, "metadata")
    for owner in bounds.items(metadata, "ownerReferences", 16):
        if not isinstance(owner, Mapping):
            continue
        kind = kind_named(str(owner.get("kind")))
        name = owner.get("name")
        if kind is not None and isinstance(name, str) and name:
            return kind, name
    return None

"""The workload object a gang belongs to: where its path Events go besides its FabricPlacement.

A user watches the object they submitted (``kubectl describe jobset llm``), not the Job or pods
under it, so a PathDegraded Event goes to the gang's JobSet, PyTorchJob, MPIJob,
LeaderWorkerSet, PodGroup or Job. The object is read from one pod of the gang (the same
conventions as ``gang_sources``): remembered when the gang is planned and, after a restart,
from its bound pods. A lone pod's gang has no workload object (its FabricPlacement has the
Event). A TrainJob's Events go to the JobSet it runs as (its pods name only the JobSet).
"""

from __future__ import annotations

from collections.abc import Collection

from fabricsched import ids
from fabricsched.extender import gang_sources, gangs, reservations
from fabricsched.ports import notices
from fabricsched.topology import nodes

API_VERSIONS = {
    "JobSet": "jobset.x-k8s.io/v1alpha2",
    "PyTorchJob": "kubeflow.org/v1",
    "MPIJob": "kubeflow.org/v2beta1",
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
    "PodGroup": "scheduling.k8s.io/v1beta1",
}


def of_pod(pod: nodes.PodUsage, key: ids.GangKey, pod_group_uid: str = "") -> notices.ObjectRef | None:
    """The workload of gang ``key`` as its pod ``pod`` names it (None: a lone pod's gang);
    ``pod_group_uid`` is the PodGroup's UID when known (the pod does not carry it)."""
    labels, namespace = pod.labels, pod.namespace
    job = gangs.job_reference(pod)
    if gangs.GANG_LABEL in labels:
        return _job(job, namespace)
    if pod.pod_group and key.endswith("@podgroup"):
        api_version = API_VERSIONS["PodGroup"]
        return notices.ObjectRef(api_version, "PodGroup", pod.pod_group, pod_group_uid, namespace)
    if labels.get(gang_sources.JOBSET_NAME):
        return notices.ObjectRef(API_VERSIONS["JobSet"], "JobSet", labels[gang_sources.JOBSET_NAME],
                                 labels.get(gang_sources.JOBSET_UID, ""), namespace)
    if labels.get(gang_sources.KUBEFLOW_JOB_NAME):
        owner = pod.owner
        if owner is None or owner[0] not in gang_sources.TRAINING_KINDS:
            return None
        return notices.ObjectRef(API_VERSIONS[owner[0]], owner[0], owner[1], owner[2], namespace)
    if labels.get(gang_sources.LWS_NAME):
        name = labels[gang_sources.LWS_NAME]
        return notices.ObjectRef(API_VERSIONS["LeaderWorkerSet"], "LeaderWorkerSet", name, "", namespace)
    return _job(job, namespace)


def of_entry(entry: reservations.Entry) -> notices.ObjectRef | None:
    """The workload a book entry alone names: its Job (what the entry was planned for)."""
    if not entry.job_name:
        return None
    return notices.ObjectRef("batch/v1", "Job", entry.job_name, entry.job_uid, entry.namespace)


def _job(job: tuple[str, str] | None, namespace: str) -> notices.ObjectRef | None:
    return None if job is None else notices.ObjectRef("batch/v1", "Job", job[0], job[1], namespace)


class Registry:
    """Gang key -> its workload object, for the gangs in the book."""

    def __init__(self) -> None:
        self._refs: dict[ids.GangKey, notices.ObjectRef | None] = {}

    def remember(self, key: ids.GangKey, pod: nodes.PodUsage, pod_group_uid: str = "") -> None:
        if key not in self._refs:
            self._refs[key] = of_pod(pod, key, pod_group_uid)

    def knows(self, key: ids.GangKey) -> bool:
        return key in self._refs

    def workload_of(self, entry: reservations.Entry) -> notices.ObjectRef | None:
        """Where ``entry``'s path Events go besides its FabricPlacement."""
        if entry.key in self._refs:
            return self._refs[entry.key]
        return of_entry(entry)

    def keep(self, keys: Collection[ids.GangKey]) -> None:
        """Forget the gangs that left the book."""
        self._refs = {k: v for k, v in self._refs.items() if k in keys}

"""The workload object a gang belongs to: where its path Events go besides its FabricPlacement.

A user watches the object they submitted (``kubectl describe jobset llm``), not the Job or pods
under it, so a PathDegraded Event goes to the gang's JobSet, PyTorchJob, MPIJob,
LeaderWorkerSet, PodGroup or Job. The object is read from one pod of the gang
(``gangs.workload_of``): remembered when the gang is planned and, after a restart, from its
bound pods. A lone pod's gang has no workload object (its FabricPlacement has the
Event). A TrainJob's Events go to the JobSet it runs as (its pods name only the JobSet).
"""

from __future__ import annotations

from collections.abc import Collection

from fabricsched import ids
from fabricsched.extender.book import reservations
from fabricsched.ports import notices


def of_entry(entry: reservations.Entry) -> notices.ObjectRef | None:
    """The workload a book entry alone names: its Job (what the entry was planned for)."""
    if not entry.job_name:
        return None
    return notices.ObjectRef("batch/v1", "Job", entry.job_name, entry.job_uid, entry.namespace)


class Registry:
    """Gang key -> its workload object, for the gangs in the book."""

    def __init__(self) -> None:
        self._refs: dict[ids.GangKey, notices.ObjectRef | None] = {}

    def remember(self, key: ids.GangKey, workload: notices.ObjectRef | None) -> None:
        """The gang's workload object (``gangs.workload_of`` of one of its pods)."""
        if key not in self._refs:
            self._refs[key] = workload

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

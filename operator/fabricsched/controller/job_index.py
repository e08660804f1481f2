"""The cluster's Jobs, by name and by UID, and the changes an update of one means.

Pods name their Job by owner UID, so the index answers both ways. It emits nothing itself:
``apply`` and ``delete`` return the changes for the state to publish.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from fabricsched.ports import changes
from fabricsched.ports import jobs as job_types

JobKey = tuple[str, str]
"""(namespace, name) of a Job."""


class JobIndex:
    def __init__(self) -> None:
        self._jobs: dict[JobKey, job_types.JobInfo] = {}
        self._by_uid: dict[tuple[str, str], JobKey] = {}
        """(namespace, uid) -> the Job holding that UID."""

    @property
    def jobs(self) -> Mapping[JobKey, job_types.JobInfo]:
        return self._jobs

    def apply(self, body: Mapping[str, Any]) -> list[changes.Change]:
        job = job_types.JobInfo.from_manifest(body)
        key = (job.namespace, job.name)
        old = self._jobs.get(key)
        if old == job:
            return []
        out: list[changes.Change] = []
        self._jobs[key] = job
        if old is not None and old.uid != job.uid:
            # Deleted and recreated under the same name while the delete went unseen.
            self._unindex(old)
            out.append(changes.JobDeleted(replace(old, deleted=True)))
            old = None
        self._by_uid.setdefault((job.namespace, job.uid), key)
        if job.finished and (old is None or not old.finished):
            out.append(changes.JobFinished(job))
        if job.deleted and (old is None or not old.deleted):
            out.append(changes.JobDeleted(job))
        return out

    def delete(self, namespace: str, name: str) -> list[changes.Change]:
        old = self._jobs.pop((namespace, name), None)
        if old is None:
            return []
        self._unindex(old)
        return [] if old.deleted else [changes.JobDeleted(replace(old, deleted=True))]

    def by_uid(self, namespace: str, uid: str) -> job_types.JobInfo | None:
        key = self._by_uid.get((namespace, uid))
        return self._jobs.get(key) if key is not None else None

    def _unindex(self, old: job_types.JobInfo) -> None:
        index = (old.namespace, old.uid)
        if self._by_uid.get(index) != (old.namespace, old.name):
            return
        del self._by_uid[index]
        # Another Job of the namespace with the same UID (only ever an empty one) takes over.
        for key, job in self._jobs.items():
            if job.uid == old.uid and job.namespace == old.namespace:
                self._by_uid[index] = key
                break

"""``JobInfo``: what fabricsched keeps of a batch/v1 Job, read from its manifest.

One type for a Job seen by the watch (the cluster state) and one read on demand (the
extender's lookup of a Job whose watch event trails its pods): both parse the same JSON, so
"finished" and the gang size are decided in one place: ``pods_at_once`` is the one rule for a
Job's gang size (``JobInfo.pods``, and a JobSet's Job templates).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

FINISHED_CONDITIONS = frozenset({"Complete", "Failed"})
"""A Job with one of these conditions True runs no more pods: its plan can be released."""


@dataclass(frozen=True)
class JobInfo:
    """What the gang logic needs of a batch/v1 Job."""

    namespace: str
    name: str
    uid: str
    parallelism: int
    completions: int | None
    finished: bool
    """A ``Complete`` or ``Failed`` condition is True: its plan can be released."""
    deleted: bool = False
    """``metadata.deletionTimestamp`` is set, or the delete event arrived."""
    @property
    def pods(self) -> int:
        """The Job's gang size: how many of its pods run at once (``pods_at_once``)."""
        return pods_at_once(self.parallelism, self.completions)

    @classmethod
    def from_manifest(cls, body: Mapping[str, Any]) -> JobInfo:
        """From the Job's JSON (a watch event's body, or a GET's); raises KeyError without a
        name and ValueError on a non-integer count."""
        metadata = body.get("metadata") or {}
        spec = body.get("spec") or {}
        status = body.get("status") or {}
        completions = spec.get("completions")
        parallelism = spec.get("parallelism")
        return cls(
            namespace=str(metadata.get("namespace") or "default"),
            name=str(metadata["name"]),
            uid=str(metadata.get("uid") or ""),
            parallelism=int(parallelism) if parallelism is not None else 1,
            completions=int(completions) if completions is not None else None,
            finished=is_finished(status.get("conditions") or ()),
            deleted=bool(metadata.get("deletionTimestamp")),
        )


def pods_at_once(parallelism: int, completions: int | None) -> int:
    """A Job's gang size: min(parallelism, completions); parallelism alone for a work-queue Job
    (no ``completions``). An unset ``parallelism`` is Kubernetes' default, 1, for the caller to pass."""
    return parallelism if completions is None else min(parallelism, completions)


def is_finished(conditions: Iterable[object]) -> bool:
    """A ``Complete`` or ``Failed`` condition with status True among a Job's conditions."""
    return any(
        isinstance(c, Mapping) and c.get("type") in FINISHED_CONDITIONS and c.get("status") == "True"
        for c in conditions
    )

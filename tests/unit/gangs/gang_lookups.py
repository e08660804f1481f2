"""An in-memory ``gangs.OwnerLookup`` for the gang tests (what the extender's owner cache would
hold from its reads), and Job facts as the cluster state keeps them."""

from __future__ import annotations

from dataclasses import dataclass, field

from fabricsched import gangs
from fabricsched.ports import jobs


def job(
    name: str, uid: str, parallelism: int, completions: int | None, namespace: str = "train"
) -> jobs.JobInfo:
    """An Indexed Job, running."""
    return jobs.JobInfo(namespace, name, uid, parallelism, completions, finished=False)


@dataclass
class Owners:
    """The owners the adapter knows, by name (the namespace is the pod's)."""

    jobs: dict[str, jobs.JobInfo] = field(default_factory=dict)
    jobsets: dict[str, gangs.JobSetFacts] = field(default_factory=dict)
    training: dict[tuple[str, str], gangs.TrainingJobFacts] = field(default_factory=dict)
    pod_groups: dict[str, gangs.PodGroupFacts] = field(default_factory=dict)

    @classmethod
    def of_job(cls, known: jobs.JobInfo | None) -> Owners:
        """A lookup that knows one Job (None: none)."""
        return cls(jobs={known.name: known} if known is not None else {})

    def job(self, namespace: str, name: str) -> jobs.JobInfo | None:
        return self.jobs.get(name)

    def jobset(self, namespace: str, name: str) -> gangs.JobSetFacts | None:
        return self.jobsets.get(name)

    def training_job(self, namespace: str, kind: str, name: str) -> gangs.TrainingJobFacts | None:
        return self.training.get((kind, name))

    def pod_group(self, namespace: str, name: str) -> gangs.PodGroupFacts | None:
        return self.pod_groups.get(name)


NOBODY = Owners()
"""A lookup that knows no owner."""

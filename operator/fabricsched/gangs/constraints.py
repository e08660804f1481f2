"""What a gang asks of the fabric: its tiers and slices, from its pods and its PodGroup.

Pure, like the rest of ``gangs``. Precedence (docs/workloads.md "Placement constraints"): a
fabricsched annotation on the pods wins over the native constraint; a PodGroup's own
``spec.schedulingConstraints.topology[0].key`` wins over its Workload template's. The native
key is a node label key: the extender maps it to the tier whose ``nodeLabel`` it is
(``placement.request.gang_on`` cannot: it names tiers). Every value is bounded and parsed
strictly (``parsing.Invalid`` names the annotation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fabricsched import parsing
from fabricsched.gangs import identity, owners
from fabricsched.placement import request

SLICE_SIZE_ANNOTATION = "fabricsched.io/slice-size"
SLICE_REQUIRED_TIER_ANNOTATION = "fabricsched.io/slice-required-tier"
SLICE_PREFERRED_TIER_ANNOTATION = "fabricsched.io/slice-preferred-tier"
SLICE_PER_JOB_ANNOTATION = "fabricsched.io/slice-per-job"
TRAFFIC_ANNOTATION = "fabricsched.io/traffic"
"""``all-to-all`` or ``ring``: the pattern the capacity model prices the gang's plans with."""


@dataclass(frozen=True)
class Constraints:
    """A gang's constraints by name, as its pods (or its PodGroup) ask for them."""

    tier: str | None = None
    """The required tier, else the preferred one; None: the lowest that fits."""
    required: bool = False
    preferred: str | None = None
    """A lower preferred tier beside a required ``tier``."""
    slices: request.Slices | None = None
    topology_key: str | None = None
    """The native constraint's node label key (a required tier), when no annotation names one."""
    traffic: request.Pattern | None = None
    """The gang's traffic pattern; None: its fabric's default (``spec.traffic``)."""


def of_pod(
    annotations: Mapping[str, str], pod_group: owners.PodGroupFacts | None = None,
    jobset: owners.JobSetFacts | None = None,
) -> Constraints:
    """The constraints of a gang from one pod's annotations, its PodGroup's facts (when its
    gang is a PodGroup's) and its JobSet's (for ``slice-per-job``); raises ``parsing.Invalid``."""
    required, preferred = identity.tier_constraint_pair(annotations)
    key = None
    if required is None and preferred is None and pod_group is not None:
        key = pod_group.topology_key or pod_group.template_topology_key
    tier = required or preferred
    return Constraints(
        tier=tier, required=required is not None,
        preferred=preferred if required is not None else None,
        slices=_slices(annotations, jobset), topology_key=key, traffic=traffic_of(annotations),
    )


def traffic_of(annotations: Mapping[str, str]) -> request.Pattern | None:
    """The ``fabricsched.io/traffic`` annotation: None when absent or empty."""
    text = annotations.get(TRAFFIC_ANNOTATION)
    if not text:
        return None
    try:
        return request.Pattern(text)
    except ValueError:
        names = " or ".join(p.value for p in request.Pattern)
        raise parsing.Invalid(
            f"annotation {TRAFFIC_ANNOTATION}={parsing.excerpt(text)} is not {names}") from None


def _slices(annotations: Mapping[str, str], jobset: owners.JobSetFacts | None) -> request.Slices | None:
    required = identity.tier_annotation(annotations, SLICE_REQUIRED_TIER_ANNOTATION)
    preferred = identity.tier_annotation(annotations, SLICE_PREFERRED_TIER_ANNOTATION)
    text = annotations.get(SLICE_SIZE_ANNOTATION)
    per_job = annotations.get(SLICE_PER_JOB_ANNOTATION)
    if per_job not in (None, "", "true", "false"):
        raise parsing.Invalid(f"annotation {SLICE_PER_JOB_ANNOTATION}={parsing.excerpt(per_job)} "
                              "is not true or false")
    if text:
        size = parsing.count(text, f"annotation {SLICE_SIZE_ANNOTATION}", identity.MAX_GANG_SIZE, minimum=1)
    elif per_job == "true":
        size = _pods_per_job(jobset)
    elif required or preferred:
        raise parsing.Invalid(f"a slice tier needs annotation {SLICE_SIZE_ANNOTATION} "
                              f"(or {SLICE_PER_JOB_ANNOTATION}: \"true\" on a JobSet's pods)")
    else:
        return None
    tier = required or preferred
    if tier is None:
        raise parsing.Invalid(f"annotation {SLICE_SIZE_ANNOTATION} needs {SLICE_REQUIRED_TIER_ANNOTATION} "
                              f"or {SLICE_PREFERRED_TIER_ANNOTATION}")
    return request.Slices(size, tier, required is not None)


def _pods_per_job(jobset: owners.JobSetFacts | None) -> int:
    if jobset is None:
        raise parsing.Invalid(f"annotation {SLICE_PER_JOB_ANNOTATION} is for a JobSet's pods")
    sizes = {rj.pods_per_job for rj in jobset.replicated_jobs if rj.gpus_per_pod > 0}
    if len(sizes) != 1:
        raise parsing.Invalid(f"annotation {SLICE_PER_JOB_ANNOTATION}: the GPU Jobs of JobSet "
                              f"{parsing.excerpt(jobset.name)} differ in size ({sorted(sizes)}); "
                              f"set {SLICE_SIZE_ANNOTATION}")
    size = sizes.pop()
    if size < 1:
        raise parsing.Invalid(f"annotation {SLICE_PER_JOB_ANNOTATION}: JobSet {parsing.excerpt(jobset.name)} "
                              "has Jobs of no pods")
    return size

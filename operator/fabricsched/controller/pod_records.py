"""What the state keeps of a pod: only GPU pods, their labels (a bounded number) and only the
annotations the gang conventions read (50,000 pods add up)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from fabricsched import gangs
from fabricsched.gangs import kinds
from fabricsched.topology import nodes as k8s

# The conventions the gang key reads (``gangs``): a pod record without the workload labels would
# key as its child Job, not as the JobSet's gang it was planned in.
KEPT_LABEL_PREFIXES = gangs.LABEL_PREFIXES
# And Kueue's: preemption reads them from these records.
_KEPT_LABELS = kinds.LEGACY_LABELS | kinds.KUEUE_LABELS
MAX_OTHER_LABELS = 64
"""Labels outside the conventions kept per pod: a PodDisruptionBudget may select on any of them
(``app``, ``team``), matched against these records. A pod with more is marked ``labels_cut``
(every budget with a selector then covers it: it protects rather than exposes)."""


def requests_extended(body: Mapping[str, Any]) -> bool:
    """The pod requests an extended resource or claims DRA devices (its GPUs may come from them)."""
    spec = body.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    for group in ("containers", "initContainers"):
        for container in spec.get(group) or ():
            resources = container.get("resources") or {}
            for part in ("requests", "limits"):
                if any("/" in str(k) for k in resources.get(part) or {}):
                    return True
    return False


def _kept(key: str) -> bool:
    return key in _KEPT_LABELS or key.startswith(KEPT_LABEL_PREFIXES)


def trimmed(pod: k8s.PodUsage) -> k8s.PodUsage:
    """Drop annotations outside the gang conventions, and labels past ``MAX_OTHER_LABELS``
    (the API server bounds each label's key and value already): 50k pods add up."""
    labels, cut = pod.labels, False
    if len(labels) > MAX_OTHER_LABELS:
        others = sorted(k for k in labels if not _kept(k))
        cut = len(others) > MAX_OTHER_LABELS
        if cut:
            dropped = set(others[MAX_OTHER_LABELS:])
            labels = {k: v for k, v in labels.items() if k not in dropped}
    return replace(
        pod,
        labels=labels,
        annotations={k: v for k, v in pod.annotations.items() if _kept(k)},
        labels_cut=cut,
    )

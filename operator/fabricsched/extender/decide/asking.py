"""One scheduler request, computed once: what every step of a filter call reads.

Built at the top of ``Coordinator.filter`` (``_ask``): the pod parsed once, its gang identified
once (one key, one owner read), its plan read from the book once, its fabric's snapshot looked up
once (the GPU resource name is the snapshot's). Everything below the top reads these fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fabricsched import gangs, ids
from fabricsched.extender.book import reservations
from fabricsched.extender.decide import eligibility
from fabricsched.ports import views
from fabricsched.topology import nodes


@dataclass(frozen=True)
class PodRequest:
    pod: nodes.PodUsage
    candidates: Sequence[ids.NodeName]
    """The nodes the kube-scheduler found feasible, as it sent them."""
    key: ids.GangKey
    """The gang key from the pod (``gangs.key_of``), as the book holds it."""
    gang: gangs.GangIdentity | gangs.Unsized
    entry: reservations.Entry | None
    """The gang's plan in the book, if any."""
    snapshot_or_none: views.SnapshotView | None
    """The fabric the gang is (or will be) planned in; None only for an unsized gang."""
    gpu_resource: str
    """The fabric's GPU resource name (``spec.gpuResource``)."""
    created: float | None
    """When the pod was created (how long a gang waited for its plan), from the manifest."""
    constraints: eligibility.NodeConstraints | None = eligibility.NONE
    """The pod's node selector and required node affinity; None when unreadable."""

    @property
    def snapshot(self) -> views.SnapshotView:
        assert self.snapshot_or_none is not None, "an unsized gang is answered before any plan"
        return self.snapshot_or_none

"""What the preemption sweep (``preempting``) is given: its options (the ``fabricsched run``
flags) and the seam to the API server it reads budgets and namespaces through and evicts with."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from fabricsched.extender.decide import budgets
from fabricsched.placement import request


class PreemptionCalls(Protocol):
    """What preemption needs of the API server (``extender.kube.disruptions.FollowedDisruptions``:
    budgets and namespaces from its watches, read from the API only while those are not current)."""

    async def budgets(self, namespace: str) -> Sequence[budgets.Budget]:
        """The namespace's PodDisruptionBudgets; raises ``errors.ApiError``."""
        ...

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """The namespace's labels (at least the opt-out label); raises ``errors.ApiError``."""
        ...

    async def evict(self, namespace: str, name: str, uid: str) -> None:
        """Evict one pod through the Eviction API (policy/v1); a pod already gone is no error;
        raises ``errors.ApiError`` (429 when a budget refuses)."""
        ...

    @property
    def api_waited_s(self) -> float:
        """Seconds spent so far waiting for API reads of budgets and namespaces (none while
        they come from memory): what a decision logs as waiting for the API."""
        ...


BUDGET_SOURCES = ("watch", "read")


@dataclass(frozen=True)
class PreemptionOptions:
    enabled: bool = True
    """``--preemption lower-priority`` (True) or ``off``."""
    rounds_per_minute: int = 6
    """Most preemption rounds (evictions or yields) started per minute (``--preemption-rate``)."""
    evict_kueue: bool = False
    """Kueue-managed workloads may be victims (``--preemption-evict-kueue``)."""
    budgets_from: str = "watch"
    """``--preemption-budgets``: budgets and namespaces from their watches, or ``read`` at each decision."""
    interval_s: float = 1.0
    placement: request.PlacementOptions = dataclasses.field(default_factory=request.PlacementOptions)

    def __post_init__(self) -> None:
        if self.rounds_per_minute < 1:
            raise ValueError(f"preemption rate must be at least 1 per minute, not {self.rounds_per_minute}")
        if self.budgets_from not in BUDGET_SOURCES:
            raise ValueError(f"preemption budgets must be one of watch, read, not {self.budgets_from[:32]!r}")

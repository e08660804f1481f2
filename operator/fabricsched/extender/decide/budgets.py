"""Who may be a victim: PodDisruptionBudgets, Kueue, and the namespace opt-out, as the flags the
engine's ``RunningWorkload`` carries (docs/preemption.md, "Who can be a victim").

Pure: the budgets come parsed (``extender.kube.disruptions`` follows them); no I/O here. A
budget's selector is matched against the labels of the pods the state holds, as the
kube-scheduler matches it against its informer's pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from fabricsched.gangs import kinds
from fabricsched.topology import nodes, selectors

OPT_OUT_LABEL = "fabricsched.io/preemption"
"""A namespace labelled with this key and the value ``never`` neither preempts nor is preempted."""
OPT_OUT_VALUE = "never"


@dataclass(frozen=True)
class Budget:
    """One PodDisruptionBudget, as far as preemption reads it."""

    name: str
    selector: selectors.Selector | None
    """None selects no pod (a budget without a selector, as policy/v1 reads it)."""
    disruptions_allowed: int
    current: bool
    """``status.observedGeneration`` equals ``metadata.generation``: the status is about this spec."""

    def covers(self, pod: nodes.PodUsage) -> bool:
        if self.selector is None:
            return False
        # A pod with more labels than its record keeps may carry the one the selector reads.
        return pod.labels_cut or self.selector.matches(pod.labels)


def covering_all(name: str) -> Budget:
    """A budget that covers every pod of its namespace and allows no disruption: what stands for
    budgets that cannot be read, or are more than are kept (it protects rather than exposes)."""
    return Budget(name=name, selector=selectors.Selector(), disruptions_allowed=0, current=False)


def opted_out(labels: Mapping[str, str]) -> bool:
    return labels.get(OPT_OUT_LABEL) == OPT_OUT_VALUE


def kueue_managed(pods: Iterable[nodes.PodUsage]) -> bool:
    """A pod Kueue admitted (``gangs.kinds.KUEUE_LABELS``): Kueue owns its lifecycle, so it is
    never a victim unless the flag says so."""
    return any(label in p.labels for p in pods for label in kinds.KUEUE_LABELS)


def protected(pods: Sequence[nodes.PodUsage], budgets: Sequence[Budget]) -> bool:
    """Whether evicting every pod of the workload would break a budget: a budget covering its
    pods allows fewer disruptions than the pods it covers, or its status is stale; a pod under
    two budgets is always protected (the Eviction API refuses it)."""
    covering: dict[str, int] = {}
    for pod in pods:
        over = [b for b in budgets if b.covers(pod)]
        if len(over) > 1:
            return True
        for budget in over:
            covering[budget.name] = covering.get(budget.name, 0) + 1
    by_name = {b.name: b for b in budgets}
    return any(not by_name[name].current or by_name[name].disruptions_allowed < count
               for name, count in covering.items())

"""What the decisions answer the kube-scheduler: the filter verdict and the scores."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

PLANNED_SCORE = 10
OTHER_SCORE = 0


@dataclass(frozen=True)
class FilterAnswer:
    passed: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""


@dataclass(frozen=True)
class Scores:
    """Prioritize's answer: ``planned`` scores ``PLANNED_SCORE``, every other node
    ``OTHER_SCORE``. Kept as the node list and one name, not 10k pairs, so the server can
    encode it in one pass; iterating gives the (node, score) pairs."""

    nodes: Sequence[str]
    planned: str | None

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return ((n, PLANNED_SCORE if n == self.planned else OTHER_SCORE) for n in self.nodes)

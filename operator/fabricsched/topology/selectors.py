"""Kubernetes label selectors (matchLabels + matchExpressions), compiled once per spec.

A selector is evaluated for every node event against every FabricTopology, so it is turned
into a tuple of plain tests up front rather than walking the pydantic model each time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fabricsched.api import topology as api


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    """In, NotIn, Exists or DoesNotExist (matchLabels entries become In with one value)."""
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            # As in Kubernetes: a node without the key satisfies NotIn.
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        return value is None


@dataclass(frozen=True)
class Selector:
    requirements: tuple[Requirement, ...] = ()
    """All must hold; no requirements selects everything."""

    @classmethod
    def compile(cls, selector: api.LabelSelector) -> Selector:
        reqs = [Requirement(k, "In", frozenset({v})) for k, v in sorted(selector.match_labels.items())]
        reqs += [
            Requirement(e.key, e.operator, frozenset(e.values)) for e in selector.match_expressions
        ]
        return cls(tuple(reqs))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return self.query() or "<all nodes>"

    def query(self) -> str:
        """The selector in the API's ``labelSelector`` syntax ("" selects everything)."""
        parts = []
        for r in self.requirements:
            if r.operator in ("In", "NotIn"):
                parts.append(f"{r.key} {r.operator.lower()} ({','.join(sorted(r.values))})")
            else:
                parts.append(("" if r.operator == "Exists" else "!") + r.key)
        return ",".join(parts)

"""Kubernetes label selectors (matchLabels + matchExpressions), compiled once per spec.

A selector is evaluated for every node event against every FabricTopology, so it is turned
into a tuple of plain tests up front rather than walking the pydantic model each time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from fabricsched.api import topology as api


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    """In, NotIn, Exists or DoesNotExist (matchLabels entries become In with one value); a node
    selector term may also say Gt or Lt, with one value."""
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return self.admits(labels.get(self.key))

    def admits(self, value: str | None) -> bool:
        """Whether a label (or field) whose value is ``value`` (None: absent) passes."""
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            # As in Kubernetes: a node without the key satisfies NotIn.
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        return _compare(value, self.operator, next(iter(self.values), None))


def _compare(value: str | None, operator: str, bound: str | None) -> bool:
    """``Gt``/``Lt``: both sides 64-bit integers, else no match (as the kube-scheduler does)."""
    left, right = _int64(value), _int64(bound)
    if left is None or right is None:
        return False
    return left > right if operator == "Gt" else left < right


_INT64 = re.compile(r"[+-]?[0-9]{1,19}")
_INT64_RANGE = range(-(2**63), 2**63)


def _int64(text: str | None) -> int | None:
    """The integer Go's ``strconv.ParseInt(text, 10, 64)`` reads, else None.

    Why not ``int()``: it also takes non-ASCII digits, underscores and surrounding spaces, which
    the kube-scheduler refuses; a node label written that way must not match here either.
    """
    if text is None or not _INT64.fullmatch(text):
        return None
    number = int(text)
    return number if number in _INT64_RANGE else None


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

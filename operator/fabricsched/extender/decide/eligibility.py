"""The nodes a pod may use by its own constraints: ``nodeSelector`` and required node affinity.

Why: a gang held for locality waits for a plan near its floor, and that floor must be one the
gang can reach. Measured on the whole fabric, the floor of a gang that node selectors confine
to a part of it may never be reached there, and the gang would wait its full timeout every
time. The floor is therefore computed over the hosts these constraints allow
(``patience.Floors`` with ``eligible``).

Only the pod's static constraints count: the kube-scheduler's candidates for a pod also drop
the nodes whose GPUs are taken now, which is the very thing a hold waits for. Taints and
tolerations are not read (a GPU node pool's taints are tolerated by the GPU pods sent to it).

Pure and strict: the manifest is user input. A constraint this module cannot read (an unknown
operator, a malformed entry, more terms than ``_MAX_ITEMS``) makes it ``UNREADABLE``: the gang
is then not held, as holding on a floor computed from a guess is worse than not holding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fabricsched import ids
from fabricsched.topology import nodes, selectors

_MAX_ITEMS = 64
"""Most selector entries, terms, expressions per term and values per expression read."""
_MAX_TEXT = 317
"""Longest key or value read (a qualified label key: 253 + '/' + 63)."""

_SET_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


@dataclass(frozen=True)
class _Test:
    requirement: selectors.Requirement
    field: bool = False
    """A ``matchFields`` test: ``metadata.name`` is the only field Kubernetes supports."""

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        return self.requirement.admits(name if self.field else labels.get(self.requirement.key))


@dataclass(frozen=True)
class NodeConstraints:
    """The pod's node constraints: every selector test, and any one of the affinity terms."""

    selector: tuple[_Test, ...] = ()
    terms: tuple[tuple[_Test, ...], ...] | None = None
    """None: no required node affinity; otherwise a node must match at least one term."""

    @property
    def unconstrained(self) -> bool:
        return not self.selector and self.terms is None

    def allows(self, name: str, labels: Mapping[str, str]) -> bool:
        if not all(t.matches(name, labels) for t in self.selector):
            return False
        if self.terms is None:
            return True
        return any(term and all(t.matches(name, labels) for t in term) for term in self.terms)

    def eligible(
        self, hosts: Iterable[ids.NodeName], infos: Mapping[ids.NodeName, nodes.NodeInfo]
    ) -> frozenset[ids.NodeName] | None:
        """The ``hosts`` these constraints allow (a node not known has no labels); None when
        the pod has no constraints (every host)."""
        if self.unconstrained:
            return None
        return frozenset(h for h in hosts if self.allows(h, infos[h].labels if h in infos else {}))


NONE = NodeConstraints()
"""A pod with neither a node selector nor required node affinity."""

UNREADABLE = None
"""What ``of`` returns for constraints it cannot read."""


class _Unreadable(ValueError):
    pass


def of(manifest: Mapping[str, Any]) -> NodeConstraints | None:
    """The pod's node constraints; ``UNREADABLE`` (None) when they cannot be read."""
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        return NONE
    try:
        selector = _selector(spec.get("nodeSelector"))
        terms = _terms(spec.get("affinity"))
    except _Unreadable:
        return UNREADABLE
    return NodeConstraints(selector, terms)


def _selector(raw: object) -> tuple[_Test, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or len(raw) > _MAX_ITEMS:
        raise _Unreadable
    return tuple(_test(_text(k), "In", (_text(v),)) for k, v in sorted(raw.items()))


def _terms(affinity: object) -> tuple[tuple[_Test, ...], ...] | None:
    if affinity is None:
        return None
    node = _mapping(affinity).get("nodeAffinity")
    if node is None:
        return None
    required = _mapping(node).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    terms = _list(_mapping(required).get("nodeSelectorTerms"))
    return tuple(_term(_mapping(t)) for t in terms)


def _term(term: Mapping[str, Any]) -> tuple[_Test, ...]:
    tests = [_expression(_mapping(e), False) for e in _list(term.get("matchExpressions"))]
    tests += [_expression(_mapping(e), True) for e in _list(term.get("matchFields"))]
    return tuple(tests)


def _expression(raw: Mapping[str, Any], field: bool) -> _Test:
    key, operator = _text(raw.get("key")), raw.get("operator")
    if operator not in _SET_OPERATORS:
        raise _Unreadable
    if field and (key != "metadata.name" or operator not in ("In", "NotIn")):
        raise _Unreadable
    values = tuple(_text(v) for v in _list(raw.get("values")))
    if operator in ("In", "NotIn") and not values:
        raise _Unreadable
    if operator in ("Exists", "DoesNotExist") and values:
        raise _Unreadable
    if operator in ("Gt", "Lt") and len(values) != 1:
        raise _Unreadable
    return _test(key, str(operator), values, field)


def _test(key: str, operator: str, values: tuple[str, ...], field: bool = False) -> _Test:
    return _Test(selectors.Requirement(key, operator, frozenset(values)), field)


def _mapping(raw: object) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise _Unreadable
    return raw


def _list(raw: object) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > _MAX_ITEMS:
        raise _Unreadable
    return raw


def _text(raw: object) -> str:
    if not isinstance(raw, str) or len(raw) > _MAX_TEXT:
        raise _Unreadable
    return raw

"""The API calls of preemption (``decide.preempting.PreemptionCalls``): PodDisruptionBudgets, a
namespace's labels, and evictions through the Eviction API (policy/v1), so the API server
enforces the budgets too (a 429 when one refuses).

Each call is one request in a worker thread, bounded in time, through ``ports.errors.call``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pydantic
from kubernetes import client

from fabricsched import parsing
from fabricsched.api import topology as api_topology
from fabricsched.extender.decide import budgets
from fabricsched.ports import errors
from fabricsched.topology import selectors

logger = logging.getLogger(__name__)
Budget = budgets.Budget

NAMESPACE_TTL_S = 30.0
"""How long a namespace's labels are kept (the opt-out label changes rarely)."""
MAX_BUDGETS = 1000
"""Most budgets read in one namespace (more: the rest protect nothing, and a warning says so)."""
MAX_COVERED = 5000
"""Most pods listed for one budget's selector; a budget selecting more is taken to cover every pod
of its namespace (it protects rather than exposes)."""
COVERED_BUDGETS = 50
"""Budgets of one namespace whose pods are listed; past them, each covers every pod."""
_METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


class ApiPreemptionCalls:
    def __init__(self, api_client: client.ApiClient, timeout_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._core = client.CoreV1Api(api_client)
        self._policy = client.PolicyV1Api(api_client)
        self._timeout_s = timeout_s
        self._clock = clock
        self._labels: dict[str, tuple[float, Mapping[str, str]]] = {}

    async def budgets(self, namespace: str) -> Sequence[budgets.Budget]:
        listed: Any = await asyncio.to_thread(
            errors.call, self._policy.list_namespaced_pod_disruption_budget, namespace,
            limit=MAX_BUDGETS, _request_timeout=self._timeout_s, _preload_content=False,
        )
        try:
            found = budgets_of(parsing.mapping(json.loads(listed.data), "PodDisruptionBudgetList"))
        except (ValueError, AttributeError) as e:  # parsing.Invalid is a ValueError
            message = f"unreadable PodDisruptionBudgets of {namespace}: {e}"
            raise errors.ApiError(message[: errors.MAX_DETAIL]) from e
        return [await self._with_pods(namespace, b) if i < COVERED_BUDGETS else _everything(b)
                for i, b in enumerate(found)]

    async def _with_pods(self, namespace: str, budget: Budget) -> Budget:
        """The budget with the pods its selector lists (names only: metadata, not the pods)."""
        if budget.selector is None:
            return budget
        try:
            listed: Any = await asyncio.to_thread(
                errors.call, self._core.list_namespaced_pod, namespace,
                label_selector=budget.selector.query(), limit=MAX_COVERED,
                _request_timeout=self._timeout_s, _preload_content=False,
                _headers={"Accept": _METADATA_ONLY},
            )
            names = _pod_names(parsing.mapping(json.loads(listed.data), "PodList"))
        except (errors.ApiError, ValueError, AttributeError) as e:
            logger.warning("cannot list the pods of budget %s/%s (taken to cover every pod): %s",
                           namespace, budget.name, str(e)[: errors.MAX_DETAIL])
            return _everything(budget)
        return _everything(budget) if names is None else dataclasses.replace(budget, covered=names)

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        now = self._clock()
        cached = self._labels.get(namespace)
        if cached is not None and now - cached[0] < NAMESPACE_TTL_S:
            return cached[1]
        try:
            found: Any = await asyncio.to_thread(
                errors.call, self._core.read_namespace, namespace, _request_timeout=self._timeout_s
            )
            labels = dict(found.metadata.labels or {}) if found.metadata is not None else {}
        except errors.NotFound:
            labels = {}
        if len(self._labels) > 10_000:
            self._labels.clear()
        self._labels[namespace] = (now, labels)
        return labels

    async def evict(self, namespace: str, name: str, uid: str) -> None:
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            # The pod evicted is the one chosen, not a namesake created since.
            delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
        )
        try:
            await asyncio.to_thread(
                errors.call, self._core.create_namespaced_pod_eviction, name, namespace, body,
                _request_timeout=self._timeout_s,
            )
        except errors.NotFound:
            return  # gone already
        except errors.Conflict:
            return  # the UID precondition failed: the pod chosen is gone


def budgets_of(listed: Mapping[str, Any]) -> list[budgets.Budget]:
    """The budgets of a PodDisruptionBudgetList; an unparsable selector selects every pod (it
    protects rather than exposes)."""
    out = []
    for raw in parsing.sequence(listed.get("items"), "items")[:MAX_BUDGETS]:
        item = parsing.mapping(raw, "items[]")
        metadata = parsing.mapping(item.get("metadata"), "metadata")
        spec = parsing.mapping(item.get("spec"), "spec")
        status = parsing.mapping(item.get("status"), "status")
        out.append(budgets.Budget(
            name=parsing.string(metadata.get("name"), "metadata.name")[:253],
            selector=_selector(spec.get("selector")),
            disruptions_allowed=_int(status.get("disruptionsAllowed")),
            current=_int(status.get("observedGeneration"), -1) == _int(metadata.get("generation"), -2),
        ))
    return out


def _pod_names(listed: Mapping[str, Any]) -> frozenset[str] | None:
    """The names in a pod list; None when the list is cut (more than ``MAX_COVERED``)."""
    if parsing.mapping(listed.get("metadata") or {}, "metadata").get("continue"):
        return None
    names = set()
    for raw in parsing.sequence(listed.get("items") or [], "items")[:MAX_COVERED]:
        metadata = parsing.mapping(parsing.mapping(raw, "items[]").get("metadata"), "metadata")
        names.add(parsing.string(metadata.get("name"), "metadata.name")[:253])
    return frozenset(names)


def _everything(budget: budgets.Budget) -> budgets.Budget:
    """The budget taken to select every pod of its namespace (what it selects is not known)."""
    if budget.selector is None:
        return budget
    return dataclasses.replace(budget, selector=selectors.Selector(), covered=None)


def _selector(raw: object) -> selectors.Selector | None:
    if raw is None:
        return None
    try:
        return selectors.Selector.compile(api_topology.LabelSelector.model_validate(raw))
    except pydantic.ValidationError:
        return selectors.Selector()


def _int(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default

"""The PodDisruptionBudgets (policy/v1) and namespaces preemption reads, followed through
``fabricsched.listwatch`` as the state follows pods: a decision reads them from memory, never
from the API server (as the kube-scheduler's own preemption reads its informer).

``FollowedDisruptions`` is the ``decide.preemption_options.PreemptionCalls`` of the running process:
``budgets`` and ``namespace_labels`` answer from the watched views while those are current (their
first listing applied, the API server serving the kind), else from the per-decision reads of
``evictions.ApiPreemptionCalls``: before the first listing, and when the RBAC lacks list/watch on
the kind (a 403: the informer goes on without it and asks again every minute), the decision reads
the API as it did before; if that read fails too, the namespace's workloads are protected. A
namespace the view does not know (created a moment ago, or past ``MAX_NAMESPACES``) is read too;
one deleted a moment ago answers with the labels it had (``MAX_GONE``).

Bounded: at most ``evictions.MAX_BUDGETS`` budgets parsed per namespace (more stand for one
budget that protects every workload of the namespace, until the rest are deleted), each a name,
a bounded selector and two numbers; of a namespace only its opt-out label.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client

from fabricsched import listwatch, parsing
from fabricsched.extender.decide import budgets, preemption_options
from fabricsched.extender.kube import evictions

BUDGETS_PATH = "/apis/policy/v1/poddisruptionbudgets"
NAMESPACES_PATH = "/api/v1/namespaces"
MAX_NAMESPACES = 100_000
"""Namespaces whose opt-out label is kept; any more are read at the decision."""
MAX_NAMESPACE = 63
MAX_GONE = 1_000
"""Deleted namespaces remembered (the newest), with the labels they had: their pods may still be
in the state a moment after the namespace's own DELETED event (two watches, no order between
them), and a decision then answers from memory instead of reading a namespace that is gone."""
MAX_NAMES = 200_000
"""Budget names kept over all namespaces; past them a namespace a new one arrives in is protected."""
_NO_LABELS: Mapping[str, str] = {}


def _bounded(key: listwatch.Key) -> listwatch.Key:
    """The key an object is kept under (the API server bounds names; a forged one is cut)."""
    return key[0][:MAX_NAMESPACE], key[1][: evictions.MAX_NAME]


class BudgetView:
    """Every namespace's budgets, as the watch delivers them."""

    def __init__(self) -> None:
        self._held: dict[str, dict[str, budgets.Budget]] = {}
        self._over: dict[str, set[str]] = {}
        """Budgets not parsed, their namespace holding ``MAX_BUDGETS`` already (names only)."""
        self._names = 0
        """Names in ``_held`` and ``_over`` together (at most ``MAX_NAMES``)."""
        self._flooded: set[str] = set()
        """Namespaces a budget arrived in once ``MAX_NAMES`` were kept: protected until the
        process restarts (the budgets not kept cannot be told gone)."""
        self._all_flooded = False
        """More such namespaces than ``MAX_NAMESPACES``: every namespace is protected."""
        self._answers: dict[str, tuple[budgets.Budget, ...]] = {}
        """A namespace's budgets as ``of`` answers them, until one of them changes: the same
        object from one decision to the next (``decide.running`` compares them)."""

    def apply(self, body: Mapping[str, Any]) -> None:
        namespace, name = _bounded(listwatch.key_of(body))
        try:
            budget = evictions.budget_of(body)
        except parsing.Invalid:  # the API server validates budgets: a forged one protects
            budget = budgets.covering_all(name)
        held = self._held.get(namespace, {})
        known = name in held or name in self._over.get(namespace, ())
        if not known and self._names >= MAX_NAMES:
            self._flood(namespace)
        elif name in held or len(held) < evictions.MAX_BUDGETS:
            self._names += name not in held
            self._held.setdefault(namespace, held)[name] = budget
            self._drop_over(namespace, name)  # one less if it was there: moved, not added
        else:
            over = self._over.setdefault(namespace, set())
            self._names += name not in over
            over.add(name)
        self._answers.pop(namespace, None)

    def _flood(self, namespace: str) -> None:
        if len(self._flooded) < MAX_NAMESPACES:
            self._flooded.add(namespace)
        else:
            self._all_flooded = True
            self._answers.clear()

    def delete(self, key: listwatch.Key) -> None:
        namespace, name = _bounded(key)
        held = self._held.get(namespace, {})
        if held.pop(name, None) is not None:
            self._names -= 1
        if not held:
            self._held.pop(namespace, None)
        self._drop_over(namespace, name)
        self._answers.pop(namespace, None)

    def _drop_over(self, namespace: str, name: str) -> None:
        over = self._over.get(namespace)
        if over is not None and name in over:
            over.discard(name)
            self._names -= 1
            if not over:
                del self._over[namespace]

    def known(self) -> list[listwatch.Key]:
        held = [(ns, name) for ns, names in self._held.items() for name in names]
        return held + [(ns, name) for ns, names in self._over.items() for name in names]

    def of(self, namespace: str) -> tuple[budgets.Budget, ...]:
        answer = self._answers.get(namespace)
        if answer is None:
            answer = tuple(self._held.get(namespace, {}).values())
            if namespace in self._over or namespace in self._flooded or self._all_flooded:
                answer += (budgets.covering_all(evictions.MORE_BUDGETS),)
            self._answers[namespace] = answer
        return answer


class NamespaceView:
    """Every namespace's opt-out label (the one label preemption reads), as the watch delivers it."""

    def __init__(self) -> None:
        self._opt_out: dict[str, Mapping[str, str]] = {}
        self._gone: dict[str, Mapping[str, str]] = {}
        """Deleted namespaces, oldest first (``MAX_GONE``)."""

    def apply(self, body: Mapping[str, Any]) -> None:
        name = _bounded(listwatch.key_of(body))[1]
        metadata = parsing.mapping(body.get("metadata"), "metadata")
        labels = parsing.string_map(metadata.get("labels"), "metadata.labels")
        if name not in self._opt_out and len(self._opt_out) >= MAX_NAMESPACES:
            return
        value = labels.get(budgets.OPT_OUT_LABEL)
        kept = {budgets.OPT_OUT_LABEL: value[: evictions.MAX_LABEL_VALUE]} if value else _NO_LABELS
        self._opt_out[name] = kept
        self._gone.pop(name, None)  # made again under the same name

    def delete(self, key: listwatch.Key) -> None:
        name = _bounded(key)[1]
        had = self._opt_out.pop(name, None)
        if had is not None:
            self._gone.pop(name, None)
            self._gone[name] = had
            if len(self._gone) > MAX_GONE:
                del self._gone[next(iter(self._gone))]

    def known(self) -> list[listwatch.Key]:
        return [("", name) for name in self._opt_out]

    def labels(self, namespace: str) -> Mapping[str, str] | None:
        """The labels preemption reads (a deleted namespace's last ones); None: a namespace the
        view does not hold."""
        found = self._opt_out.get(namespace)
        return found if found is not None else self._gone.get(namespace)


class Followed:
    """Whether a followed kind can be read from memory: listed once, and served (no 403/404)."""

    def __init__(self) -> None:
        self.listed = False
        self.informer: listwatch.Informer | None = None

    def mark_listed(self) -> None:
        self.listed = True

    @property
    def current(self) -> bool:
        return self.listed and self.informer is not None and self.informer.served


class FollowedDisruptions:
    """``decide.preemption_options.PreemptionCalls`` on the watched budgets and namespaces; ``follow``
    keeps them current until cancelled."""

    def __init__(
        self, api_client: client.ApiClient, reads: preemption_options.PreemptionCalls | None = None,
        compression: bool = False,
    ) -> None:
        config = api_client.configuration
        self._connection = listwatch.Connection(lambda: listwatch.login_of(config), compression)
        self.reads = reads if reads is not None else evictions.ApiPreemptionCalls(api_client)
        """The per-decision reads (and the evictions)."""
        self.budget_view, self.namespace_view = BudgetView(), NamespaceView()
        self.budgets_followed, self.namespaces_followed = Followed(), Followed()
        self.informers = [
            self._informer("poddisruptionbudget", BUDGETS_PATH, self.budget_view, self.budgets_followed),
            self._informer("namespace", NAMESPACES_PATH, self.namespace_view, self.namespaces_followed),
        ]

    def _informer(self, name: str, path: str, view: BudgetView | NamespaceView,
                  followed: Followed) -> listwatch.Informer:
        # Optional: a 403 (RBAC without the rule) or a 404 must not hold readiness back; the
        # decision then reads the API as before.
        kind = listwatch.Kind(name, path, view.apply, view.delete, view.known, optional=True,
                              rejects=(parsing.Invalid,))
        followed.informer = listwatch.Informer(self._connection, kind, on_listed=followed.mark_listed)
        return followed.informer

    async def follow(self) -> None:
        try:
            await asyncio.gather(*(informer.follow() for informer in self.informers))
        finally:
            await self._connection.close()

    async def budgets(self, namespace: str) -> Sequence[budgets.Budget]:
        if self.budgets_followed.current:
            return self.budget_view.of(namespace)
        return await self.reads.budgets(namespace)

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        if self.namespaces_followed.current:
            labels = self.namespace_view.labels(namespace)
            if labels is not None:
                return labels
        return await self.reads.namespace_labels(namespace)

    async def evict(self, namespace: str, name: str, uid: str) -> None:
        await self.reads.evict(namespace, name, uid)

    @property
    def api_waited_s(self) -> float:
        """Only the reads' (a view answers from memory, waiting for nothing)."""
        return self.reads.api_waited_s

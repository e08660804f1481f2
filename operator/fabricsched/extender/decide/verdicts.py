"""Why a pod gets no node: the reason every candidate fails with, naming the rule.

These strings are what ``kubectl describe pod`` shows under "0/N nodes are available", so
they name the gang, the domain and the rule rather than the algorithm's internals. A pod the
filter steers gets its node and no reasons (the scheduler would drop them unread).

The scheduler gets one reason per candidate node (10k of them) and the filter answer repeats
each, so every reason is at most ``MAX_REASON_BYTES`` (``bounded``), user text inside one is
only ever a short excerpt (``parsing.excerpt``, made where the text is read), and a map gives
every node the same string object (``every``).
"""

from __future__ import annotations

from collections.abc import Iterable

from fabricsched import parsing
from fabricsched.extender.book import reservations

MAX_REASON_BYTES = 160
"""Longest reason given for one node (UTF-8 bytes): a filter answer for N nodes stays near
N x (160 + the node's name), whatever a pod carries."""


def bounded(reason: str) -> str:
    """``reason`` cut to ``MAX_REASON_BYTES``, with an ellipsis when cut."""
    return parsing.truncate(reason, MAX_REASON_BYTES)


def every(nodes: Iterable[str], reason: str) -> dict[str, str]:
    """The same bounded reason for every node: one string object shared by all of them."""
    return dict.fromkeys(nodes, bounded(reason))


def rank_taken(entry: reservations.Entry, rank: int) -> str:
    """Why a pod whose rank another live pod of its gang is bound to gets no node."""
    return bounded(
        f"rank {rank} of gang {entry.display} is already bound on {entry.bound[rank]} by another pod "
        "(a duplicated rank, or its previous pod is still terminating)"
    )

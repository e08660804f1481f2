"""Human-readable reasons for plans and NoFits: what an engineer reads in FabricPlacement and Events."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence

from fabricsched import ids
from fabricsched.placement import capacity, slots, tree
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey

MAX_AVOIDED = 4
"""Avoided elements named one by one; the rest are counted."""


def plural(word: str) -> str:
    if word.endswith("f"):
        return word[:-1] + "ves"
    if word.endswith(("s", "x", "sh", "ch")):
        return word + "es"
    return word + "s"


def tier_name(fab: fabric.Fabric, tier: int) -> str:
    return fab.tiers[tier].name if tier < len(fab.tiers) else "fabric"


def shape(fab: fabric.Fabric, index: tree.Tree, holder: DomainKey, below: Mapping[DomainKey, int]) -> str:
    """"fits leaf l03", "fits 2 leaves under spine s1", "spans 3 spines"."""
    tier, name = holder
    if tier == 0:
        return f"fits {tier_name(fab, 0)} {name}"
    if index.levels == 0:
        return "spans several hosts"
    used = sum(1 for key in below if key[0] == tier - 1)
    inner = tier_name(fab, tier - 1)
    words = f"{used} {plural(inner) if used != 1 else inner}"
    if holder == index.root:
        return f"spans {words}"
    return f"fits {words} under {tier_name(fab, tier)} {name}"


def describe_element(fab: fabric.Fabric, element: ids.NodeName | DomainKey) -> str:
    if isinstance(element, tuple):
        state = "down" if fab.domains[element].down else "degraded"
        return f"{tier_name(fab, element[0])} {element[1]}: uplinks {state}"
    state = "down" if fab.hosts[element].down else "degraded"
    return f"host {element}: link {state}"


def avoided(
    fab: fabric.Fabric, index: tree.Tree, start: slots.Base, holders: Iterable[DomainKey]
) -> list[str]:
    """Degraded elements with room that a healthy plan left out, below any of ``holders``.

    Below the holding domain every domain is partially spanned, and the gang spans hosts,
    so any such element with room was a real alternative the engine turned down.
    """
    # "Is the element below a holder", done as set lookups: a host sits below a
    # holder (tier, name) when (tier, name) is one of its path's (tier, domain) pairs, and
    # below every holder at or above the root. ~100 degraded hosts ask this per plan.
    keys = set(holders)
    root = any(h[0] >= index.levels for h in keys)
    found: list[ids.NodeName | DomainKey] = []
    for key in fab.degraded_domains:
        hosts = fab.domains[key].hosts
        if hosts and (
            root
            or not keys.isdisjoint(itertools.islice(enumerate(fab.hosts[hosts[0]].path), key[0] + 1, None))
        ) and (start.per_leaf[key] > 0 if key in start.per_leaf else any(start.slots(n) for n in hosts)):
            found.append(key)
    for name in fab.degraded_hosts:
        if start.slots(name) and (root or not keys.isdisjoint(enumerate(fab.hosts[name].path))):
            found.append(name)
    lines = [f"avoided {describe_element(fab, e)}" for e in found[:MAX_AVOIDED]]
    if len(found) > MAX_AVOIDED:
        lines.append(f"avoided {len(found) - MAX_AVOIDED} more degraded elements")
    return lines


def slowdown_note(
    fab: fabric.Fabric, ranks: Sequence[ids.NodeName], gpus_per_pod: int, traffic: capacity.Traffic | None,
    slowdown: float, caps: capacity.Capacities | None = None, pattern: capacity.Pattern = capacity.ALL_TO_ALL,
) -> list[str]:
    """Why comm_slowdown is above 1 on a healthy path: the most loaded uplink."""
    if slowdown <= 1.0:
        return []
    demand = capacity.gang_demand(fab, ranks, gpus_per_pod, pattern)
    if not demand:
        return []
    key = max(sorted(demand), key=lambda k: capacity.domain_load(fab, k, demand[k], traffic, True, caps))
    return [f"comm_slowdown {slowdown:.2f}: uplink load on {tier_name(fab, key[0])} {key[1]}"]


def fallback(fab: fabric.Fabric, ranks: Sequence[ids.NodeName], slowdown: float) -> str:
    elements = capacity.degraded_elements(fab, ranks)
    shown = ", ".join(elements[:MAX_AVOIDED]) + (", ..." if len(elements) > MAX_AVOIDED else "")
    return f"no healthy placement: placed on lowest comm_slowdown {slowdown:.2f} ({shown})"


def gang(pods: int, gpus_per_pod: int) -> str:
    return f"{pods} pod{'s' if pods != 1 else ''} of {gpus_per_pod} GPUs"


def slices(fab: fabric.Fabric, size: int, tier: int) -> str:
    """How a gang's slices read in a reason: "slices of 4 pods in one leaf"."""
    return f"slices of {size} pods in one {tier_name(fab, tier)}"

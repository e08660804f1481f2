"""A gang's path on the fabric: the elements its traffic crosses, as a query on the fabric tree.

The path of a gang placed on ``ranks`` (DESIGN of the capacity model, docs/extender.md): the
fabric access link of every host when the gang spans more than one host (a single-host gang
talks over NVLink, not the fabric), and the uplinks of every domain the gang spans *partly*
(some of its pods inside, some outside: that traffic leaves the domain). The lowest common
domain and the domains above it carry none of it. A rail is part of its element: an element
with a rail is on the path when the element itself is.

The fabric is a tree whose hosts carry their domain at every tier (``Host.path``), so the
query is a count per domain: no graph library is needed (networkx was dropped for it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fabricsched import ids
from fabricsched.placement import capacity
from fabricsched.topology import fabric, health

ElementKey = tuple[str, str | None, str]
"""(kind, tier name or None, name): an element without its rail, the unit of the path index."""


def key_of(element: health.ElementId) -> ElementKey:
    return (element.kind, element.tier, element.name)


def elements(fab: fabric.Fabric, ranks: Sequence[ids.NodeName]) -> frozenset[ElementKey]:
    """Every element on the path of a gang whose pods sit on ``ranks`` (hosts repeat per pod).

    Hosts unknown to ``fab`` (a node that left the fabric) are left out."""
    known = [r for r in ranks if r in fab.hosts]
    hosts = set(known)
    found: set[ElementKey] = set()
    if len(hosts) > 1:
        found.update(("node", None, str(h)) for h in hosts)
    pods = len(known)
    for (tier, name), n in capacity.pods_per_domain(fab, known).items():
        if n < pods:
            found.add(("domain", str(fab.tiers[tier].name), str(name)))
    return frozenset(found)


def on_path(path: Iterable[ElementKey], element: health.ElementId) -> bool:
    return key_of(element) in set(path)


class PathIndex:
    """Element -> gangs whose path crosses it, kept per topology; ``put`` replaces a gang's path."""

    def __init__(self) -> None:
        self._paths: dict[ids.GangKey, tuple[ids.TopologyName, frozenset[ElementKey]]] = {}
        self._gangs: dict[tuple[ids.TopologyName, ElementKey], set[ids.GangKey]] = {}
        self.version = 0
        """Moves on every change of a path."""

    def put(self, gang: ids.GangKey, topology: ids.TopologyName, path: frozenset[ElementKey]) -> None:
        old = self._paths.get(gang)
        if old == (topology, path):
            return
        self.drop(gang)
        self.version += 1
        self._paths[gang] = (topology, path)
        for element in path:
            self._gangs.setdefault((topology, element), set()).add(gang)

    def drop(self, gang: ids.GangKey) -> None:
        old = self._paths.pop(gang, None)
        if old is None:
            return
        self.version += 1
        topology, path = old
        for element in path:
            holders = self._gangs.get((topology, element))
            if holders is not None:
                holders.discard(gang)
                if not holders:
                    del self._gangs[(topology, element)]

    def gangs_on(self, topology: ids.TopologyName, element: ElementKey) -> frozenset[ids.GangKey]:
        return frozenset(self._gangs.get((topology, element), ()))

    def __len__(self) -> int:
        return len(self._paths)

"""The gang key: one structured form, one string form, and the one place that parses it back.

The string (``ids.GangKey``, ``namespace/name@uid``) is what the book, FabricPlacements and
metrics carry; ``GangRef`` is its parts. ``uid`` is the owner's UID (a Job's, a JobSet's, a
LeaderWorkerSet group's key) or a marker (``podgroup``); a lone pod's gang has the pod's UID.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabricsched import ids

POD_GROUP_MARKER = "podgroup"
"""The UID part of a PodGroup gang's key: its pods name the PodGroup but not its UID, and the
marker keeps it apart from an explicit gang label of the same name."""


@dataclass(frozen=True)
class GangRef:
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> ids.GangKey:
        return ids.gang_key(self.namespace, self.name, self.uid)

    @property
    def display(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, key: ids.GangKey | str) -> GangRef:
        """The parts of a key's string form (a namespace has no ``/``; a UID has no ``@``)."""
        namespace, _, rest = str(key).partition("/")
        name, _, uid = rest.rpartition("@") if "@" in rest else (rest, "", "")
        return cls(namespace, name, uid)

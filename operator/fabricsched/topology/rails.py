"""How a NIC named by a health source becomes a rail of a rail-optimized fabric.

Prometheus rules (a ``device`` label), NVSentinel's node conditions (``NIC:mlx5_3``) and DRA
devices (``dra.net/rdmaDevice``) all name NICs the same way: by their RDMA device name. One map,
built from ``spec.rails`` and ``spec.railDevices``, turns such a name into a rail index for all
of them, so the three sources cannot disagree about which rail a NIC is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fabricsched import parsing
from fabricsched.api import topology as api


@dataclass(frozen=True)
class RailMap:
    """``spec.rails`` and ``spec.railDevices`` of one topology."""

    rails: int = 1
    devices: tuple[str, ...] = ()

    @classmethod
    def of(cls, spec: api.FabricTopologySpec) -> RailMap:
        return cls(spec.rails, tuple(spec.rail_devices))

    def rail(self, value: str | None) -> int | Literal[False] | None:
        """Rail index of a NIC name (or of a rail number); None = the whole element; False =
        not a NIC of this fabric.

        Single-rail fabrics have no rails: every finding concerns the whole element. With
        ``railDevices`` set, a device outside the list (a storage or management NIC) is not part
        of the compute fabric and its findings are ignored.
        """
        if self.rails <= 1 or value is None:
            return None
        if value in self.devices:
            return self.devices.index(value)
        try:
            return parsing.count(value, "rail", self.rails - 1)
        except parsing.Invalid:
            pass  # not a rail number ("²" passes isdigit but not int): not a rail of this fabric
        return False if self.devices else None

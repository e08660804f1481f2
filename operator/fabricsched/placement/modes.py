"""Which elements a multi-host gang may use: the engine's modes, and what each leaves out.

A healthy plan uses no degraded element on its path; a fallback (or health-blind) plan uses
anything but a down one. Below the domain that holds the whole gang every domain is
partially spanned, so its uplinks are on the path.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from fabricsched import ids
from fabricsched.topology import fabric

DomainKey = fabric.DomainKey


class Mode(enum.Enum):
    HEALTHY = "healthy"
    """No degraded or down host, no degraded or down uplink of a partially spanned domain."""
    HEALTHY_HOSTS = "healthy-hosts"
    """Fallback: healthy hosts, uplinks anything but down."""
    HEALTHY_UPLINKS = "healthy-uplinks"
    """Fallback: healthy uplinks, hosts anything but down."""
    NOT_DOWN = "not-down"
    """Anything but a down element (fallback, and the health-blind policy)."""
    ANY = "any"
    """Down elements too: only to tell a NoFit that waits for repairs."""


def _never(element: object) -> bool:
    return False


def _host_degraded(host: fabric.Host) -> bool:
    return host.degraded


def _host_down(host: fabric.Host) -> bool:
    return host.down


def _domain_degraded(domain: fabric.Domain) -> bool:
    return domain.degraded


def _domain_down(domain: fabric.Domain) -> bool:
    return domain.down


_HOSTS_OUT: dict[Mode, Callable[[fabric.Host], bool]] = {
    Mode.HEALTHY: _host_degraded, Mode.HEALTHY_HOSTS: _host_degraded,
    Mode.HEALTHY_UPLINKS: _host_down, Mode.NOT_DOWN: _host_down, Mode.ANY: _never,
}
_DOMAINS_OUT: dict[Mode, Callable[[fabric.Domain], bool]] = {
    Mode.HEALTHY: _domain_degraded, Mode.HEALTHY_HOSTS: _domain_down,
    Mode.HEALTHY_UPLINKS: _domain_degraded, Mode.NOT_DOWN: _domain_down, Mode.ANY: _never,
}

LeftOut = tuple[frozenset[ids.NodeName], frozenset[DomainKey]]
"""Hosts, and domains by their uplinks, that a mode leaves out."""


def left_out(fab: fabric.Fabric, mode: Mode) -> LeftOut:
    """What ``mode`` leaves out of ``fab``: only degraded elements can be, so this costs O(degraded)."""
    host_out, domain_out = _HOSTS_OUT[mode], _DOMAINS_OUT[mode]
    return (frozenset(n for n in fab.degraded_hosts if host_out(fab.hosts[n])),
            frozenset(k for k in fab.degraded_domains if domain_out(fab.domains[k])))

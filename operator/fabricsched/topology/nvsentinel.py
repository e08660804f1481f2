"""NVIDIA NVSentinel's NIC Health Monitor conditions, read per NIC (``conditionPresets: [nvsentinel]``).

What NVSentinel writes (its platform connector, from the monitor's health events): one node
condition per check, ``type`` = the check's name, ``status: "True"`` while a fatal fault of that
check is open (non-fatal faults become Kubernetes Events, not conditions), ``reason``
``<Check>IsNotHealthy``, and a ``message`` of ``;``-terminated entries, one per fault::

    NIC:mlx5_3 NICPort:1 Port mlx5_3 port 1: link_downed - ... Recommended Action=...;

An entry starts with its identity tokens (``ErrorCode:N``, ``NIC:<device>``, ``NICPort:<n>``,
``TYPE:VALUE``), then free text, then ``Recommended Action=``. A healthy condition is ``False``
with the message ``No Health Failures``.

Mapping (docs/telemetry.md): an entry naming one NIC concerns that NIC's rail (through
``spec.railDevices``); a NIC outside ``railDevices`` is not a fabric NIC and is ignored; without
rails the NIC's fault is the whole host's. State checks mark it down (the port is not ACTIVE, or
the device is gone), degradation checks degraded, or down when the entry names one of the
monitor's fatal counters. An entry naming no NIC (a card-level verdict) degrades the whole host.

Strict and bounded: only the first ``MAX_MESSAGE_CHARS`` characters and ``MAX_ENTRIES`` entries
are read. What cannot be read (two NICs in one entry, a NIC token that is no device name, a
message past the limits) degrades the whole host with a reason that says so: a True condition
is a fault report, never ignored, but text we do not understand never marks a host down (a
format change upstream must not take a fleet out).

Pure: no I/O. Returns plain findings; ``topology.health`` turns them into observations.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass

from fabricsched import parsing
from fabricsched.topology import fabric, rails

CHECK_STATES: Mapping[str, fabric.HealthState] = {
    "InfiniBandStateCheck": fabric.HealthState.DOWN,
    "EthernetStateCheck": fabric.HealthState.DOWN,
    "InfiniBandDegradationCheck": fabric.HealthState.DEGRADED,
    "EthernetDegradationCheck": fabric.HealthState.DEGRADED,
}
"""The NIC Health Monitor's condition types and the state an entry naming a NIC gives its rail."""

FATAL_COUNTERS = frozenset({
    "link_downed", "excessive_buffer_overrun_errors", "local_link_integrity_errors", "rnr_nak_retry_err",
})
"""Counters the monitor treats as fatal (its chart's defaults): a degradation entry naming one
downs the rail, as fabricsched's own ``ib-link-downed`` rule does."""

MAX_MESSAGE_CHARS = 8192
"""NVSentinel caps its condition messages well below this; longer text is not read."""

MAX_ENTRIES = 64
"""Faults read from one condition (one per port of the host's NICs is far below this)."""

REASON_CHARS = 160
"""Bound on one finding's reason (status shows it, Events repeat it)."""

_IDENTITY = re.compile(r"([A-Za-z][A-Za-z0-9_]{0,31}):(\S*)", re.ASCII)
_DEVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,62}", re.ASCII)
_PORT = re.compile(r"[0-9]{1,3}", re.ASCII)
_WORD = re.compile(r"[a-z_]{3,40}", re.ASCII)
_HEALTHY_MESSAGE = "no health failures"
_TRUNCATED = "..."


@dataclass(frozen=True)
class Finding:
    """What one condition says about one part of the host."""

    rail: int | None
    """The NIC's rail; None = the whole host."""
    state: fabric.HealthState
    reason: str


def handles(condition_type: str, presets: Collection[str]) -> bool:
    """``condition_type`` is read by an enabled preset (not as a plain whole-host condition)."""
    return "nvsentinel" in presets and condition_type in CHECK_STATES


def findings(condition_type: str, message: str, rail_map: rails.RailMap) -> list[Finding]:
    """The findings of one True condition of an NVSentinel check type (``handles`` is true)."""
    check_state = CHECK_STATES[condition_type]
    head = message[:MAX_MESSAGE_CHARS]
    out: list[Finding] = []
    for count, entry in enumerate(_entries(head)):
        if count == MAX_ENTRIES:
            out.append(_whole_host(condition_type, f"more than {MAX_ENTRIES} faults; the rest not read"))
            break
        finding = _entry_finding(condition_type, check_state, entry, rail_map)
        if finding is not None:
            out.append(finding)
    if len(message) > MAX_MESSAGE_CHARS:
        out.append(_whole_host(condition_type, f"message not read past {MAX_MESSAGE_CHARS} characters"))
    if not out and not _says_healthy(head) and not any(True for _ in _entries(head)):
        out.append(_whole_host(condition_type, "True without a fault in its message"))
    return out


def _entries(text: str) -> Iterator[str]:
    for raw in text.split(";"):
        entry = raw.strip()
        if entry and entry != _TRUNCATED and entry.lower() != _HEALTHY_MESSAGE:
            yield entry


def _says_healthy(text: str) -> bool:
    return text.strip().rstrip(";").strip().lower() == _HEALTHY_MESSAGE


def _entry_finding(condition_type: str, check_state: fabric.HealthState, entry: str,
                   rail_map: rails.RailMap) -> Finding | None:
    """One fault entry -> its finding; None for a NIC that is not part of this fabric."""
    tokens = entry.split()
    nics: set[str] = set()
    port = ""
    text_start = len(tokens)
    for i, token in enumerate(tokens):
        identity = _IDENTITY.fullmatch(token)
        if identity is None:
            text_start = i
            break
        kind, value = identity.groups()
        if kind == "NIC":
            nics.add(value)
        elif kind == "NICPort":
            port = value
    if not nics:
        return _whole_host(condition_type, f"no NIC named: {parsing.excerpt(entry, 60)}")
    if len(nics) > 1:
        return _whole_host(condition_type, f"unreadable fault, {len(nics)} NICs in one entry: "
                                           f"{parsing.excerpt(entry, 60)}")
    (nic,) = nics
    if _DEVICE.fullmatch(nic) is None or (port and _PORT.fullmatch(port) is None):
        return _whole_host(condition_type, f"unreadable fault, NIC:{parsing.excerpt(nic)} "
                                           f"NICPort:{parsing.excerpt(port)}")
    rail = rail_map.rail(nic)
    if rail is False:
        return None  # a storage or management NIC: not this fabric's
    state = check_state
    counter = _fatal_counter(tokens[text_start:])
    if check_state is fabric.HealthState.DEGRADED and counter:
        state = fabric.HealthState.DOWN
    where = f"NIC {nic}" + (f" port {port}" if port else "")
    detail = f" ({counter})" if counter else ""
    return Finding(rail, state, _bounded(f"{condition_type}: {where}{detail}"))


def _fatal_counter(text_tokens: list[str]) -> str:
    for token in text_tokens[:32]:
        word = _WORD.match(token)
        if word is not None and word.group(0) in FATAL_COUNTERS:
            return word.group(0)
    return ""


def _whole_host(condition_type: str, why: str) -> Finding:
    return Finding(None, fabric.HealthState.DEGRADED, _bounded(f"{condition_type}: {why}"))


def _bounded(text: str) -> str:
    return parsing.truncate(text, REASON_CHARS)

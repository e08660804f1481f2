"""Waiting in the cluster tests (integration and e2e): for observable state, never for a fixed time.

The only module under tests/integration that sleeps (``make lint`` runs hack/checks/test_sleeps.py,
which fails on a sleep anywhere else there). ``wait_for`` polls a check until it returns
something truthy and fails the test naming what it waited for and the last value it saw.
``holds_for`` is the same loop turned around, for the few claims that something does *not*
happen: it polls a check for a whole period and fails the moment it turns false (a check every
``interval``, not one look after a sleep). ``paced`` runs a probe at a steady rate, for tests
that measure how a process answers over a period (``/healthz`` while the API server is down).

Needs nothing but pytest: the e2e tests import it on machines without the control plane
(pyproject puts this folder on pytest's ``pythonpath``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

T = TypeVar("T")

INTERVAL_S = 0.2
"""The local control plane answers within milliseconds: five looks a second cost nothing."""


def wait_for(
    what: str, check: Callable[[], T | None], timeout: float = 30.0, interval: float = INTERVAL_S
) -> T:
    """``check()``'s first truthy result, polled every ``interval`` s; fails the test naming
    ``what`` (and the last result) after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last: {_short(result)})",
                        pytrace=False)
        time.sleep(interval)


def holds_for(what: str, check: Callable[[], object], seconds: float, interval: float = INTERVAL_S) -> None:
    """``check()`` stays truthy for ``seconds``, polled every ``interval`` s; fails at the first
    falsy result, naming ``what``."""
    deadline = time.monotonic() + seconds

    def broken() -> bool:
        if not check():
            pytest.fail(f"{what} stopped holding", pytrace=False)
        return time.monotonic() >= deadline

    wait_for(what, broken, timeout=seconds + 30.0, interval=interval)


def paced(probe: Callable[[], None], times: int, interval: float) -> None:
    """``probe()`` ``times`` times, ``interval`` s apart (a steady rate of looks, the last one
    followed by the same pause, as a prober's would be)."""
    for _ in range(times):
        probe()
        time.sleep(interval)


def spread(count: int, seconds: float) -> Iterator[int]:
    """0 .. count-1, spread evenly over ``seconds`` (a load generator's steady rate)."""
    start = time.monotonic()
    for i in range(count):
        delay = start + i * seconds / count - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield i


def pause(seconds: float) -> None:
    """A load generator's gap between two requests (not a wait for state: use ``wait_for``)."""
    time.sleep(seconds)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 300 else f"{text[:300]}..."

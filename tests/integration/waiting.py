"""Waiting in the cluster tests: for observable state, never for a fixed time.

``wait_for`` polls a check until it returns something truthy and fails the test naming what
it waited for and the last value it saw. ``holds`` is the same loop turned around, for the few
claims that something does *not* happen: it polls a check for a whole period and fails the
moment it turns false (a check every ``interval``, not one look after a sleep).
"""

from __future__ import annotations

import time
from collections.abc import Callable
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


def holds(what: str, check: Callable[[], object], seconds: float, interval: float = INTERVAL_S) -> None:
    """``check()`` stays truthy for ``seconds``, polled every ``interval`` s; fails at the first
    falsy result, naming ``what``."""
    deadline = time.monotonic() + seconds

    def broken() -> bool:
        if not check():
            pytest.fail(f"{what} stopped holding", pytrace=False)
        return time.monotonic() >= deadline

    wait_for(what, broken, timeout=seconds + 30.0, interval=interval)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 300 else f"{text[:300]}..."

"""Time in tests, shared by every test folder: a clock the test moves, and polling with a deadline.

Unit tests inject ``Clock`` where the code takes a clock (no test-only parameters, no sleeps);
cluster tests (integration and e2e) poll with ``wait_for``, each folder at its own pace. This
module needs nothing but pytest: the e2e tests import it on machines without the control plane.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

START = 1_700_000_000.0
"""Where a ``Clock`` starts: 2023-11-14T22:13:20Z, a fixed instant so timestamps in
expectations can be written out."""

T = TypeVar("T")


class Clock:
    """A clock that moves only when the test says so."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.2) -> T:
    """``check()``'s first truthy result, polled every ``interval`` s; fails the test naming
    ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}", pytrace=False)
        time.sleep(interval)

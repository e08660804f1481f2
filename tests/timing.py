"""A clock the test moves, shared by every test folder.

Unit tests inject ``Clock`` where the code takes a clock (no test-only parameters, no sleeps).
Cluster tests (integration and e2e) poll real time with ``waiting.wait_for`` instead.
"""

from __future__ import annotations

START = 1_700_000_000.0
"""Where a ``Clock`` starts: 2023-11-14T22:13:20Z, a fixed instant so timestamps in
expectations can be written out."""


class Clock:
    """A clock that moves only when the test says so."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

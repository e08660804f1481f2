"""Where a decision's time went, for its log line: laps of a monotonic clock, named."""

from __future__ import annotations

import time


class Laps:
    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.laps: list[tuple[str, float]] = []

    def lap(self, name: str) -> None:
        """The time since the last lap (or the start) goes to ``name``."""
        now = time.perf_counter()
        self.laps.append((name, now - self._last))
        self._last = now

    def text(self) -> str:
        """``fit check 8.1, workloads 3.2`` (ms)."""
        return ", ".join(f"{name} {seconds * 1000:.1f}" for name, seconds in self.laps)

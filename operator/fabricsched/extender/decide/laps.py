"""Where a decision's time went, for its log line: laps of a monotonic clock, named, and how
much of the whole was this thread's CPU, the process's other threads' CPU (they hold the
interpreter's lock while they run Python) and the cyclic garbage collector's pauses (a slow
decision on a busy machine is told apart from a slow search)."""

from __future__ import annotations

import gc
import time


class _CollectorClock:
    """Seconds the cyclic garbage collector has run since this process first timed a decision."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self._started: float | None = None
        self._installed = False

    def install(self) -> None:
        if not self._installed:
            self._installed = True
            gc.callbacks.append(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, int]) -> None:
        del info
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self.total_s += time.perf_counter() - self._started
            self._started = None


_COLLECTOR = _CollectorClock()


class Laps:
    def __init__(self) -> None:
        _COLLECTOR.install()
        self._last = time.perf_counter()
        self._cpu, self._process = time.thread_time(), time.process_time()
        self._collector = _COLLECTOR.total_s
        self._cpu_s = self._others_s = self._collector_s = 0.0
        self.laps: list[tuple[str, float]] = []

    def lap(self, name: str) -> None:
        """The time since the last lap (or the start) goes to ``name``."""
        now = time.perf_counter()
        self.laps.append((name, now - self._last))
        self._last = now
        self._cpu_s, self._collector_s = time.thread_time() - self._cpu, _COLLECTOR.total_s - self._collector
        self._others_s = max(0.0, time.process_time() - self._process - self._cpu_s)

    def text(self) -> str:
        """``fit check 8.1, workloads 3.2; CPU 10.9, collector 0.0, other threads 0.4`` (ms,
        from the start to the last lap: the thread's CPU, the collector's pauses, and the CPU
        of the process's other threads)."""
        named = ", ".join(f"{name} {seconds * 1000:.1f}" for name, seconds in self.laps)
        return (f"{named}; CPU {self._cpu_s * 1000:.1f}, collector {self._collector_s * 1000:.1f}, "
                f"other threads {self._others_s * 1000:.1f}")

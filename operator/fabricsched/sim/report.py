"""Human-readable summaries: one policy, or several side by side (plain text or Markdown)."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import TextIO

Summary = Mapping[str, float | int | None]

ROWS: tuple[tuple[str, str, str], ...] = (
    # (summary key, label, format)
    ("jobs", "jobs", "int"),
    ("jobs_started", "jobs started", "int"),
    ("wait_mean_s", "wait mean (s)", "f0"),
    ("wait_p95_s", "wait p95 (s)", "f0"),
    ("stretch_mean", "stretch mean (time in system / duration)", "f3"),
    ("makespan_s", "makespan (h)", "hours"),
    ("gpu_utilisation", "GPU utilisation (busy)", "pct"),
    ("gpu_useful_utilisation", "GPU utilisation (useful work)", "pct"),
    ("gangs", "gangs (>1 pod) started", "int"),
    ("gangs_one_leaf_pct", "gangs in one leaf (of those that fit one)", "pct100"),
    ("slowdown_mean", "comm_slowdown mean", "f3"),
    ("slowdown_p95", "comm_slowdown p95", "f3"),
    ("slowdown_over_floor_mean", "slowdown over floor, mean", "f3"),
    ("gangs_degraded_path", "gangs on a degraded path", "int"),
    ("gangs_degraded_avoidable", "... when a healthy placement existed", "int"),
    ("down_element_uses", "down-element uses", "int"),
    ("gangs_held_for_locality", "gangs held for locality", "int"),
    ("held_for_locality_mean_s", "... held, mean (s)", "f0"),
)


def _cell(value: float | int | None, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if fmt == "int":
        return f"{int(value):,}"
    if fmt == "hours":
        return f"{value / 3600:.1f}"
    if fmt == "pct":
        return f"{100 * value:.1f}%"
    if fmt == "pct100":
        return f"{value:.1f}%"
    return f"{value:.{fmt[1:]}f}"


PRIORITY_ROWS: tuple[tuple[str, str, str], ...] = (
    ("jobs", "jobs", "int"),
    ("wait_mean_s", "wait mean (s)", "f0"),
    ("wait_p95_s", "wait p95 (s)", "f0"),
    ("stretch_mean", "stretch mean", "f2"),
    ("stretch_p95", "stretch p95", "f2"),
    ("preemptions", "preemptions suffered", "int"),
    ("gpu_hours_lost", "GPU-hours lost", "f1"),
)
"""Per priority class (``results.by_priority``): stretch is time in the system over duration."""


def priority_table(by_priority: Mapping[str, Mapping[str, Summary]], markdown: bool = False) -> str:
    """Per priority class (highest first) and metric as rows, policies as columns."""
    names = list(by_priority)
    classes = sorted({p for n in names for p in by_priority[n]}, key=int, reverse=True)
    rows = [[f"priority {p}: {label}", *(_cell(by_priority[n].get(p, {}).get(key), fmt) for n in names)]
            for p in classes for key, label, fmt in PRIORITY_ROWS]
    return _render(names, rows, markdown)


def table(summaries: Mapping[str, Summary], markdown: bool = False) -> str:
    """Metrics as rows, policies as columns, in the order given."""
    names = list(summaries)
    rows = [[label, *(_cell(summaries[n].get(key), fmt) for n in names)] for key, label, fmt in ROWS]
    return _render(names, rows, markdown)


def _render(names: list[str], rows: list[list[str]], markdown: bool) -> str:
    header = ["", *names]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" + "---:|" * len(names)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    out = [header, *rows]
    return "\n".join(
        "  ".join(cell.ljust(widths[0]) if c == 0 else cell.rjust(widths[c]) for c, cell in enumerate(row))
        for row in out)


class ProgressBar:
    """A one-line progress bar on a terminal; silent when the stream is not a TTY."""

    def __init__(self, label: str, stream: TextIO | None = None, width: int = 30) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self.label = label
        self.width = width
        self._last = -1

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total <= 0:
            return
        permille = done * 1000 // total
        if permille == self._last:
            return
        self._last = permille
        filled = self.width * done // total
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._last >= 0:
            self.stream.write("\n")
            self.stream.flush()

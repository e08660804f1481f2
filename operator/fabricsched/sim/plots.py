"""Plots of one or several runs: comm_slowdown CDF, wait CDF, GPU utilisation over time.

matplotlib is optional (the ``plot`` extra): it is imported on use, with the Agg backend so
plotting works with no display, and its absence is a clear error, not a traceback.

Every policy keeps one colour in every panel and every figure (``COLOURS``). The slowdown
axis spans 1.0-1.5, where policies differ (a gang above it is counted in the panel's note).
Utilisation is drawn twice per policy: busy GPUs (solid) and useful work (dashed: a gang
stretched by slowdown s does 1/s of work per busy GPU-second), since busy alone makes the
policy that stretches jobs look best.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from fabricsched.sim import policies, results

SLOWDOWN_AXIS = (1.0, 1.5)
_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
COLOURS: Mapping[str, str] = {name: _PALETTE[i] for i, name in enumerate(policies.POLICY_NAMES)}
"""One colour per policy, the same in every panel and every plot."""


class PlotUnavailable(Exception):
    """matplotlib is not installed."""


def colour(policy: str) -> str:
    return COLOURS.get(policy, _PALETTE[-1])


def _pyplot() -> Any:
    try:
        import matplotlib
    except ModuleNotFoundError as e:
        raise PlotUnavailable(
            "--plot needs matplotlib: pip install 'fabricsched[plot]' (or pip install matplotlib)") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _cdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    ordered = sorted(values)
    n = len(ordered)
    return ordered, [(i + 1) / n for i in range(n)]


def useful_series(jobs: Sequence[Mapping[str, Any]], total_gpus: int) -> list[tuple[float, float]]:
    """(time, fraction of GPUs doing useful work): each running job's GPUs / its slowdown."""
    deltas: dict[float, float] = {}
    for job in jobs:
        if job["start_s"] is None or job["end_s"] is None:
            continue
        stretch = job["comm_slowdown"] or 1.0
        gpus = job["pods"] * job["gpus_per_pod"] / max(1.0, stretch)
        deltas[job["start_s"]] = deltas.get(job["start_s"], 0.0) + gpus
        deltas[job["end_s"]] = deltas.get(job["end_s"], 0.0) - gpus
    useful = 0.0
    series: list[tuple[float, float]] = []
    for t in sorted(deltas):
        useful += deltas[t]
        series.append((t, max(0.0, useful) / total_gpus))
    return series


def plot(
    documents: Mapping[str, Mapping[str, Any]], total_gpus: int, path: str | Path | BinaryIO, title: str = ""
) -> None:
    """One PNG with three panels; every policy is one colour in each."""
    plt = _pyplot()
    fig, (slow_ax, wait_ax, util_ax) = plt.subplots(1, 3, figsize=(16, 4.5))
    beyond = 0
    for policy, doc in documents.items():
        jobs = doc["jobs"]
        tint = colour(policy)
        started = [j for j in jobs if j["start_s"] is not None]
        slowdowns = [j["comm_slowdown"] for j in started if j["pods"] > 1 and j["comm_slowdown"] is not None]
        if slowdowns:
            slow_ax.step(*_cdf(slowdowns), where="post", label=policy, color=tint)
            beyond += sum(1 for s in slowdowns if s > SLOWDOWN_AXIS[1])
        waits = [(j["start_s"] - j["submit_s"]) / 60 for j in started]
        if waits:
            wait_ax.step(*_cdf(waits), where="post", label=policy, color=tint)
        for series, style, what in ((results.utilisation_series(jobs, total_gpus), "-", "busy"),
                                    (useful_series(jobs, total_gpus), "--", "useful")):
            if series:
                util_ax.step([t / 3600 for t, _ in series], [100 * u for _, u in series], where="post",
                             label=f"{policy} ({what})", color=tint, linestyle=style, linewidth=0.8)
    off_axis = f" ({beyond} gang-runs above {SLOWDOWN_AXIS[1]:g} off the axis)" if beyond else ""
    slow_ax.set(title="comm_slowdown of gangs (CDF)", xlabel="comm_slowdown" + off_axis,
                ylabel="fraction of gangs", xlim=SLOWDOWN_AXIS, ylim=(0, 1.02))
    wait_ax.set(title="wait (CDF)", xlabel="wait (minutes, log)", ylabel="fraction of jobs")
    wait_ax.set_xscale("symlog", linthresh=1.0)
    util_ax.set(title="GPU utilisation: busy (solid), useful work (dashed)", xlabel="time (h)",
                ylabel="GPUs (%)", ylim=(0, 105))
    for ax in (slow_ax, wait_ax, util_ax):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def png(documents: Mapping[str, Mapping[str, Any]], total_gpus: int, title: str = "") -> bytes:
    """The same figure as PNG bytes (for the HTML report)."""
    buffer = io.BytesIO()
    plot(documents, total_gpus, buffer, title)
    return buffer.getvalue()

"""Plots of one or several runs: comm_slowdown CDF, wait CDF, GPU utilisation over time.

matplotlib is optional (the ``plot`` extra): it is imported on use, with the Agg backend so
plotting works with no display, and its absence is a clear error, not a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fabricsched.sim import results


class PlotUnavailable(Exception):
    """matplotlib is not installed."""


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


def plot(
    documents: Mapping[str, Mapping[str, Any]], total_gpus: int, path: str | Path, title: str = ""
) -> None:
    """One PNG with three panels; every policy is one line in each."""
    plt = _pyplot()
    fig, (slow_ax, wait_ax, util_ax) = plt.subplots(1, 3, figsize=(16, 4.5))
    for policy, doc in documents.items():
        jobs = doc["jobs"]
        started = [j for j in jobs if j["start_s"] is not None]
        slowdowns = [j["comm_slowdown"] for j in started if j["pods"] > 1 and j["comm_slowdown"] is not None]
        if slowdowns:
            slow_ax.step(*_cdf(slowdowns), where="post", label=policy)
        waits = [(j["start_s"] - j["submit_s"]) / 60 for j in started]
        if waits:
            wait_ax.step(*_cdf(waits), where="post", label=policy)
        series = results.utilisation_series(jobs, total_gpus)
        if series:
            util_ax.step([t / 3600 for t, _ in series], [100 * u for _, u in series],
                         where="post", label=policy, linewidth=0.8)
    slow_ax.set(title="comm_slowdown of gangs (CDF)", xlabel="comm_slowdown", ylabel="fraction of gangs")
    wait_ax.set(title="wait (CDF)", xlabel="wait (minutes, log)", ylabel="fraction of jobs")
    wait_ax.set_xscale("symlog", linthresh=1.0)
    util_ax.set(title="GPU utilisation", xlabel="time (h)", ylabel="busy GPUs (%)", ylim=(0, 105))
    for ax in (slow_ax, wait_ax, util_ax):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

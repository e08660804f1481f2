"""The ladder of locality waits on a sample trace: a longer wait never does much worse.

The three-tier sample (``examples/sim/three-tier``, load 0.7, trace seed 42) is the trace where
one hold per gang broke the ladder worst: from 300 s to 600 s its mean stretch rose by half, as
big held gangs lost their fit to the jobs behind them and then started scattered. Holding such
a gang afresh once it fits again (``LocalityWait.hold_limit``) keeps every step within 5 %.
docs/benchmark.md "The short-wait anomaly" gives the ten traces.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricsched.placement import request
from fabricsched.sim import engine, policies, results, scenario

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "sim" / "three-tier"
LADDER = (0.0, 300.0, 600.0, 3600.0, 14400.0)
RISE = 0.05
DEFAULT = policies.DEFAULT_LOCALITY_WAIT


@pytest.fixture(scope="module")
def sample() -> scenario.Scenario:
    return scenario.load(SAMPLE / "nodes.yaml", SAMPLE / "topology.yaml", SAMPLE / "jobs.csv",
                         SAMPLE / "events.csv")


def _stretch(scn: scenario.Scenario, timeout_s: float, hold_limit: float) -> float:
    wait = request.LocalityWait(timeout_s, DEFAULT.tolerance, hold_limit)
    return float(results.summarize(engine.simulate(scn, policies.make("fabric", 0, wait)))["stretch_mean"])


def test_the_ladder_holds_at_the_shipped_hold_limit(sample: scenario.Scenario) -> None:
    stretches = [_stretch(sample, t, DEFAULT.hold_limit) for t in LADDER]
    steps = zip(LADDER, LADDER[1:], stretches, stretches[1:], strict=False)
    for shorter, longer, a, b in steps:
        assert b <= a * (1 + RISE), f"{shorter:.0f} s -> {longer:.0f} s: mean stretch {a:.3f} -> {b:.3f}"
    assert stretches[-1] < stretches[0] / 2  # the wait pays: 2.600 without, 1.212 at 4 h


def test_one_hold_per_gang_breaks_the_ladder_here(sample: scenario.Scenario) -> None:
    # The rule before the re-hold (--locality-hold-limit 1): the rise this trace was chosen for.
    at_300, at_600 = (_stretch(sample, t, 1.0) for t in (300.0, 600.0))
    assert at_600 > at_300 * (1 + RISE)

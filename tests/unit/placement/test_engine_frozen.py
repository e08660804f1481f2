"""The engine's plans are frozen: speed-ups (caches, pruning) must not change a single answer.

``frozen_plans.json`` was written by the engine before it was tuned (see ``frozen_cases``).
Warm: every sequence replays on its own snapshots, so per-snapshot caches carry over from
decision to decision while free GPUs, traffic and health change. Cold: every decision runs on
a fresh copy of its snapshot, so nothing is cached.
"""

from __future__ import annotations

import json
from typing import Any

import frozen_cases
import pytest

from fabricsched.placement import request, snapshot
from fabricsched.topology import fabric


@pytest.fixture(scope="module")
def frozen() -> dict[str, dict[str, Any]]:
    loaded: dict[str, dict[str, Any]] = json.loads(frozen_cases.FIXTURE.read_text())
    return loaded


def _mismatches(frozen: dict[str, dict[str, Any]], cold: bool) -> tuple[int, list[str]]:
    steps = frozen_cases.decisions()
    snapshots = snapshot.Cache()  # warm: one snapshot per fabric object, kept across decisions
    seen, wrong = 0, []
    try:
        decision = next(steps)
        while True:
            if cold:
                fab = decision.fab
                copy = fabric.Fabric(fab.tiers, dict(fab.hosts), dict(fab.domains), fab.gpu_bandwidth_gbps,
                                     fab.rails)
                answer: request.Plan | request.NoFit = frozen_cases.run(
                    frozen_cases.Decision(decision.label, copy, dict(decision.free), decision.gang,
                                          decision.traffic, decision.options, decision.candidates))
            else:
                answer = frozen_cases.run(decision, snapshots)
            seen += 1
            got = frozen_cases.encode(answer)
            if got != frozen.get(decision.label):
                want = frozen.get(decision.label)
                wrong.append(f"{decision.label} ({decision.gang}): got {got}, frozen {want}")
                # Later decisions depend on this answer, so the first difference is the one to read.
                break
            decision = steps.send(answer)
    except StopIteration:
        pass
    return seen, wrong


@pytest.mark.parametrize("cold", [False, True], ids=["caches carry over between decisions",
                                                    "every decision on a fresh snapshot"])
def test_engine_returns_the_frozen_plans(frozen: dict[str, dict[str, Any]], cold: bool) -> None:
    seen, wrong = _mismatches(frozen, cold)
    assert not wrong, wrong[0]
    assert seen == len(frozen) == frozen_cases.SEQUENCES * frozen_cases.DECISIONS


def test_frozen_cases_cover_every_kind_of_answer(frozen: dict[str, dict[str, Any]]) -> None:
    """The fixture is only a guard if it holds every path through the engine."""
    plans = [v for v in frozen.values() if "ranks" in v]
    tiers = {v["tier"] for v in plans}
    assert {None, 0, 1, 2, 3} <= tiers
    assert any(v["reasons"][0].startswith("no healthy placement") for v in plans)
    assert any(r.startswith("avoided") for v in plans for r in v["reasons"])
    assert any(float(v["comm_slowdown"]) > 1 and not v["degraded_path"] for v in plans)
    nofits = [v for v in frozen.values() if "nofit" in v]
    assert any(v["unresolvable"] for v in nofits) and any(not v["unresolvable"] for v in nofits)

"""Priorities in the simulator: who preempts whom, what a victim loses, and the priority sample.

Fabric of the hand-computed cases: two leaves (l00: A, B; l01: C, D) of two 8-GPU hosts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from sim_builders import JOB_HEADER, SimFiles

from fabricsched import cli
from fabricsched.placement import request
from fabricsched.sim import engine, errors, policies, records, results, traces

HEADER = JOB_HEADER + ",priority"
NO_WAIT = request.LocalityWait(timeout_s=0.0)
SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "sim" / "priority"


def by_name(run: results.Run) -> dict[str, results.Outcome]:
    return {o.job.name: o for o in run.outcomes}


def run_of(
        files: SimFiles, policy: str, *rows: str, checkpoint_s: float = 60.0) -> dict[str, results.Outcome]:
    scn = files.fabric().job_rows(*rows, header=HEADER).load()
    return by_name(engine.simulate(scn, policies.make(policy, 0, NO_WAIT), checkpoint_s=checkpoint_s))


@pytest.mark.parametrize("policy", ["fabric", "tas-bestfit"])
def test_a_high_gang_evicts_one_whole_low_gang_which_resumes_from_its_checkpoint(
        files: SimFiles, policy: str) -> None:
    out = run_of(files, policy,
                 "low-a,0,2,8,1000,leaf,0", "low-b,0,2,8,1000,leaf,0", "hi,150,2,8,100,leaf,10")
    hi = out["hi"]
    assert (hi.start_s, hi.end_s) == (150.0, 250.0), "it starts at once, in the leaf it cleared"
    victims = [o for o in out.values() if o.earlier]
    assert len(victims) == 1
    victim = victims[0]
    assert set(victim.earlier[0].placement) == set(hi.placement)
    first = victim.earlier[0]
    assert (first.start_s, first.end_s, first.preempted_by) == (0.0, 150.0, "hi")
    # 150 s run, checkpoints every 60 s: 120 s kept, 30 s x 16 GPUs lost; 880 s left after hi.
    assert victim.lost_gpu_s == 30 * 16
    assert (victim.start_s, victim.end_s) == (250.0, 250.0 + 880.0)
    assert victim.waited_s == 100.0
    assert [r.preempted_by for r in victim.runs] == ["hi", None]


def test_equal_priority_waits_and_nothing_is_evicted(files: SimFiles) -> None:
    out = run_of(files, "fabric",
                 "low-a,0,2,8,1000,leaf,5", "low-b,0,2,8,1000,leaf,5", "eq,150,2,8,100,leaf,5")
    assert out["eq"].start_s == 1000.0
    assert not any(o.earlier for o in out.values())


def test_default_evicts_a_pod_and_its_whole_gang_goes(files: SimFiles) -> None:
    out = run_of(files, "default", "gang,0,4,8,1000,,0", "hi,90,1,8,100,,10")
    assert out["hi"].start_s == 90.0
    gang = out["gang"]
    assert gang.earlier and gang.earlier[0].preempted_by == "hi"
    assert gang.lost_gpu_s == 30 * 32, "every pod of the gang loses its work since the checkpoint"


def test_a_checkpoint_interval_of_zero_loses_nothing(files: SimFiles) -> None:
    out = run_of(files, "fabric", "low,0,4,8,1000,,0", "hi,90,1,8,100,,10", checkpoint_s=0.0)
    assert out["low"].earlier and out["low"].lost_gpu_s == 0.0


def test_a_bad_priority_points_at_its_line(files: SimFiles) -> None:
    files.fabric().job_rows("a,0,1,8,10,,high", header=HEADER)
    with pytest.raises(errors.SimInputError, match=r"jobs\.csv:2: priority must be an integer"):
        files.load()
    files.job_rows("a,0,1,8,10,,2000000000", header=HEADER)
    with pytest.raises(errors.SimInputError, match="priority must be in"):
        files.load()
    files.job_rows("a,0,1,8,10,,", header=HEADER)
    assert files.load().jobs[0].priority == 0


def test_a_priority_mix_adds_a_column_and_changes_nothing_else() -> None:
    mix = traces.parse_priorities("0:70,1000:30")
    plain = traces.generate(traces.TraceOptions(50, 256, seed=3))
    mixed = traces.generate(traces.TraceOptions(50, 256, seed=3, priorities=mix))
    assert [j.priority for j in plain] == [None] * 50
    assert {j.priority for j in mixed} == {0, 1000}
    assert [(j.name, j.submit_s, j.pods, j.duration_s) for j in plain] == \
        [(j.name, j.submit_s, j.pods, j.duration_s) for j in mixed]
    text = traces.to_csv(mixed)
    assert text.splitlines()[0].endswith(",priority")
    with pytest.raises(ValueError, match="PRIORITY:WEIGHT"):
        traces.parse_priorities("urgent")


def replay(doc: Mapping[str, Any], gpus_per_host: int = 8) -> None:
    """No run preempted a job of equal or higher priority, and no host ever held more GPUs than it has."""
    jobs = {j["name"]: j for j in doc["jobs"]}
    deltas: dict[str, list[tuple[float, int]]] = {}
    for job in jobs.values():
        for run in job["runs"]:
            by = run["preempted_by"]
            if by is not None:
                assert jobs[by]["priority"] > job["priority"], f"{by} preempted {job['name']}"
                assert any(r["start_s"] == run["end_s"] for r in jobs[by]["runs"]), "the preemptor started"
            for host in run["placement"]:
                end = run["end_s"] if run["end_s"] is not None else float("inf")
                deltas.setdefault(host, []).extend([(run["start_s"], job["gpus_per_pod"]),
                                                    (end, -job["gpus_per_pod"])])
    for host, changes in deltas.items():
        used = 0
        for _, change in sorted(changes, key=lambda c: (c[0], c[1])):  # ends first at one instant
            used += change
            assert used <= gpus_per_host, f"{host} over its GPUs"


def test_the_priority_sample_favours_the_highest_class_under_fabric(tmp_path: Path) -> None:
    argv = ["simulate", "--nodes", str(SAMPLE / "nodes.yaml"), "--topology", str(SAMPLE / "topology.yaml"),
            "--jobs", str(SAMPLE / "jobs.csv"), "--events", str(SAMPLE / "events.csv"),
            "--compare", "--quiet", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    docs = {p: json.loads((tmp_path / f"result-{p}.json").read_text()) for p in policies.POLICY_NAMES}
    top = str(max(j.rank for j in records.read_jobs(SAMPLE / "jobs.csv")))
    classes = {p: d["summary"]["by_priority"] for p, d in docs.items()}
    for other in ("default", "tas-bestfit"):
        assert classes["fabric"][top]["wait_p95_s"] <= classes[other][top]["wait_p95_s"]
    assert classes["fabric"][top]["gpu_hours_lost"] <= classes["default"][top]["gpu_hours_lost"]
    lost = {p: sum(c["gpu_hours_lost"] for c in classes[p].values()) for p in classes}
    assert lost["fabric"] <= lost["default"], lost
    assert sum(c["preemptions"] for c in classes["fabric"].values()) > 0, "the sample exercises preemption"
    for doc in docs.values():
        replay(doc)

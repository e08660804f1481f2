"""The ``traffic`` column of the job trace (``all-to-all`` or ``ring``) and the topology's
default (``spec.traffic``): the simulator prices each job with its pattern (docs/model.md)."""

from __future__ import annotations

import pytest
import yaml
from sim_builders import JOB_HEADER, SimFiles

from fabricsched.placement import request
from fabricsched.sim import engine, errors, policies, records, results, traces

TRAFFIC = f"{JOB_HEADER},traffic"


def _fabric(files: SimFiles) -> SimFiles:
    # Two leaves of four hosts x 8 GPUs, 2:1: an 8-pod gang splits 4 + 4 (all-to-all 8/7, ring 1.0).
    return files.fabric("spine:1,leaf:2:2.0", hosts_per_leaf=4)


def test_a_ring_job_is_priced_as_a_ring_and_result_json_says_so(files: SimFiles) -> None:
    _fabric(files).job_rows("ring,0,8,8,100,,ring", "a2a,1000,8,8,100,,all-to-all", "plain,2000,8,8,100,,",
                            header=TRAFFIC)
    scn = files.load()
    assert [j.traffic for j in scn.jobs] == [request.Pattern.RING, request.Pattern.ALL_TO_ALL, None]
    run = engine.simulate(scn, policies.make("fabric", 0))
    ring, a2a, plain = run.outcomes
    assert ring.comm_slowdown == 1.0 and ring.end_s == 100.0
    assert a2a.comm_slowdown == pytest.approx(8 / 7) and plain.comm_slowdown == pytest.approx(8 / 7)
    doc = results.document(run)
    assert [j["traffic"] for j in doc["jobs"]] == ["ring", "all-to-all", "all-to-all"]


def test_the_topologys_default_applies_to_jobs_that_name_none(files: SimFiles) -> None:
    _fabric(files).job_rows("plain,0,8,8,100,,", "a2a,1000,8,8,100,,all-to-all", header=TRAFFIC)
    topology = yaml.safe_load(files.topology.read_text())
    topology["spec"]["traffic"] = "ring"
    files.topology.write_text(yaml.safe_dump(topology))
    run = engine.simulate(files.load(), policies.make("fabric", 0))
    assert [o.comm_slowdown for o in run.outcomes] == [1.0, pytest.approx(8 / 7)]
    assert [j["traffic"] for j in results.document(run)["jobs"]] == ["ring", "all-to-all"]


def test_a_trace_without_the_column_gives_the_document_it_always_gave(files: SimFiles) -> None:
    _fabric(files).job_rows("a,0,8,8,100,")
    doc = results.document(engine.simulate(files.load(), policies.make("fabric", 0)))
    assert "traffic" not in doc["jobs"][0]


@pytest.mark.parametrize("cell", ["Ring", "tree", "x" * 500])
def test_an_unknown_pattern_is_an_input_error_naming_the_column(files: SimFiles, cell: str) -> None:
    _fabric(files).job_rows(f"a,0,8,8,100,,{cell}", header=TRAFFIC)
    with pytest.raises(errors.SimInputError, match="traffic must be all-to-all or ring") as e:
        files.load()
    assert len(str(e.value)) < 300


def test_the_column_survives_a_round_trip_through_the_trace_writer(files: SimFiles) -> None:
    _fabric(files).job_rows("a,0,8,8,100,,ring", "b,5,2,8,100,,", header=TRAFFIC)
    jobs = files.load().jobs
    text = traces.to_csv(jobs)
    assert text.splitlines()[0].endswith(",traffic") and text.splitlines()[1].endswith(",ring")
    files.jobs.write_text(text)
    assert [j.traffic for j in records.read_jobs(files.jobs)] == [request.Pattern.RING, None]

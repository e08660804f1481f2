"""The constraints users ask for in the job trace: a preferred tier beside the required one and
slices (``N@tier`` required, ``N~tier`` preferred), read into the engine's own request types."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_builders import JOB_HEADER, SimFiles

from fabricsched import cli, ids
from fabricsched.placement import request
from fabricsched.sim import engine, errors, policies, records, results, traces

SLICED = f"{JOB_HEADER},slice,preferred_tier"
"""The optional columns in any order, after the six."""

FABRIC = "spine:1,leaf:4:2.0"
"""Four leaves of six hosts: an 8-pod gang fits 6 + 2 unsliced, 4 + 4 in slices of four."""


def _fabric(files: SimFiles) -> SimFiles:
    return files.fabric(FABRIC, hosts_per_leaf=6)


def test_the_columns_reach_the_engine_as_the_extender_asks_it(files: SimFiles) -> None:
    _fabric(files).job_rows("cut,0,8,8,100,spine,4@leaf,", "soft,0,8,8,100,spine,4~leaf,leaf",
                            "plain,0,2,8,100,,,leaf", header=SLICED)
    scn = files.load()
    cut, soft, plain = scn.jobs
    assert cut.slices == request.Slices(4, "leaf", True) and cut.preferred_tier is None
    assert soft.slices == request.Slices(4, "leaf", False) and soft.preferred_tier == "leaf"
    asked = policies.gang_request(scn.structure, soft)
    expected = request.gang_on(scn.structure, ids.GangKey("soft"), 8, 8, "spine", True, preferred="leaf",
                               slices=request.Slices(4, "leaf", False))
    assert asked == expected
    assert isinstance(asked, request.GangRequest) and asked.slice_pods == 4 and not asked.slice_required
    alone = policies.gang_request(scn.structure, plain)  # a preferred tier without a required one
    assert isinstance(alone, request.GangRequest) and (alone.tier, alone.required) == (0, False)


def test_each_slice_lands_in_one_leaf_and_result_json_says_which(files: SimFiles) -> None:
    _fabric(files).job_rows("cut,0,8,8,100,,4@leaf,", "whole,200,8,8,100,,,", header=SLICED)
    scn = files.load()
    run = engine.simulate(scn, policies.make("fabric", 0))
    cut = run.outcomes[0]
    leaves = [scn.structure.hosts[h].path[0] for h in cut.placement]
    assert leaves[:4] == [leaves[0]] * 4 and leaves[4:] == [leaves[4]] * 4 and leaves[0] != leaves[4]
    assert cut.slice_domains == (str(leaves[0]), str(leaves[4]))
    doc = results.document(run)
    assert doc["jobs"][0]["slice"] == {"pods": 4, "tier": "leaf", "required": True}
    assert doc["jobs"][0]["slice_domains"] == [str(leaves[0]), str(leaves[4])]
    assert doc["jobs"][1]["slice"] is None and doc["jobs"][1]["slice_domains"] == []
    assert doc["summary"]["constraints"] == {"preferred_asked": 0, "preferred_held": 0, "sliced_jobs": 1,
                                             "slices": 2, "slices_split": 0}


def test_a_preferred_tier_that_held_is_recorded(files: SimFiles) -> None:
    _fabric(files).job_rows("near,0,4,8,100,spine,leaf", header=f"{JOB_HEADER},preferred_tier")
    doc = results.document(engine.simulate(files.load(), policies.make("fabric", 0)))
    job = doc["jobs"][0]
    assert (job["required_tier"], job["preferred_tier"], job["preferred_held"]) == ("spine", "leaf", True)
    assert doc["summary"]["constraints"]["preferred_held"] == 1


def test_a_trace_without_the_columns_gives_the_document_it_always_gave(files: SimFiles) -> None:
    _fabric(files).job_rows("a,0,2,8,100,")
    doc = results.document(engine.simulate(files.load(), policies.make("fabric", 0)))
    assert "slice" not in doc["jobs"][0] and "constraints" not in doc["summary"]


BAD = [
    pytest.param("a,0,8,8,10,,3@leaf,", "cannot be cut in slices of 3",
                 id="slices that do not divide the gang"),
    pytest.param("a,0,8,8,10,,4@rack,", "unknown slice 'rack'", id="a slice tier the fabric lacks"),
    pytest.param("a,0,8,8,10,,four@leaf,", "must be N@tier", id="a slice size that is no number"),
    pytest.param("a,0,8,8,10,,1@leaf,", "with N >= 2", id="slices of one pod"),
    pytest.param("a,0,8,8,10,,8@leaf,", "the largest holds 6", id="a required slice no leaf holds"),
    pytest.param("a,0,2,8,10,leaf,,spine", "preferred tier spine is above required tier leaf",
                 id="a preferred tier above the required one"),
    pytest.param("a,0,2,8,10,,,rack", "unknown preferred_tier 'rack'", id="an unknown preferred tier"),
]


@pytest.mark.parametrize(("row", "message"), BAD)
def test_bad_constraints_name_file_and_line(files: SimFiles, row: str, message: str) -> None:
    _fabric(files).job_rows(row, header=SLICED)
    with pytest.raises(errors.SimInputError) as caught:
        files.load()
    assert caught.value.line == 2 and message in caught.value.message


def test_an_optional_column_given_twice_is_a_bad_header(files: SimFiles) -> None:
    _fabric(files).job_rows("a,0,1,8,10,,,", header=f"{JOB_HEADER},slice,slice")
    with pytest.raises(errors.SimInputError, match="bad header"):
        files.load()


def test_trace_generate_writes_the_constraints_of_its_mix_and_reads_them_back(
    files: SimFiles, tmp_path: Path
) -> None:
    _fabric(files)
    out = tmp_path / "jobs.csv"
    assert cli.main(["trace", "generate", "--nodes", str(files.nodes), "--topology", str(files.topology),
                     "--jobs", "40", "--seed", "3", "--mix", "1x8:1,8x8@spine~leaf/4@leaf:1,4x8/2~leaf:1",
                     "--out", str(out)]) == 0
    assert out.read_text().splitlines()[0] == f"{JOB_HEADER},preferred_tier,slice"
    jobs = records.read_jobs(out)
    shapes = {(j.pods, j.required_tier, j.preferred_tier, j.slices) for j in jobs}
    assert shapes == {(1, None, None, None), (8, "spine", "leaf", request.Slices(4, "leaf", True)),
                      (4, None, None, request.Slices(2, "leaf", False))}
    assert cli.main(["simulate", "--nodes", str(files.nodes), "--topology", str(files.topology),
                     "--jobs", str(out), "--quiet", "--out", str(tmp_path / "r.json")]) == 0
    summary = json.loads((tmp_path / "r.json").read_text())["summary"]["constraints"]
    assert summary["sliced_jobs"] > 0 and summary["slices_split"] == 0


@pytest.mark.parametrize("mix", ["8x8/3@leaf:1", "8x8/4%leaf:1", "8x8@spine/:1"])
def test_a_mix_entry_with_bad_slices_is_refused(mix: str) -> None:
    with pytest.raises(ValueError, match="bad mix entry"):
        traces.parse_mix(mix)

"""Bad inputs fail before the first event, naming the file and the line."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_builders import JOB_HEADER, SimFiles

from fabricsched import cli
from fabricsched.sim import errors

OK_JOB = "ok,0,1,8,10,"

JOB_CASES = [
    pytest.param(["a,0,1,8"], 2, "4 columns, expected 6", id="a row with too few columns"),
    pytest.param([OK_JOB, "a,0,1,8,10,,x"], 3, "7 columns", id="a row with too many columns"),
    pytest.param(["a,zero,1,8,10,"], 2, "submit_s must be a number", id="a non-numeric submit time"),
    pytest.param(["a,0,1.5,8,10,"], 2, "pods must be an integer", id="a fractional pod count"),
    pytest.param(["a,0,1,8,nan,"], 2, "duration_s must be finite", id="a NaN duration"),
    pytest.param(["a,0,1,8,0,"], 2, "duration_s must be > 0", id="a zero duration"),
    pytest.param([OK_JOB, "ok,1,1,8,10,"], 3, "already defined on line 2", id="a repeated job name"),
    pytest.param(["a,0,1,8,10,rack"], 2, "unknown required_tier 'rack'", id="an unknown required tier"),
    pytest.param([OK_JOB, "huge,0,5,8,10,"], 3, "the whole cluster holds at most 4",
                 id="a job larger than the cluster"),
    pytest.param(["wide,0,3,8,10,leaf"], 2, "the largest leaf holds 2",
                 id="a required tier no domain can hold"),
]


@pytest.mark.parametrize(("rows", "line", "message"), JOB_CASES)
def test_bad_job_rows_name_file_and_line(files: SimFiles, rows: list[str], line: int, message: str) -> None:
    files.fabric().job_rows(*rows)
    with pytest.raises(errors.SimInputError) as caught:
        files.load()
    assert (caught.value.path, caught.value.line) == (str(files.jobs), line)
    assert message in caught.value.message
    assert str(caught.value).startswith(f"{files.jobs}:{line}: ")


def test_a_bad_job_header_is_reported_on_its_line(files: SimFiles) -> None:
    bad = "name,submit,pods,gpus_per_pod,duration_s,required_tier"
    files.fabric().job_rows(OK_JOB, header=f"# a comment first\n{bad}")
    with pytest.raises(errors.SimInputError, match=r":2: bad header") as caught:
        files.load()
    assert caught.value.path == str(files.jobs)


EVENT_CASES = [
    pytest.param("0,node,gpu-9999,down,", "unknown node 'gpu-9999'", id="an unknown node"),
    pytest.param("0,domain,rack/r1,down,", "unknown tier 'rack'", id="an unknown tier"),
    pytest.param("0,domain,leaf/l99,down,", "unknown domain 'leaf/l99'", id="an unknown domain"),
    pytest.param("0,domain,l00,down,", "must be tier/name", id="a domain without its tier"),
    pytest.param("0,switch,l00,down,", "unknown target_kind 'switch'", id="an unknown target kind"),
    pytest.param("0,node,gpu-0001,broken,", "unknown state 'broken'", id="an unknown state"),
    pytest.param("0,node,gpu-0001,degraded,1.5", "capacity must be a fraction", id="a capacity above one"),
    pytest.param("soon,node,gpu-0001,down,", "time_s must be a number", id="a non-numeric time"),
    pytest.param("0,node,gpu-0001,down", "4 columns, expected 5", id="a row with too few columns"),
]


@pytest.mark.parametrize(("row", "message"), EVENT_CASES)
def test_bad_event_rows_name_file_and_line(files: SimFiles, row: str, message: str) -> None:
    files.fabric().job_rows(OK_JOB).event_rows("0,node,gpu-0001,degraded,0.5", row)
    with pytest.raises(errors.SimInputError) as caught:
        files.load()
    assert (caught.value.path, caught.value.line) == (str(files.events), 3)
    assert message in caught.value.message


def test_a_topology_error_points_at_the_offending_key(files: SimFiles) -> None:
    files.fabric().job_rows(OK_JOB)
    text = files.topology.read_text().replace("oversubscription: 2.0", "oversubscription: -1")
    files.topology.write_text(text)
    with pytest.raises(errors.SimInputError, match=r"spec\.tiers\.0\.oversubscription") as caught:
        files.load()
    line = text.splitlines()[caught.value.line - 1]
    assert "oversubscription: -1" in line


def test_nodes_without_gpus_or_labels_leave_an_empty_fabric_as_an_error(files: SimFiles) -> None:
    files.fabric().job_rows(OK_JOB)
    files.nodes.write_text(files.nodes.read_text().replace("nvidia.com/gpu: '8'", "nvidia.com/gpu: '0'"))
    with pytest.raises(errors.SimInputError, match="no node is selected"):
        files.load()


def test_the_command_prints_file_line_message_and_exits_2(
    files: SimFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files.fabric().job_rows(OK_JOB, "bad,0,x,8,10,")
    code = cli.main(["simulate", "--nodes", str(files.nodes), "--topology", str(files.topology),
                     "--jobs", str(files.jobs), "--out", str(tmp_path / "r.json")])
    assert code == 2
    assert capsys.readouterr().err.strip() == f"{files.jobs}:3: pods must be an integer, got 'x'"
    assert not (tmp_path / "r.json").exists()


def test_a_header_only_trace_has_no_jobs(files: SimFiles) -> None:
    files.fabric().job_rows(header=JOB_HEADER)
    with pytest.raises(errors.SimInputError, match="no jobs"):
        files.load()

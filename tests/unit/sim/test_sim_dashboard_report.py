"""``fabricsched simulate --report``: the fabric page as one static HTML file, at the run's last
job start (gangs running then, health then), with the per-job table and the plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim_builders import SimFiles

from fabricsched import cli
from fabricsched.sim import plots, policies


def embedded(html: str) -> dict[str, Any]:
    start = html.index('type="application/json">') + len('type="application/json">')
    doc: dict[str, Any] = json.loads(html[start:html.index("</script>", start)])
    return doc


def test_the_report_shows_the_fabric_at_the_last_start_with_every_job_and_the_plots(
    files: SimFiles, tmp_path: Path
) -> None:
    files.fabric().job_rows("a,0,2,8,100,", "b,50,2,8,100,", "c,60,2,8,100,")
    host = sorted(files.load().structure.hosts)[0]
    files.event_rows(f"10,node,{host},degraded,0.5")
    out = tmp_path / "report.html"
    argv = ["simulate", "--nodes", str(files.nodes), "--topology", str(files.topology), "--jobs",
            str(files.jobs), "--events", str(files.events), "--out", str(tmp_path / "r.json"),
            "--report", str(out), "--quiet"]
    assert cli.main(argv) == 0
    html = out.read_text()
    assert "/static/" not in html and "<style>" in html
    doc = embedded(html)
    assert doc["topology"] == "test"
    starts = {row[0]: row[2] for row in doc["report"]["jobs"]}
    assert starts == {"a": "0", "b": "50", "c": "150"}  # c waits for a healthy leaf: b's, at 150
    assert [g["name"] for g in doc["gangs"]] == ["c"]  # a and b ended by then
    hosts = {h["name"]: h for h in doc["fabric"]["hosts"]}
    assert hosts[host]["health"]["state"] == "degraded"
    assert sum(h["used"] for h in hosts.values()) == 16
    report = doc["report"]
    assert [row[0] for row in report["jobs"]] == ["a", "b", "c"]
    assert report["columns"][0] == "job" and len(report["jobs"][0]) == len(report["columns"])
    assert report["plots"] and report["plots"][0].startswith("data:image/png;base64,")
    assert "test: jobs.csv" in report["summary"]


def test_plots_keep_one_colour_per_policy_and_count_useful_work_apart_from_busy() -> None:
    assert len({plots.colour(p) for p in policies.POLICY_NAMES}) == len(policies.POLICY_NAMES)
    jobs = [
        {"start_s": 0.0, "end_s": 100.0, "pods": 2, "gpus_per_pod": 8, "comm_slowdown": 2.0},
        {"start_s": 50.0, "end_s": 150.0, "pods": 1, "gpus_per_pod": 8, "comm_slowdown": None},
    ]
    # 16 GPUs busy at half speed do 8 GPUs of work; the single pod's 8 are all work.
    assert plots.useful_series(jobs, 32) == [(0.0, 0.25), (50.0, 0.5), (100.0, 0.25), (150.0, 0.0)]
    assert plots.SLOWDOWN_AXIS == (1.0, 1.5)

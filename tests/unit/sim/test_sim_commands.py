"""``fabricsched simulate`` and ``fabricsched trace``: files in, files and tables out."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sim_builders import SimFiles

from fabricsched import cli
from fabricsched.sim import policies, records, report, traces

JOB_KEYS = {"name", "submit_s", "start_s", "end_s", "pods", "gpus_per_pod", "placement",
            "domains_spanned", "degraded_path", "comm_slowdown", "waited_for_locality_s"}


def _simulate(files: SimFiles, *extra: str) -> int:
    argv = ["simulate", "--nodes", str(files.nodes), "--topology", str(files.topology),
            "--jobs", str(files.jobs), *extra]
    if files.events is not None:
        argv += ["--events", str(files.events)]
    return cli.main(argv)


def test_compare_writes_one_result_per_policy_and_a_side_by_side_table(
    files: SimFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files.fabric().job_rows("a,0,2,8,100,", "b,5,1,4,50,leaf", "c,6,4,8,10,")
    files.event_rows("1,node,gpu-0004,down,")
    assert _simulate(files, "--compare", "--out", str(tmp_path / "out")) == 0
    table = capsys.readouterr().out
    header = table.splitlines()[0].split()
    assert header == list(policies.POLICY_NAMES)
    for name in policies.POLICY_NAMES:
        doc = json.loads((tmp_path / "out" / f"result-{name}.json").read_text())
        assert doc["policy"] == name
        assert set(doc) == {"policy", "jobs", "summary"}
        assert [set(j) for j in doc["jobs"]] == [JOB_KEYS] * 3
        never = doc["jobs"][2]  # four 8-GPU pods once a host is down: never fits
        assert never["start_s"] is None and never["end_s"] is None and never["placement"] == []
        assert doc["summary"]["jobs_started"] == 2
        assert doc["summary"]["down_element_uses"] == 0


def test_a_single_run_writes_result_json(files: SimFiles, tmp_path: Path) -> None:
    files.fabric().job_rows("a,0,2,8,100,")
    out = tmp_path / "deep" / "result.json"
    assert _simulate(files, "--policy", "random", "--seed", "2", "--out", str(out), "--quiet") == 0
    doc = json.loads(out.read_text())
    assert doc["policy"] == "random"
    assert doc["jobs"][0]["comm_slowdown"] >= 1.0


def test_plot_writes_a_png(files: SimFiles, tmp_path: Path) -> None:
    files.fabric().job_rows("a,0,2,8,100,", "b,1,2,8,100,")
    png = tmp_path / "plot.png"
    assert _simulate(files, "--compare", "--out", str(tmp_path), "--plot", str(png), "--quiet") == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_is_a_clear_error(
    files: SimFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    files.fabric().job_rows("a,0,2,8,100,")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code = _simulate(files, "--out", str(tmp_path / "r.json"), "--plot", str(tmp_path / "p.png"), "--quiet")
    assert code == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_trace_generate_is_seeded_and_offers_the_asked_load(tmp_path: Path) -> None:
    out = tmp_path / "jobs.csv"
    args = ["trace", "generate", "--gpus", "2048", "--jobs", "2000", "--load", "0.7", "--seed", "9"]
    assert cli.main([*args, "--out", str(out)]) == 0
    first = out.read_text()
    assert cli.main([*args, "--out", str(out)]) == 0
    assert out.read_text() == first
    jobs = records.read_jobs(out)
    horizon = max(j.submit_s for j in jobs)
    offered = sum(j.pods * j.gpus_per_pod * j.duration_s for j in jobs) / (2048 * horizon)
    assert offered == pytest.approx(0.7, rel=0.1)
    sizes = {j.pods for j in jobs}
    assert {1, 2, 4, 8, 16, 32, 64} <= sizes
    assert sum(j.pods == 1 for j in jobs) > sum(j.pods >= 32 for j in jobs) * 5


def test_trace_generate_for_a_fabric_drops_jobs_that_could_never_fit(files: SimFiles) -> None:
    files.fabric()  # 4 hosts of 8 GPUs
    out = files.root / "jobs.csv"
    assert cli.main(["trace", "generate", "--nodes", str(files.nodes), "--jobs", "300",
                     "--out", str(out)]) == 0
    jobs = records.read_jobs(out)
    assert max(j.pods * j.gpus_per_pod for j in jobs) == 32
    assert any(j.required_tier == "leaf" and j.pods == 4 for j in jobs)  # unknown leaf size: kept
    assert cli.main(["trace", "generate", "--nodes", str(files.nodes), "--topology", str(files.topology),
                     "--jobs", "300", "--out", str(out)]) == 0
    jobs = records.read_jobs(out)
    assert not any(j.required_tier == "leaf" and j.pods > 2 for j in jobs)  # a leaf holds two 8-GPU pods
    files.load()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        pytest.param("--mix", "4x8", "bad mix entry '4x8'", id="a mix entry without a weight"),
        pytest.param("--mix", "0x8:1", "pods and gpus >= 1", id="a mix entry with zero pods"),
        pytest.param("--duration-dist", "gamma:k=2", "unknown duration distribution",
                     id="an unknown distribution"),
        pytest.param("--duration-dist", "lognormal:median=60", "lognormal needs median, sigma",
                     id="a missing sigma"),
    ],
)
def test_trace_generate_rejects_bad_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, message: str
) -> None:
    code = cli.main(["trace", "generate", "--gpus", "64", "--jobs", "5", option, value,
                     "--out", str(tmp_path / "j.csv")])
    assert code == 2
    assert message in capsys.readouterr().err


def test_trace_fabric_writes_nodes_and_topology_the_simulator_reads(files: SimFiles) -> None:
    assert cli.main(["trace", "fabric", "--preset", "three-tier", "--nodes-out", str(files.nodes),
                     "--topology-out", str(files.topology)]) == 0
    scn = files.job_rows("a,0,64,8,10,", "b,0,8,8,10,leaf", "c,0,32,8,10,spine").load()
    assert len(scn.structure.hosts) == 256
    assert [t.name for t in scn.structure.tiers] == ["leaf", "spine", "core"]
    assert len(list(scn.structure.tier_domains(0))) == 32


def test_the_nvl72_preset_makes_each_rack_an_nvlink_domain_below_the_leaf(files: SimFiles) -> None:
    assert cli.main(["trace", "fabric", "--preset", "nvl72", "--nodes-out", str(files.nodes),
                     "--topology-out", str(files.topology)]) == 0
    scn = files.job_rows("rack,0,18,4,10,nvlink", "two,0,36,4,10,leaf").load()
    assert [(t.name, t.node_label) for t in scn.structure.tiers] == [
        ("nvlink", "nvidia.com/gpu.clique"), ("leaf", "fabric.topograph.run/tier-0"),
        ("spine", "fabric.topograph.run/tier-1")]
    racks = list(scn.structure.tier_domains(0))
    assert len(racks) == 16 and {scn.structure.empty_slots(4, d.hosts) for d in racks} == {18}
    leaves = {scn.structure.domains[(1, d.parent)].name for d in racks if d.parent}
    assert leaves == {"l00", "l01", "l02", "l03"}


def test_the_default_mix_parses_and_keeps_big_jobs_rare() -> None:
    mix = traces.parse_mix(traces.DEFAULT_MIX)
    total = sum(e.weight for e in mix)
    assert sum(e.weight for e in mix if e.pods >= 32) / total < 0.1
    assert sum(e.weight for e in mix if e.pods <= 4) / total > 0.5


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_draws_only_on_a_terminal() -> None:
    terminal, pipe = _Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        bar = report.ProgressBar("fabric", stream)
        bar(1, 4)
        bar(4, 4)
        bar.close()
    assert terminal.getvalue().endswith("] 4/4\n")
    assert pipe.getvalue() == ""


def test_the_same_seed_gives_the_same_result_in_another_process(files: SimFiles, tmp_path: Path) -> None:
    # Python salts str hashes per process: a result must not depend on set or dict-of-set order.
    files.fabric("spine:2,leaf:3:2.0", hosts_per_leaf=3)
    files.job_rows(*(f"j{i},{7 * i},{1 + i % 5},{(4, 8)[i % 2]},{300 + 37 * i}," for i in range(40)))
    files.event_rows("0,domain,leaf/l01,degraded,0.5", "50,node,gpu-0002,degraded,", "90,node,gpu-0008,down,")
    outputs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"run-{hash_seed}"
        argv = [sys.executable, "-m", "fabricsched.cli", "simulate", "--nodes", str(files.nodes),
                "--topology", str(files.topology), "--jobs", str(files.jobs), "--events", str(files.events),
                "--compare", "--out", str(out), "--quiet", "--seed", "4"]
        subprocess.run(argv, check=True, env={**os.environ, "PYTHONHASHSEED": hash_seed}, timeout=120)
        outputs.append({p.name: p.read_text() for p in sorted(out.iterdir())})
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) == len(policies.POLICY_NAMES)

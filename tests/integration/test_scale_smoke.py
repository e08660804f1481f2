"""The scale benchmark's small size (500 nodes) end to end: it must run through, whatever the times.

``bench/scale_bench.py --quick`` starts its own cluster (``fabricsched cluster up``, kwok nodes),
``fabricsched run``, the pass-through server, and goes through every phase: ready, requests of
each kind, reaction, restart, throughput (and its round with the steering stub). This test
fails when the run crashes or a phase yields no answer; it never compares a time with a bound
(speed is the benchmark's to report).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from clusterkit import find_binaries_or_skip

REPO = Path(__file__).resolve().parents[2]


def test_the_scale_benchmark_runs_through_at_500_nodes(tmp_path: Path) -> None:
    find_binaries_or_skip()
    out = tmp_path / "scale.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "scale_bench.py"), "--quick", "--dir", str(tmp_path / "work"),
         "--out", str(out)],
        capture_output=True, text=True, timeout=1800,
    )
    assert done.returncode == 0, \
        f"scale_bench.py --quick failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    (result,) = json.loads(out.read_text())["results"]
    assert result["nodes"] == 500
    assert "errors" not in result, result["errors"]
    assert result["ready_s"] > 0 and result["restart_ready_s"] > 0
    for kind in ("single", "planned_member", "new_gang"):
        assert result["latency_ms"]["fabricsched"][kind]["n"] > 0
        assert result["latency_ms"]["passthrough"][kind]["n"] > 0
    # Every decision of the run steered its pod to one node (none failed or erred).
    assert result["answers_without_one_node"] == {"single": 0, "planned_member": 0, "new_gang": 0}
    assert set(result["reaction_s"]) == {"decision", "status"}
    assert result["peak_rss_mb"] > 0
    for scheduler in ("default-scheduler", "fabricsched", "steering_stub"):
        assert "pods_per_s" in result["throughput"][scheduler], result["throughput"]

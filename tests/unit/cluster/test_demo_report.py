"""The demo's report (where pods landed and why) and the demo driver's pure helpers."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from fabricsched.cluster import demo, demo_jobs, errors, samples, tour

LEAF, SPINE = samples.TOPOGRAPH.leaf, samples.TOPOGRAPH.spine


def _topology() -> dict[str, Any]:
    topology = samples.demo_topology()
    topology["status"] = {"degraded": [
        {"kind": "domain", "tier": "leaf", "domain": "l07", "state": "degraded", "capacity": 0.25,
         "sources": [{"source": "spec.links", "reason": "4 of 16 uplinks flapping"}]},
        {"kind": "node", "node": "gpu-022", "state": "degraded", "capacity": 0.5,
         "sources": [{"source": "condition", "reason": "FabricLinkDegraded: symbol errors on mlx5_2"}]},
    ]}
    return topology


def _placement(job: str, nodes: list[str], reasons: list[str]) -> dict[str, Any]:
    return {
        "metadata": {"name": job, "namespace": "train"},
        "spec": {"gang": job, "size": len(nodes), "gpusPerPod": 8,
                 "tier": {"preferred": "leaf"},
                 "ranks": [{"rank": r, "node": n} for r, n in reversed(list(enumerate(nodes)))]},
        "status": {"phase": "Bound", "commSlowdown": 1.0, "degradedPath": False, "reasons": reasons},
    }


def _pod(job: str, rank: int, node: str | None) -> dict[str, Any]:
    labels = {tour.JOB_NAME_LABEL: job, tour.RANK_KEY: str(rank)}
    return {"metadata": {"name": f"{job}-{rank}-x", "labels": labels},
            "spec": {"nodeName": node} if node else {}}


NODES = samples.demo_nodes()


def test_landings_follow_rank_order_with_leaf_spine_and_host_health() -> None:
    placements = [_placement("train-6", ["gpu-017", "gpu-021"], []), _placement("eval-1", ["gpu-022"], [])]
    pods = [_pod("train-6", 1, "gpu-021"), _pod("train-6", 0, "gpu-017"), _pod("eval-1", 0, "gpu-022")]
    rows = tour.landings(placements, pods, NODES, _topology())
    assert [(r.job, r.rank, r.pod, r.node, r.domains) for r in rows] == [
        ("train-6", 0, "train-6-0-x", "gpu-017", ("l05", "s2")),
        ("train-6", 1, "train-6-1-x", "gpu-021", ("l06", "s2")),
        ("eval-1", 0, "eval-1-0-x", "gpu-022", ("l06", "s2")),
    ]
    assert [r.health for r in rows][:2] == ["healthy", "healthy"]
    assert rows[2].health == "degraded (FabricLinkDegraded: symbol errors on mlx5_2)"


def test_an_unbound_rank_shows_its_planned_node_and_a_missing_pod_a_dash() -> None:
    placement = _placement("a", ["gpu-001", "gpu-002"], [])
    rows = tour.landings([placement], [_pod("a", 0, None)], NODES, _topology())
    assert [(r.pod, r.node) for r in rows] == [("a-0-x", "gpu-001 (planned)"), ("-", "gpu-002 (planned)")]


def test_degraded_elements_name_the_element_its_capacity_and_evidence() -> None:
    assert tour.degraded_elements(_topology()) == [
        "leaf l07: uplinks degraded (4 of 16 uplinks flapping) at 25% capacity",
        "host gpu-022: fabric link degraded (FabricLinkDegraded: symbol errors on mlx5_2) at 50% capacity",
    ]


def test_why_gives_the_figures_then_one_reason_per_line() -> None:
    lines = tour.why(_placement("train-6", ["gpu-017"] * 6, ["fits 2 leaves under spine s2",
                                                               "avoided leaf l07: uplinks degraded"]))
    assert lines == [
        "train/train-6: 6 pods x 8 GPUs, tier leaf (preferred), phase Bound, commSlowdown 1.00, "
        "degradedPath false",
        "  - fits 2 leaves under spine s2",
        "  - avoided leaf l07: uplinks degraded",
    ]


@pytest.mark.parametrize(("tier", "said"), [
    ({"required": "spine", "preferred": "leaf"}, "tier spine (required), leaf (preferred)"),
    ({"required": "leaf"}, "tier leaf (required)"),
    ({"name": "leaf", "policy": "required"}, "tier leaf (required)"),  # the shape written before
    ({}, "tier as low as possible"),
])
def test_why_says_the_tier_constraint_in_either_shape(tier: dict[str, str], said: str) -> None:
    placement = _placement("a", ["gpu-001"], [])
    placement["spec"]["tier"] = tier
    assert f", {said}, phase Bound," in tour.why(placement)[0]


def test_a_placement_without_status_yet_still_renders() -> None:
    placement = _placement("a", ["gpu-001"], [])
    del placement["status"]
    assert tour.why(placement)[0].endswith("phase -, commSlowdown -, degradedPath false")


def test_the_table_aligns_columns_under_tier_headers() -> None:
    report = tour.render([_placement("a", ["gpu-001"], ["fits leaf l01"])], [_pod("a", 0, "gpu-001")], NODES,
                         _topology())
    header, row = report.splitlines()[1:3]
    assert header.split() == ["JOB", "RANK", "POD", "NODE", "LEAF", "SPINE", "HOST", "LINK"]
    assert row.split() == ["a", "0", "a-0-x", "gpu-001", "l01", "s1", "healthy"]
    assert header.index("NODE") == row.index("gpu-001")
    assert "  - fits leaf l01" in report and "leaf l07: uplinks degraded" in report


def test_demo_nodes_degrade_exactly_the_named_host() -> None:
    degraded = [n["metadata"]["name"] for n in NODES if n["status"].get("conditions")]
    assert degraded == [samples.DEMO_DEGRADED_HOST]
    [condition] = NODES[int(samples.DEMO_DEGRADED_HOST[-3:]) - 1]["status"]["conditions"]
    assert (condition["type"], condition["status"]) == (samples.LINK_CONDITION, "True")


def test_the_demo_jobs_are_indexed_gpu_jobs_for_the_fabricsched_scheduler(repo_root: Path) -> None:
    jobs = demo_jobs.load_jobs(repo_root / "examples" / "demo-jobs")
    assert [(j["metadata"]["name"], demo_jobs.gang_size(j)) for j in jobs] == [
        ("train-4", 4), ("train-6", 6), ("eval-1", 1)]
    for job in jobs:
        assert job["spec"]["completionMode"] == "Indexed"
        pod = job["spec"]["template"]["spec"]
        assert pod["schedulerName"] == "fabricsched"
        assert [c["resources"]["limits"]["nvidia.com/gpu"] for c in pod["containers"]] == [8]


def test_a_jobs_folder_with_another_kind_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    with pytest.raises(errors.ClusterError, match="expected Job manifests"):
        demo_jobs.load_jobs(tmp_path)


@pytest.mark.parametrize(("spec", "size"), [
    pytest.param({}, 1, id="a bare Job runs one pod"),
    pytest.param({"parallelism": 6, "completions": 6}, 6, id="parallelism equal to completions"),
    pytest.param({"parallelism": 8, "completions": 3}, 3, id="fewer completions than parallelism"),
    pytest.param({"parallelism": 4}, 4, id="completions default to parallelism"),
])
def test_gang_size_is_the_pods_running_at_once(spec: dict[str, int], size: int) -> None:
    assert demo_jobs.gang_size({"spec": spec}) == size


def test_a_taken_port_is_replaced_by_a_free_one() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        chosen = demo._address(f"127.0.0.1:{port}")
    assert chosen.startswith("127.0.0.1:") and chosen != f"127.0.0.1:{port}"
    assert demo._address("127.0.0.1:0") != "127.0.0.1:0"


def test_a_podgroup_gang_shows_each_rank_with_the_pod_bound_on_its_node() -> None:
    placement = _placement("train", ["gpu-017", "gpu-018"], ["one leaf"])
    pods = [{"metadata": {"name": f"train-{i}"},
             "spec": {"nodeName": node, "schedulingGroup": {"podGroupName": "train"}}}
            for i, node in enumerate(["gpu-018", "gpu-017"])]
    text = tour.pod_group_section(placement, pods, NODES, _topology())
    lines = text.splitlines()
    assert lines[0].startswith("A native PodGroup gang") and "PodGroup train" in lines[0]
    assert lines[2].split()[:4] == ["train", "0", "train-1", "gpu-017"]
    assert lines[3].split()[:4] == ["train", "1", "train-0", "gpu-018"]
    assert "  - one leaf" in lines

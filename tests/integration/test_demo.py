"""`make demo` end to end: the demo driver on a cluster of its own, with the real operator and scheduler.

The driver runs twice in one folder (the second run must restart cleanly: `make demo` is
idempotent); the assertions read the second run. Expectations come from the example files
(which leaf's uplinks and which host's link are degraded), not from the driver.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterkit import find_binaries_or_skip

from fabricsched.cluster import demo, nodes, processes

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


@pytest.fixture(scope="module")
def tours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[demo.Tour, demo.Tour]]:
    find_binaries_or_skip("the demo's tests")
    options = demo.DemoOptions(
        dir=tmp_path_factory.mktemp("demo") / "cluster", nodes=EXAMPLES / "demo-nodes.yaml",
        topology=EXAMPLES / "demo-topology.yaml", crds=REPO / "crds", jobs=EXAMPLES / "demo-jobs",
        extender_address="127.0.0.1:0", health_address="127.0.0.1:0", timeout=60.0,
    )
    first = demo.up(options, say=lambda _: None)
    try:
        second = demo.up(options, say=lambda _: None)  # stops the first run, then starts afresh
    except BaseException:
        first.down()
        raise
    first.reap()
    try:
        yield first, second
    finally:
        second.down()


@pytest.fixture(scope="module")
def tour(tours: tuple[demo.Tour, demo.Tour]) -> demo.Tour:
    return tours[1]


def _topology_spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / "demo-topology.yaml").read_text())["spec"]
    return spec


def _leaf_label() -> str:
    return str(_topology_spec()["tiers"][0]["nodeLabel"])


def _spine_label() -> str:
    return str(_topology_spec()["tiers"][1]["nodeLabel"])


def _degraded_leaves() -> set[str]:
    return {link["domain"] for link in _topology_spec()["links"] if link["tier"] == "leaf"}


def _degraded_hosts() -> set[str]:
    return {
        n["metadata"]["name"] for n in nodes.load(EXAMPLES / "demo-nodes.yaml")
        for c in n["status"].get("conditions", [])
        if c["type"] == "FabricLinkDegraded" and c["status"] == "True"
    }


def _bound_nodes(tour: demo.Tour, job: str) -> list[str]:
    """Nodes of the job's pods, in rank order."""
    pods = [p for p in tour.pods if p["metadata"].get("labels", {}).get(demo.JOB_NAME_LABEL) == job]
    pods.sort(key=lambda p: int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]))
    return [p["spec"]["nodeName"] for p in pods]


def _labels(tour: demo.Tour, node: str, key: str) -> str:
    [found] = [n for n in tour.nodes if n["metadata"]["name"] == node]
    return str(found["metadata"]["labels"][key])


def _placement(tour: demo.Tour, job: str) -> dict[str, Any]:
    [found] = [p for p in tour.placements if p["metadata"]["name"] == job]
    return found


def test_the_example_files_set_the_stage_one_degraded_leaf_and_one_degraded_host() -> None:
    assert len(_degraded_leaves()) == 1
    assert len(_degraded_hosts()) == 1


def test_the_four_pod_job_lands_in_one_leaf_on_four_hosts(tour: demo.Tour) -> None:
    hosts = _bound_nodes(tour, "train-4")
    assert len(set(hosts)) == 4
    assert len({_labels(tour, h, _leaf_label()) for h in hosts}) == 1
    status = _placement(tour, "train-4")["status"]
    assert status["commSlowdown"] == pytest.approx(1.0)
    assert status["degradedPath"] is False


def test_the_six_pod_job_takes_two_leaves_under_one_spine_around_the_degraded_elements(
    tour: demo.Tour,
) -> None:
    hosts = _bound_nodes(tour, "train-6")
    leaves = {_labels(tour, h, _leaf_label()) for h in hosts}
    assert len(set(hosts)) == 6
    assert len(leaves) == 2
    assert len({_labels(tour, h, _spine_label()) for h in hosts}) == 1
    assert not leaves & _degraded_leaves()
    assert not set(hosts) & _degraded_hosts()
    status = _placement(tour, "train-6")["status"]
    assert status["degradedPath"] is False
    [degraded_leaf] = _degraded_leaves()
    assert any(degraded_leaf in reason for reason in status["reasons"]), status["reasons"]


def test_the_single_pod_job_takes_the_degraded_host(tour: demo.Tour) -> None:
    assert set(_bound_nodes(tour, "eval-1")) == _degraded_hosts()


def test_every_pod_runs_on_the_node_its_plan_gave_its_rank(tour: demo.Tour) -> None:
    for placement in tour.placements:
        planned = [r["node"] for r in sorted(placement["spec"]["ranks"], key=lambda r: r["rank"])]
        assert _bound_nodes(tour, placement["metadata"]["name"]) == planned
    assert {p["status"]["phase"] for p in tour.pods} == {"Running"}


def test_the_native_podgroup_gang_lands_in_one_leaf_on_no_degraded_path(tour: demo.Tour) -> None:
    assert tour.pod_group is not None
    group = tour.pod_group["spec"]["gang"]
    hosts = [p["spec"]["nodeName"] for p in tour.pods
             if (p["spec"].get("schedulingGroup") or {}).get("podGroupName") == group]
    assert len(set(hosts)) == tour.pod_group["spec"]["size"] == 4
    leaves = {_labels(tour, h, _leaf_label()) for h in hosts}
    # Inside one leaf its traffic never reaches the leaf's uplinks, so a leaf with degraded
    # uplinks is no degraded path for it (docs/placement.md rule 1); best fit may pick it.
    assert len(leaves) == 1 and not set(hosts) & _degraded_hosts()
    assert tour.pod_group["status"]["degradedPath"] is False
    assert sorted(r["node"] for r in tour.pod_group["spec"]["ranks"]) == sorted(hosts)
    assert f"PodGroup {group}" in tour.report()


def test_the_report_shows_every_pod_and_the_degraded_elements(tour: demo.Tour) -> None:
    report = tour.report()
    for pod in tour.pods:
        assert pod["metadata"]["name"] in report
    [leaf], [host] = _degraded_leaves(), _degraded_hosts()
    assert f"leaf {leaf}: uplinks degraded" in report
    assert f"host {host}: fabric link degraded" in report


def test_a_rerun_replaces_the_previous_demo(tours: tuple[demo.Tour, demo.Tour]) -> None:
    first, second = tours
    assert first.dir == second.dir
    assert not processes.is_alive(first.operator)
    assert second.operator.pid != first.operator.pid
    records, _ = processes.read_state(second.dir / "state.json")
    operator = [r for r in records if r.component == demo.OPERATOR]
    assert len(operator) == 1 and processes.is_alive(operator[0])
    assert (second.dir / demo.PID_FILE).read_text().strip() == str(operator[0].pid)
    assert all(processes.is_alive(r) for r in records)


def test_down_stops_the_operator_and_the_control_plane(tour: demo.Tour) -> None:
    records, _ = processes.read_state(tour.dir / "state.json")
    tour.down()
    assert not [r.component for r in records if processes.is_alive(r)]
    assert not (tour.dir / "state.json").exists() and not (tour.dir / demo.PID_FILE).exists()
    assert demo.down(tour.dir) == []  # again: nothing left to stop


def test_the_last_act_degrades_a_host_under_the_widest_job_and_explain_shows_it(tour: demo.Tour) -> None:
    act = tour.last_act
    assert act is not None and act.job == "train-6"
    assert act.host == _bound_nodes(tour, "train-6")[0]
    assert f"{tour.namespace}/train-6: Job train-6 -> FabricPlacement train-6" in act.before
    assert "path: healthy" in act.before
    assert "unhealthy on path: 1" in act.after and act.host in act.after
    assert "degraded path" in act.after
    assert "PathDegraded" in act.after  # the recent Events

"""A running gang's FabricPlacement follows the health of the elements on its path."""

from __future__ import annotations

from typing import Any

from extender_harness import TOPOLOGY, Harness, fabric_nodes, relabel

from fabricsched import ids
from fabricsched.controller import status as topology_status
from fabricsched.topology import health

RECOVER_S = 300  # the default spec.health.recoverAfterSeconds


def run_gang(h: Harness, name: str, pods: int) -> list[str]:
    uid = h.job(name, pods)
    placed = [h.place(h.pod(name, uid, rank)) for rank in range(pods)]
    h.run(h.writer.flush(1.0))
    return placed


def status(h: Harness, name: str) -> dict[str, Any]:
    status: dict[str, Any] = h.store.get("train", name)["status"]
    return status


def condition(h: Harness, name: str, kind: str) -> dict[str, Any]:
    return next(c for c in status(h, name)["conditions"] if c["type"] == kind)


def test_a_degraded_host_on_the_path_marks_the_gang_and_its_recovery_clears_it(harness: Harness) -> None:
    placed = run_gang(harness, "train6", 6)
    before = status(harness, "train6")
    assert before["degradedPath"] is False
    assert condition(harness, "train6", "PathDegraded")["status"] == "False"
    assert condition(harness, "train6", "Bound")["status"] == "True"
    at_placement = before["commSlowdownAtPlacement"]
    harness.events.events.clear()

    relabel(harness, placed[0], "degraded")
    after = status(harness, "train6")
    assert after["degradedPath"] is True
    assert after["commSlowdown"] > at_placement and after["commSlowdownAtPlacement"] == at_placement
    (element,) = after["unhealthyPath"]
    assert element["kind"] == "node" and element["node"] == placed[0] and element["state"] == "degraded"
    assert [s["source"] for s in element["sources"]] == ["label"] and element["since"]
    degraded = condition(harness, "train6", "PathDegraded")
    assert degraded["status"] == "True" and degraded["reason"] == "ElementUnhealthy"
    assert placed[0] in degraded["message"]
    subjects = sorted(s for s, why, _, warning in harness.events.events if why == "PathDegraded" and warning)
    assert subjects == ["FabricPlacement/train6", "Job/train6"]
    names, count = harness.service.gangs_on_path.affected(
        ids.TopologyName(TOPOLOGY), health.ElementId.node(placed[0])
    )
    assert names == ["train/train6"] and count == 1

    harness.events.events.clear()
    relabel(harness, placed[0], None)
    assert status(harness, "train6")["degradedPath"] is True  # recovery waits out recoverAfterSeconds
    harness.clock.advance(RECOVER_S + 1)
    harness.state.tick()
    harness.run(harness.writer.flush(1.0))
    recovered = status(harness, "train6")
    assert recovered["degradedPath"] is False and recovered["unhealthyPath"] == []
    assert recovered["commSlowdown"] == at_placement
    assert condition(harness, "train6", "PathDegraded")["reason"] == "PathHealthy"
    reasons = sorted((s, r) for s, r, _, _ in harness.events.events if r.startswith("Path"))
    assert reasons == [("FabricPlacement/train6", "PathRecovered"), ("Job/train6", "PathRecovered")]


def test_an_element_off_the_path_leaves_the_gang_alone(harness: Harness) -> None:
    placed = run_gang(harness, "small", 2)
    other = next(n for n in harness.state.nodes if n not in placed)
    writes = harness.writer.writes
    relabel(harness, other, "down")
    assert status(harness, "small")["degradedPath"] is False
    assert harness.writer.writes == writes
    assert not [e for e in harness.events.events if e[1] == "PathDegraded"]


def test_a_condition_keeps_its_transition_time_while_its_status_holds(harness: Harness) -> None:
    placed = run_gang(harness, "keep", 6)
    relabel(harness, placed[0], "degraded")
    first = condition(harness, "keep", "PathDegraded")["lastTransitionTime"]
    harness.clock.advance(30)
    relabel(harness, placed[1], "down")
    later = condition(harness, "keep", "PathDegraded")
    assert later["lastTransitionTime"] == first and placed[1] in later["message"]
    assert status(harness, "keep")["unhealthyPath"][0]["state"] == "down"  # worst first


def test_fabric_nodes_fixture_is_untouched() -> None:
    assert len(fabric_nodes()) == 16


def test_the_topology_status_names_the_gangs_a_degraded_element_touches(harness: Harness) -> None:
    placed = run_gang(harness, "named", 6)
    relabel(harness, placed[0], "degraded")
    name = ids.TopologyName(TOPOLOGY)
    obj = harness.state.objects[name]
    tf = harness.state.topologies[name]
    snap = harness.state.snapshot(name)
    affected = harness.service.gangs_on_path
    wire = topology_status.build(topology_status.gather(obj, tf, snap, harness.clock(), None, affected))
    (row,) = wire["degraded"]
    assert row["node"] == placed[0]
    assert row["affectedGangs"] == ["train/named"] and row["affectedGangCount"] == 1
    version = harness.service.gangs_on_path.version
    harness.end_job("named", harness.store.get("train", "named")["spec"]["jobUID"], 6)
    assert harness.service.gangs_on_path.version > version
    affected = harness.service.gangs_on_path
    wire = topology_status.build(topology_status.gather(obj, tf, snap, harness.clock(), None, affected))
    assert wire["degraded"][0]["affectedGangCount"] == 0


def _restarted(h: Harness, name: str, pods: int, degraded_host: str) -> Harness:
    """A new extender over the same FabricPlacement objects, Job and bound pods, whose cluster
    state starts with ``degraded_host`` labelled degraded: no health change is ever seen for it."""
    manifests = fabric_nodes()
    for node in manifests:
        if node["metadata"]["name"] == degraded_host:
            node["metadata"]["labels"]["fabricsched.io/fabric-health"] = "degraded"
    restarted = Harness(manifests, store=h.store)
    for job in h.state.jobs.values():
        restarted.state.apply_job({"metadata": {"name": job.name, "namespace": job.namespace, "uid": job.uid},
                                   "spec": {"parallelism": pods, "completions": pods,
                                            "completionMode": "Indexed"}, "status": {}})
    for pod in h.state.pods.values():
        rank = int(pod.labels["batch.kubernetes.io/job-completion-index"])
        uid = pod.labels.get("batch.kubernetes.io/controller-uid") or next(iter(h.state.jobs.values())).uid
        assert pod.node is not None
        restarted.bind(restarted.pod(name, uid, rank), pod.node)
    restarted.restore()
    restarted.run(restarted.writer.flush(1.0))
    return restarted


def test_after_a_restart_a_gang_shows_an_element_that_went_bad_before_it(harness: Harness) -> None:
    placed = run_gang(harness, "train6", 6)
    relabel(harness, placed[0], "degraded")
    assert status(harness, "train6")["degradedPath"] is True

    restarted = _restarted(harness, "train6", 6, placed[0])
    after = status(restarted, "train6")
    assert after["degradedPath"] is True
    found = [(e["kind"], e["node"], e["state"]) for e in after["unhealthyPath"]]
    assert found == [("node", placed[0], "degraded")]
    names, count = restarted.service.gangs_on_path.affected(
        ids.TopologyName(TOPOLOGY), health.ElementId.node(placed[0])
    )
    assert names == ["train/train6"] and count == 1


def test_after_a_restart_a_host_that_degraded_while_away_is_written_to_the_gang(harness: Harness) -> None:
    placed = run_gang(harness, "train6", 6)
    assert status(harness, "train6")["degradedPath"] is False

    restarted = _restarted(harness, "train6", 6, placed[1])
    after = status(restarted, "train6")
    assert after["degradedPath"] is True and after["unhealthyPath"][0]["node"] == placed[1]
    assert condition(restarted, "train6", "PathDegraded")["status"] == "True"

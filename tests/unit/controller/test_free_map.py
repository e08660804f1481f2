"""The incremental free-GPU map behind snapshots, and the extender's other state look-ups."""

from __future__ import annotations

from typing import Any

from controller_harness import Harness, gpu_node, topology_body
from hypothesis import given, settings
from hypothesis import strategies as st

import builders
from fabricsched import ids
from fabricsched.controller import snapshots

IB = ids.TopologyName("ib")
GPU = "nvidia.com/gpu"
NODES = [f"{leaf}-h{i}" for leaf in ("l1", "l2") for i in range(3)]


def snap(h: Harness) -> snapshots.TopologySnapshot:
    found = h.state.snapshot(IB)
    assert found is not None
    return found


def from_scratch(h: Harness) -> dict[str, int]:
    """What the map must hold: allocatable minus what active pods hold, per fabric host."""
    s = snap(h)
    return {n: max(0, host.gpus - h.state.used(n, GPU)) for n, host in s.fabric.hosts.items()}


def test_a_bind_moves_free_gpus_without_rebuilding_the_fabric_or_changing_older_snapshots(
    synced: Harness,
) -> None:
    before = snap(synced)
    synced.state.apply_pod(builders.make_pod("p", "train").gpus(6).on("l1-h0").build())
    after = snap(synced)
    assert after.fabric is before.fabric
    assert before.free_gpus[ids.NodeName("l1-h0")] == 8
    assert after.free_gpus[ids.NodeName("l1-h0")] == 2
    synced.state.delete_pod("train", "p")
    assert snap(synced).free_gpus[ids.NodeName("l1-h0")] == 8 and after.free_gpus[ids.NodeName("l1-h0")] == 2


OPS = st.one_of(
    st.tuples(st.just("bind"), st.sampled_from(NODES), st.integers(1, 8), st.integers(0, 5)),
    st.tuples(st.just("end"), st.integers(0, 5)),
    st.tuples(st.just("delete"), st.integers(0, 5)),
    st.tuples(st.just("gpus"), st.sampled_from(NODES), st.sampled_from([0, 4, 8, 16])),
    st.tuples(st.just("leave"), st.sampled_from(NODES)),
    st.tuples(st.just("degrade"), st.sampled_from(NODES), st.booleans()),
    st.tuples(st.just("respec"), st.sampled_from(["nvidia.com/gpu", "example.com/gpu"])),
    st.tuples(st.just("snapshot")),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(OPS, max_size=25))
def test_the_free_map_equals_a_fresh_count_after_any_sequence_of_changes(ops: list[tuple[Any, ...]]) -> None:
    h = Harness()
    h.state.apply_topology("ib", topology_body())
    for name in NODES:
        h.state.apply_node(gpu_node(name, leaf=name[:2]).build())
    h.state.mark_synced()
    kept: list[tuple[snapshots.TopologySnapshot, dict[ids.NodeName, int]]] = []
    generation = 1
    for op in ops:
        kind = op[0]
        if kind == "bind":
            _, node, gpus, slot = op
            h.state.apply_pod(builders.make_pod(f"p{slot}", "train").gpus(gpus).on(node).build())
        elif kind == "end":
            pod = builders.make_pod(f"p{op[1]}", "train").gpus(1).on("l1-h0").phase("Succeeded")
            if ("train", f"p{op[1]}") in h.state.pods:
                h.state.apply_pod(pod.build())
        elif kind == "delete":
            h.state.delete_pod("train", f"p{op[1]}")
        elif kind == "gpus":
            h.state.apply_node(gpu_node(op[1], leaf=op[1][:2], gpus=op[2]).build())
        elif kind == "leave":
            h.state.apply_node(gpu_node(op[1], leaf=op[1][:2]).unlabel("gpu").build())
        elif kind == "degrade":
            node = gpu_node(op[1], leaf=op[1][:2]).condition("FabricLinkDegraded", op[2], "flaps")
            h.state.apply_node(node.build())
        elif kind == "respec":
            generation += 1
            h.state.apply_topology("ib", topology_body(generation=generation, gpuResource=op[1]))
        else:
            s = snap(h)
            kept.append((s, dict(s.free_gpus)))
            assert dict(s.free_gpus) == from_scratch(h)
    resource = h.state.topologies[IB].spec.gpu_resource
    s = snap(h)
    assert dict(s.free_gpus) == {
        n: max(0, host.gpus - h.state.used(n, resource)) for n, host in s.fabric.hosts.items()
    }
    for old, seen in kept:
        assert dict(old.free_gpus) == seen  # a snapshot never moves once handed out


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([*NODES, "cpu-1", "unknown"]), max_size=10), st.booleans())
def test_the_topology_holding_most_candidates_is_the_one_whose_fabric_holds_most(
    candidates: list[str], second: bool
) -> None:
    h = Harness()
    h.state.apply_topology("ib", topology_body())
    if second:
        selector = {"matchLabels": {"leaf": "l2"}}
        h.state.apply_topology("aa", topology_body("aa", uid="uid-aa", nodeSelector=selector))
    for name in NODES:
        h.state.apply_node(gpu_node(name, leaf=name[:2]).label("leaf", name[:2]).build())
    h.state.apply_node(builders.make_node("cpu-1").leaf("l1").spine("s1").label("gpu", "yes").build())
    h.state.mark_synced()
    fabrics = {name: h.state.snapshot(name) for name in h.state.topologies}
    counts: dict[ids.TopologyName, int] = {}
    for node in set(candidates):
        # A node selected by two topologies is in neither fabric: at most one holds it.
        owners = [name for name, snap in fabrics.items() if snap and ids.NodeName(node) in snap.fabric.hosts]
        assert len(owners) <= 1
        for owner in owners:
            counts[owner] = counts.get(owner, 0) + 1
    expected = max(sorted(counts), key=lambda n: counts[n]) if counts else None
    assert h.state.topology_holding_most([ids.NodeName(n) for n in candidates]) == expected


def test_jobs_are_found_by_uid_after_being_recreated_or_deleted(synced: Harness) -> None:
    def job(name: str, uid: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "train", "uid": uid},
                "spec": {"parallelism": 2, "completions": 2}, "status": {}}

    synced.state.apply_job(job("a", "uid-1"))
    synced.state.apply_job(job("b", "uid-2"))
    assert synced.state.job_by_uid("train", "uid-1") == synced.state.jobs[("train", "a")]
    assert synced.state.job_by_uid("other", "uid-1") is None
    synced.state.apply_job(job("a", "uid-3"))  # recreated under the same name
    assert synced.state.job_by_uid("train", "uid-1") is None
    assert synced.state.job_by_uid("train", "uid-3") == synced.state.jobs[("train", "a")]
    synced.state.delete_job("train", "b")
    assert synced.state.job_by_uid("train", "uid-2") is None

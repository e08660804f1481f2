"""The fabric page in ``fabricsched run``: its flag, and its view of the process (the operator's
state and the extender's book, path index and Pending board, in memory)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
from pathlib import Path
from typing import Any

import pytest

from fabricsched import ids
from fabricsched.app import commands, dashboard
from fabricsched.controller import state as cluster_state
from fabricsched.dashboard import document, server
from fabricsched.extender import service
from fabricsched.ports import notices

GPU = "nvidia.com/gpu"
T0 = 1_700_000_000.0


def parse(tmp_path: Path, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    commands.register(parser.add_subparsers())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    return parser.parse_args(["run", "--kubeconfig", str(kubeconfig), *argv])


def test_the_page_is_on_by_default_on_loopback_and_an_empty_address_turns_it_off(tmp_path: Path) -> None:
    assert commands.options_from(parse(tmp_path)).dashboard.address == "127.0.0.1:8082"
    assert not commands.options_from(parse(tmp_path, "--dashboard-address=")).dashboard.enabled


def test_a_bad_address_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--dashboard-address"):
        commands.options_from(parse(tmp_path, "--dashboard-address=8082"))


class NullStore:
    async def load(self) -> list[dict[str, Any]]:
        return []

    async def create(self, manifest: dict[str, Any]) -> None:
        return None

    async def save(self, manifest: dict[str, Any]) -> None:
        return None


class NullRecorder:
    def record(self, ref: notices.ObjectRef, notice: notices.Notice, now: float) -> None:
        del ref, notice, now


def pod(name: str, gpus: int, rank: int, node: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{name}-{rank}", "namespace": "team", "uid": f"uid-{name}-{rank}",
            "labels": {"batch.kubernetes.io/job-name": name,
                       "batch.kubernetes.io/job-completion-index": str(rank)},
            "ownerReferences": [{"kind": "Job", "name": name, "uid": f"job-{name}", "controller": True}],
        },
        "spec": {"schedulerName": "fabricsched", **({"nodeName": node} if node else {}),
                 "containers": [{"name": "t", "resources": {"requests": {GPU: str(gpus)}}}]},
        "status": {"phase": "Running" if node else "Pending"},
    }


def test_the_view_follows_plans_binds_and_pending_gangs() -> None:
    state = cluster_state.ClusterState(lambda: T0)
    for i in range(4):
        state.apply_node({"metadata": {"name": f"n{i}", "labels": {"leaf": f"l{i // 2}", "spine": "s0"}},
                          "status": {"allocatable": {GPU: "8"}}})
    spec = {"tiers": [{"name": "leaf", "nodeLabel": "leaf"}, {"name": "spine", "nodeLabel": "spine"}]}
    state.apply_topology("ib", {"metadata": {"name": "ib", "generation": 1}, "spec": spec})
    state.mark_synced()
    extender = service.Service(state, NullStore(), None, NullRecorder(), lambda: T0, service.ServiceOptions())
    coord = extender.coordinator
    state.subscribe(coord.on_change)
    source = dashboard.ProcessSource(state, extender)

    async def place() -> list[str]:
        coord.restore([])
        for name, size in (("two", 2), ("huge", 9)):
            state.apply_job({"metadata": {"name": name, "namespace": "team", "uid": f"job-{name}"},
                             "spec": {"parallelism": size, "completions": size}, "status": {}})
            for rank in range(size):
                state.apply_pod(pod(name, 8, rank))
        answer = await coord.filter(pod("two", 8, 0), [f"n{i}" for i in range(4)])
        await coord.filter(pod("huge", 8, 0), [f"n{i}" for i in range(4)])
        return answer.passed

    before = source.version()
    (target,) = asyncio.run(place())
    assert source.version() != before
    doc = document.build(source.snapshot())
    (gang,) = doc["gangs"]
    assert (gang["name"], gang["phase"], gang["size"]) == ("two", "Reserved", 2)
    hosts = {h["name"]: h for h in doc["fabric"]["hosts"]}
    assert sum(h["reserved"] for h in hosts.values()) == 16 and hosts[target]["reserved"] == 8
    (waiting,) = doc["pending"]
    assert (waiting["name"], waiting["reason"]) == ("huge", "Unplaceable")
    assert waiting["message"].startswith("needs 9 x 8 GPUs")
    moved = source.version()
    state.apply_pod(pod("two", 8, 0, node=target))
    assert source.version() != moved
    bound = {h["name"]: h for h in document.build(source.snapshot())["fabric"]["hosts"]}[target]
    assert (bound["used"], bound["reserved"], bound["free"]) == (8, 0, 0)
    for rank in range(9):
        state.delete_pod("team", f"huge-{rank}")
    assert document.build(source.snapshot())["pending"] == []  # no pod of it waits any more
    assert ids.TopologyName("ib") in state.topologies


def test_a_port_in_use_leaves_the_process_running_without_the_page(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        source = dashboard.ProcessSource(cluster_state.ClusterState(lambda: T0), None)  # type: ignore[arg-type]
        with caplog.at_level(logging.ERROR):
            asyncio.run(asyncio.wait_for(server.serve(source, server.DashboardOptions(address)), 5))
    assert "fabric page not served" in caplog.text

"""Starting, recording and stopping component processes (with stand-in commands)."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabricsched.cluster import processes

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
# Ignores SIGTERM, and has a child in its process group that must die with it.
# Says "ready" once the trap is set: a SIGTERM before that would still kill it.
STUBBORN = ["/bin/sh", "-c", "trap '' TERM; echo ready; sleep 60 & wait"]


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[bytes], processes.ProcessRecord]]]:
    handles: list[tuple[subprocess.Popen[bytes], processes.ProcessRecord]] = []
    yield handles
    processes.stop([r for _, r in handles], timeout=1)
    for child, _ in handles:
        child.wait()


def test_a_started_process_runs_in_its_own_process_group_and_logs_to_its_file(
        tmp_path: Path, started: list[tuple[subprocess.Popen[bytes], processes.ProcessRecord]]) -> None:
    child, record = processes.start("echoer", ["/bin/sh", "-c", "echo hello; sleep 60"], tmp_path / "l.log")
    started.append((child, record))
    assert os.getpgid(record.pid) == record.pid != os.getpgid(0)
    assert processes.is_alive(record)


def test_stop_terminates_and_reports_what_needed_sigkill(
        tmp_path: Path, started: list[tuple[subprocess.Popen[bytes], processes.ProcessRecord]]) -> None:
    for name, argv in (("polite", SLEEPER), ("stubborn", STUBBORN)):
        started.append(processes.start(name, argv, tmp_path / f"{name}.log"))
    deadline = time.monotonic() + 10
    while "ready" not in (tmp_path / "stubborn.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.01)
    records = [r for _, r in started]
    killed = processes.stop(records, timeout=0.5)
    assert killed == ["stubborn"]
    assert not any(processes.is_alive(r) for r in records)


def test_a_reused_pid_is_not_mistaken_for_our_process(
        tmp_path: Path, started: list[tuple[subprocess.Popen[bytes], processes.ProcessRecord]]) -> None:
    started.append(processes.start("sleeper", SLEEPER, tmp_path / "s.log"))
    record = started[0][1]
    assert record.start_ticks is not None
    impostor = dataclasses.replace(record, start_ticks=record.start_ticks + 1)
    assert not processes.is_alive(impostor)
    processes.stop([impostor], timeout=0.2)  # must not signal the real process
    assert processes.is_alive(record)


def test_state_file_round_trips_records_and_extra_fields(tmp_path: Path) -> None:
    record = processes.ProcessRecord("etcd", 11, 11, 99, "/l/etcd.log", ("etcd", "--x=1"))
    path = tmp_path / "state.json"
    processes.write_state(path, [record], {"ports": {"apiserver": 3}})
    records, extra = processes.read_state(path)
    assert records == [record]
    assert extra == {"version": processes.STATE_VERSION, "ports": {"apiserver": 3}}


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = processes.free_ports(5)
    assert len(set(ports)) == 5
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_free_ports_stay_out_of_the_ephemeral_range_and_fall_back_when_it_is_taken(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Outgoing connections take ports from the ephemeral range: a port picked there can be
    # taken between the pick and the server's bind.
    assert all(p in processes.PICKED_PORTS for p in processes.free_ports(5))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        monkeypatch.setattr(processes, "PICKED_PORTS", range(taken, taken + 1))
        ports = processes.free_ports(2)
    assert len(set(ports)) == 2 and taken not in ports


def test_free_ports_never_hands_a_port_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    # A caller binds later: a port it was given, closed but not yet bound, must not go to the
    # next caller, even when the range holds no other (the second caller gets the kernel's).
    monkeypatch.setattr(processes, "_handed_out", set())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        only = probe.getsockname()[1]
    monkeypatch.setattr(processes, "PICKED_PORTS", range(only, only + 1))
    first, second = processes.free_ports(1), processes.free_ports(1)
    assert first == [only] and second != first


def test_log_tail_returns_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert processes.log_tail(log, 2) == "line 98\nline 99"
    assert "no log" in processes.log_tail(tmp_path / "absent.log")

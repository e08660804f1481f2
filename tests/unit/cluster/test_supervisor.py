"""The supervisor of ``cluster up``'s components: a command that exits is started again."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fabricsched.cluster import processes

Started = tuple[subprocess.Popen[bytes], processes.ProcessRecord]


@pytest.fixture
def started() -> Iterator[list[Started]]:
    handles: list[Started] = []
    yield handles
    processes.stop([r for _, r in handles], timeout=2)
    for child, _ in handles:
        child.wait()


def eventually(what: str, check: Callable[[], object], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_a_killed_command_is_started_again_and_stop_ends_both(tmp_path: Path, started: list[Started]) -> None:
    pids = tmp_path / "pids"
    command = ["/bin/sh", "-c", f"echo $$ >> {pids}; exec sleep 60"]
    started.append(processes.start("sleeper", processes.supervised(command), tmp_path / "s.log"))
    record = started[0][1]
    eventually("the first run", lambda: len(lines(pids)) == 1)
    first = int(lines(pids)[0])
    assert processes.children(record.pid) == [first]
    os.kill(first, signal.SIGKILL)
    eventually("the restart", lambda: len(lines(pids)) == 2)
    second = int(lines(pids)[1])
    assert second != first and processes.children(record.pid) == [second]
    assert "exited with -9" in (tmp_path / "s.log").read_text()
    assert processes.stop([record], timeout=5) == []
    eventually("the command gone", lambda: not Path(f"/proc/{second}").exists()
               or Path(f"/proc/{second}/stat").read_text().split(")")[-1].split()[0] == "Z")


def test_a_command_that_keeps_failing_fast_waits_longer_each_time(
    tmp_path: Path, started: list[Started]
) -> None:
    log = tmp_path / "f.log"
    started.append(processes.start("failing", processes.supervised(["/bin/sh", "-c", "exit 3"]), log))
    eventually("three restarts", lambda: log.read_text().count("exited with 3") >= 3)
    delays = [line.rsplit(" in ", 1)[1] for line in log.read_text().splitlines() if "restarting" in line]
    assert delays[:3] == ["1 s", "2 s", "4 s"]


def test_a_stop_while_waiting_to_restart_ends_the_supervisor(tmp_path: Path, started: list[Started]) -> None:
    log = tmp_path / "f.log"
    started.append(processes.start("failing", processes.supervised(["/bin/sh", "-c", "exit 1"]), log))
    eventually("a failure", lambda: "restarting" in log.read_text())
    assert processes.stop([started[0][1]], timeout=5) == []


def test_a_restart_shows_in_the_record_only_for_a_supervised_command(
    tmp_path: Path, started: list[Started]
) -> None:
    log = tmp_path / "f.log"
    started.append(processes.start("failing", processes.supervised(["/bin/sh", "-c", "exit 1"]), log))
    plain = tmp_path / "p.log"
    started.append(processes.start("plain", ["/bin/sh", "-c", "echo 'supervisor: not me'; sleep 60"], plain))
    eventually("a failure", lambda: processes.has_restarted(started[0][1]))
    eventually("the plain log", lambda: plain.exists() and "not me" in plain.read_text())
    assert not processes.has_restarted(started[1][1])

"""Starting and stopping the component processes, and the state file that survives us.

Each process runs in its own session (hence its own process group), so Ctrl-C in the
terminal that ran ``cluster up`` does not take the cluster down, and ``down`` can stop a
component together with anything it spawned. The state file is rewritten after every
start, so a crash halfway through ``up`` still leaves a record ``down`` can act on.

``cluster up`` returns while its components keep running, so nobody would notice one that
exits (a kube-scheduler exits when it loses its leader lease during an API server outage).
Components started through ``supervised`` run under ``supervise`` (``python -m
fabricsched.cluster.processes COMMAND...``): it restarts the command whenever it exits, after a
back-off that grows while the command keeps failing fast, and stops it (and itself) on
SIGTERM. It shares the component's process group, so ``stop`` ends both at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

STATE_VERSION = 1


@dataclass(frozen=True)
class ProcessRecord:
    component: str
    pid: int
    pgid: int
    start_ticks: int | None
    """Kernel start time of the process: tells our process apart from a later one reusing its PID."""
    log: str
    argv: tuple[str, ...]


PICKED_PORTS = range(20000, 32768)
"""Where ``free_ports`` looks first: below Linux's ephemeral range (32768-60999 by default), so
an outgoing connection made between the pick and the bind cannot take the port."""

_handed_out: set[int] = set()
"""Ports ``free_ports`` already gave this process: a caller binds its ports later (a test picks the
extender's port, then starts a control plane that picks its own), so a port closed but not yet bound
must not be picked again (the likely way CI lost an extender's port twice). At most one entry
per port number."""
_handing_out = threading.Lock()


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports, none given before by this process (held open
    together, so they cannot repeat)."""
    with _handing_out:
        ports = _pick(count)
        _handed_out.update(ports)
        return ports


def _pick(count: int) -> list[int]:
    sockets: list[socket.socket] = []
    try:
        for port in random.sample(PICKED_PORTS, min(len(PICKED_PORTS), 64 + count)):
            if len(sockets) == count:
                break
            if port in _handed_out:
                continue
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            sockets.append(s)
        while len(sockets) < count:  # that range taken: any port the kernel gives
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            if s.getsockname()[1] in _handed_out:
                s.close()  # the kernel may give a closed, handed-out port again
                continue
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _proc_stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    return raw[raw.rindex(")") + 2:].split()


def _start_ticks(pid: int) -> int | None:
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None


def is_alive(record: ProcessRecord) -> bool:
    """True while the recorded process runs (a zombie counts as gone: it holds no port)."""
    fields = _proc_stat(record.pid)
    if fields is None:
        if Path("/proc/self/stat").exists():
            return False
        try:  # no procfs (macOS): fall back to a signal probe
            os.kill(record.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if fields[0] in ("Z", "X"):
        return False
    return record.start_ticks is None or int(fields[19]) == record.start_ticks


def start(component: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None,
          ) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
    """Start one component in a new session, stdout and stderr appended to ``log``; ``env`` is
    added to our environment."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        # The child keeps its own copy of the descriptor; ours closes with this block.
        process = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env={**os.environ, **env} if env else None,
        )
    record = ProcessRecord(
        component=component, pid=process.pid, pgid=process.pid,
        start_ticks=_start_ticks(process.pid), log=str(log), argv=tuple(argv),
    )
    return process, record


def write_state(path: Path, records: Iterable[ProcessRecord], extra: dict[str, Any]) -> None:
    """Atomically replace the state file (a reader never sees half of it)."""
    state = {"version": STATE_VERSION, **extra, "processes": [asdict(r) for r in records]}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(path)


def read_state(path: Path) -> tuple[list[ProcessRecord], dict[str, Any]]:
    state = json.loads(path.read_text())
    records = [
        ProcessRecord(
            component=p["component"], pid=int(p["pid"]), pgid=int(p["pgid"]),
            start_ticks=p.get("start_ticks"), log=p["log"], argv=tuple(p["argv"]),
        )
        for p in state.pop("processes", [])
    ]
    return records, state


def _signal(record: ProcessRecord, sig: signal.Signals) -> None:
    if not is_alive(record):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(record.pgid, sig)


def _wait_gone(record: ProcessRecord, timeout: float, poll: float) -> bool:
    deadline = time.monotonic() + timeout
    while is_alive(record):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


def stop(records: Sequence[ProcessRecord], timeout: float = 10.0, poll: float = 0.05) -> list[str]:
    """Stop process groups in reverse start order: SIGTERM, then SIGKILL after ``timeout``.

    Reverse order matters: an API server whose etcd is gone spends its whole grace
    period retrying, while one stopped before etcd exits in about a second.
    Returns the components that needed SIGKILL.
    """
    killed: list[str] = []
    for record in reversed(records):
        _signal(record, signal.SIGTERM)
        if not _wait_gone(record, timeout, poll):
            killed.append(record.component)
            _signal(record, signal.SIGKILL)
            _wait_gone(record, 5.0, poll)
    return killed


def log_tail(path: Path | str, lines: int = 25) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as e:
        return f"(no log: {e})"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else "(log is empty)"


RESTART_DELAY_S = 1.0
"""First wait before restarting a command that exited; doubled on each fast failure."""
MAX_RESTART_DELAY_S = 8.0
HEALTHY_AFTER_S = 30.0
"""A command that ran this long had started well: its next restart waits the first delay again."""


SUPERVISOR_MODULE = "fabricsched.cluster.processes"
RESTART_MARK = "supervisor:"
"""Starts the line the supervisor logs for each exit of its command."""


def supervised(argv: Sequence[str]) -> list[str]:
    """``argv`` run under ``supervise``: restarted whenever it exits, until stopped."""
    return [sys.executable, "-m", SUPERVISOR_MODULE, *argv]


def supervise(argv: Sequence[str]) -> int:
    """Run ``argv`` until SIGTERM or SIGINT, restarting it whenever it exits; returns its last
    exit code. The signal is passed on to the running command."""
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    fast_failures = 0
    while True:
        started = time.monotonic()
        child = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL)
        code = child.wait()
        if stopping:
            return code
        ran = time.monotonic() - started
        fast_failures = 0 if ran >= HEALTHY_AFTER_S else fast_failures + 1
        delay = min(RESTART_DELAY_S * 2 ** max(0, fast_failures - 1), MAX_RESTART_DELAY_S)
        print(f"{RESTART_MARK} {argv[0]} exited with {code} after {ran:.1f} s; restarting in {delay:.0f} s",
              flush=True)
        deadline = time.monotonic() + delay
        while not stopping and time.monotonic() < deadline:
            time.sleep(0.1)
        if stopping:
            return code


def has_restarted(record: ProcessRecord) -> bool:
    """True once a supervised component's command exited at least once (its log says so)."""
    if tuple(record.argv[1:3]) != ("-m", SUPERVISOR_MODULE):
        return False
    try:
        with Path(record.log).open("rb") as log:
            return any(line.startswith(RESTART_MARK.encode()) for line in log)
    except OSError:
        return False


def children(pid: int) -> list[int]:
    """PIDs of the direct children of ``pid`` (Linux; empty when it has none or is gone)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: python -m fabricsched.cluster.processes COMMAND [ARG...]", file=sys.stderr)
        sys.exit(2)
    sys.exit(supervise(sys.argv[1:]))

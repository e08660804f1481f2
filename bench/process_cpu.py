"""CPU time per process of a command's process tree, sampled while it runs.

    python bench/process_cpu.py --out cpu.json -- python bench/scale_bench.py --nodes 1000 ...

Every ``--interval`` seconds it reads ``/proc/<pid>/stat`` of every process of the command (its
descendants, and the daemons they started: every process whose environment carries the tag
this script sets) and adds each one's user + system time to its role (``ROLES``: the
kube-apiserver, the scheduler, kwok, ``fabricsched run`` and its front process, the
pass-through server...). It prints the CPU seconds per role over the whole run and over the
``--window`` role's last busy span (by default the pass-through server's, which is busy only
while the latency phase calls it, after its start-up): where the two cores went while the
requests were timed. Linux only; any tree's bench can run under it, since it looks only at
processes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
TAG = "PROCESS_CPU_TAG"
"""Set in the command's environment: daemons it starts (reparented away from it) inherit it."""
IDLE_GAP_S = 3.0
"""A pause this long between two growths of the window role's CPU ends a busy span."""
ROLES: tuple[tuple[str, str], ...] = (
    # (role, a substring of the command line that names it); the first match wins.
    ("passthrough", "--passthrough"),
    ("fabricsched front", "fabricsched.app.front"),
    ("fabricsched run", " run --kubeconfig"),
    ("kube-apiserver", "kube-apiserver"),
    ("kube-scheduler", "kube-scheduler"),
    ("kube-controller-manager", "kube-controller-manager"),
    ("etcd", "etcd"),
    ("kwok", "kwok"),
    ("bench", "bench/"),
)


def role_of(cmdline: str) -> str:
    for role, needle in ROLES:
        if needle in cmdline:
            return role
    return "other"


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return None  # gone since it was listed


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a process."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the name may hold spaces and parentheses
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS


def _tagged(pid: int, tag: str) -> bool:
    environ = _read(f"/proc/{pid}/environ")
    return environ is not None and f"{TAG}={tag}\0" in environ


def sample(root: int, tag: str, roles: dict[int, str], strangers: set[int]) -> dict[int, float]:
    """CPU seconds of every live process of the command (``roles`` learns each new pid's role,
    ``strangers`` the pids that are not the command's, so their environment is read once)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (found := _stat(int(entry))) is not None:
            stats[int(entry)] = found
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    ours, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            ours.add(pid)
        todo.extend(children.get(pid, ()))
    for pid in stats.keys() - ours - strangers - roles.keys():
        (ours.add(pid) if _tagged(pid, tag) else strangers.add(pid))
    ours |= stats.keys() & roles.keys()
    for pid in ours - roles.keys():
        roles[pid] = role_of((_read(f"/proc/{pid}/cmdline") or "").replace("\0", " "))
    return {pid: stats[pid][1] for pid in ours}


def by_role(cpu: Mapping[int, float], roles: Mapping[int, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for pid, seconds in cpu.items():
        out[roles[pid]] = out.get(roles[pid], 0.0) + seconds
    return out


def window(samples: Sequence[tuple[float, dict[str, float]]], role: str) -> tuple[int, int] | None:
    """The first and last sample of ``role``'s last busy span: growths of its CPU time with no
    pause of ``IDLE_GAP_S`` between them."""
    grew = [i for i in range(1, len(samples))
            if samples[i][1].get(role, 0.0) > samples[i - 1][1].get(role, 0.0)]
    if not grew:
        return None
    first = grew[-1]
    for earlier in reversed(grew[:-1]):
        if samples[first][0] - samples[earlier][0] > IDLE_GAP_S + samples[first][0] - samples[first - 1][0]:
            break
        first = earlier
    return first - 1, grew[-1]


def spent(samples: Sequence[tuple[float, dict[str, float]]], first: int, last: int) -> dict[str, float]:
    """CPU seconds per role between two samples (a role's processes that ended count to their
    last sample: cumulative totals never fall)."""
    roles = set(samples[first][1]) | set(samples[last][1])
    return {r: round(samples[last][1].get(r, 0.0) - samples[first][1].get(r, 0.0), 2) for r in sorted(roles)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--window", default="passthrough", help="the role whose busy span is reported")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    tag = uuid.uuid4().hex
    child = subprocess.Popen(command, env={**os.environ, TAG: tag})
    roles: dict[int, str] = {}
    strangers: set[int] = set()
    totals: dict[int, float] = {}  # the last CPU time seen of every pid, alive or not
    samples: list[tuple[float, dict[str, float]]] = []
    started = time.monotonic()
    while True:
        done = child.poll() is not None
        totals.update(sample(child.pid, tag, roles, strangers))
        samples.append((round(time.monotonic() - started, 2), by_role(totals, roles)))
        if done:
            break
        time.sleep(args.interval)
    report: dict[str, object] = {"command": command, "exit": child.returncode,
                                 "whole_run": spent(samples, 0, len(samples) - 1),
                                 "whole_run_s": samples[-1][0]}
    span = window(samples, args.window)
    if span is not None:
        report["window"] = {"role": args.window, "from_s": samples[span[0]][0], "to_s": samples[span[1]][0],
                            "cpu_s": spent(samples, *span)}
    args.out.write_text(json.dumps({**report, "samples": samples}) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=1))
    return child.returncode or 0


if __name__ == "__main__":
    sys.exit(main())

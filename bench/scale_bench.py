"""The integrated process at scale: ``fabricsched run`` on a real control plane with kwok nodes.

    python bench/scale_bench.py --nodes 1000,5000,10000 --out scale.json
    python bench/scale_bench.py --quick            # 500 nodes, few requests (the CI smoke run)

Per size, in one run:

1. ``fabricsched cluster up`` with the sample fabric (8-GPU hosts, 16 per leaf, 16 leaves per
   spine; node Leases off), the CRDs, a FabricTopology over every node, and
   ``--pods-per-node`` 1-GPU pods bound by ``nodeName`` (kwok runs them; no scheduler involved);
2. ``fabricsched run`` started, once the machine is about idle (``wait_quiet``: at most 0.3 cores
   busy, waited for up to 60 s, not with ``--quick``; the wait and the cores busy go in the
   result's ``quiet``): ready time = start to ``/readyz`` 200 (initial listings applied,
   reservations restored, caches warm);
3. requests in the kube-scheduler's wire format (``/filter`` then ``/prioritize`` with every
   node's name, ``nodeCacheCapable``), each sent to ``fabricsched run`` and to a pass-through
   server (``scale_wire.py``, its own process) in turn, for three kinds of pods, all real
   objects behind a scheduling gate: a single pod; the first pod of a new gang (an Indexed Job
   of ``--gang`` pods: it makes the plan); a member of a planned gang (the other ranks);
4. reaction (before step 3): a gang of 2 pods is planned, and the node its second pod is
   steered to gets ``fabricsched.io/fabric-health: down``; the time until that pod's next
   answer moves it off the node (no gang uses a down host), and until FabricTopology status
   lists it;
5. ``--restarts`` restarts with the reservations of step 3 in place: ready time again (the
   slowest restart counts), and the first requests after each ready on fresh probes (the first,
   the slowest of the first five, the median of the next 20; over the restarts, the median
   first call and the slowest of any first five);
6. at the sizes of ``--throughput-at``: GPU gangs of 4 and of 16 pods created behind a gate,
   released, timed until all are bound, by the ``fabricsched`` scheduler (with the extender) and
   by the default scheduler alone, on the same pods, ``--throughput-rounds`` times each in
   turn (the median round counts); then, with ``fabricsched run`` stopped,
   the same round with a steering stub in the extender's place (``scale_wire.py --steer``):
   the ceiling of any extender that steers each pod to one node, on this machine;
   before it, at the sizes of ``--preemption-at``, the preemption phase (``scale_preempt.py``):
   low-priority gangs fill the fabric, high-priority gangs preempt them one by one;
7. peak RSS of ``fabricsched run`` (``VmHWM``, the larger of both runs).

``--gpus dra`` runs the same with GPUs through DRA (``scale_dra.py``): the nodes publish their
GPUs as ResourceSlices of NVIDIA's driver and have no allocatable ``nvidia.com/gpu``, every pod
claims its GPUs through a ResourceClaimTemplate (a fill pod: an allocated ResourceClaim of its
own), the topology has ``spec.draGpus`` and the fabricsched scheduler lists no
managedResources. ``--gpus both`` runs the device plugin, then DRA, per size (``--rounds``
times, alternating) and prints the ratios of each DRA run to the device-plugin run before it.

Prints a summary per size and writes every number to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import scale_cluster as cl
import scale_preempt
import scale_wire as wire
from benchstats import percentile
from fabricsched.cluster import errors, processes, rest

KINDS = ("single", "planned_member", "new_gang")
DEVICE_PLUGIN, DRA = "device-plugin", "dra"
MODES = {DEVICE_PLUGIN: (DEVICE_PLUGIN,), DRA: (DRA,), "both": (DEVICE_PLUGIN, DRA)}
"""``--gpus``: the GPU kinds each size runs with, in this order."""
PROBES = 21
"""Real pods for the probes after a restart (one per request)."""
HEALTH_LABEL = "fabricsched.io/fabric-health"
TOPOLOGY_PATH = f"/apis/fabricsched.io/v1alpha1/fabrictopologies/{cl.TOPOLOGY}"


class Operator:
    """``fabricsched run`` as a subprocess; ``ready_s`` is its start to ``/readyz`` 200."""

    def __init__(self, kubeconfig: Path, log: Path, extender: str, health: str, profile: Path | None,
                 extra: Sequence[str] = ()) -> None:
        self.health = f"http://{health}"
        profiling = ["-m", "cProfile", "-o", str(profile)] if profile is not None else []
        argv = [sys.executable, *profiling, "-m", "fabricsched.cli", "run", f"--kubeconfig={kubeconfig}",
                f"--extender-address={extender}", f"--health-address={health}",
                # The preemption phase runs one round per gang, back to back (default 6 a minute).
                "--preemption-rate=600", *extra]
        self.log = log
        self.log_start = len(log.read_text(errors="replace").splitlines()) if log.exists() else 0
        self.started = time.monotonic()
        self.started_wall = time.time()
        with log.open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                            env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"fabricsched run exited:\n{processes.log_tail(self.log, 30)}")
        try:
            with urllib.request.urlopen(f"{self.health}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def wait_ready(self, timeout: float) -> float:
        cl.wait_for("fabricsched run /readyz", self._ready, timeout, interval=0.05)
        return time.monotonic() - self.started

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


QUIET_CORES = 0.3
"""A start is timed once the machine's other work uses at most this many cores (``wait_quiet``)."""
QUIET_WAIT_S = 60.0


def busy_cores(over_s: float = 2.0) -> float:
    """Cores in use, over the next ``over_s`` seconds (``/proc/stat``)."""
    def ticks() -> tuple[int, int]:
        fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields) - idle, sum(fields)
    busy0, total0 = ticks()
    time.sleep(over_s)
    busy1, total1 = ticks()
    return round((busy1 - busy0) / max(1, total1 - total0) * (os.cpu_count() or 1), 2)


def wait_quiet() -> dict[str, float]:
    """Wait (at most ``QUIET_WAIT_S``) until the machine is about idle: a start timed while the
    fill's or the last phase's tail (the API server, etcd, kwok) still runs measures that tail,
    more after the heavier DRA fill. Returns the wait and the cores in use when it ended."""
    started = time.monotonic()
    cores = busy_cores()
    while cores > QUIET_CORES and time.monotonic() - started < QUIET_WAIT_S:
        cores = busy_cores()
    return {"waited_s": round(time.monotonic() - started, 1), "busy_cores": cores}


def startup_parts(operator: Operator) -> dict[str, float]:
    """Seconds from the process start to its first log line (interpreter and imports), to the
    initial listings applied, and to the reservations restored, from this run's log lines."""
    marks = {"first_log": "", "listings": "initial listings applied", "restored": "gang reservations"}
    found: dict[str, float] = {}
    for line in operator.log.read_text(errors="replace").splitlines()[operator.log_start:]:
        try:
            stamp = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + int(line[20:23]) / 1000
        except ValueError:
            continue
        for key, text in marks.items():
            if key not in found and text in line:
                found[key] = round(stamp - operator.started_wall, 2)
    return found


def after_restarts(restarts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per restart, and over all of them: the median first call, the slowest of any restart's
    first five calls, and the median of the next-20 medians."""
    if not restarts:
        return {}
    return {"first": round(percentile([r["first"] for r in restarts], 50), 2),
            "first_5_max": max(r["first_5_max"] for r in restarts),
            "next_20_p50": round(percentile([r["next_20_p50"] for r in restarts], 50), 2),
            "restarts": list(restarts)}


def summary(seconds: Sequence[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "p50": percentile(ms, 50), "p95": percentile(ms, 95), "p99": percentile(ms, 99),
            "max": max(ms), "first": ms[0]}


class Size:
    """One cluster size, start to end (``run``)."""

    def __init__(self, nodes: int, args: argparse.Namespace, root: Path, gpus: str = DEVICE_PLUGIN) -> None:
        self.n = nodes
        self.args = args
        self.dra = gpus == DRA
        self.root = root / f"n{nodes}-{gpus}"
        # Held (bound) until the cluster is up: its own components pick free ports too, and
        # one of them once took the extender's port between this choice and its use.
        self._held = [_bound() for _ in range(3)]
        self.ports = [h.getsockname()[1] for h in self._held]
        self.extender = f"127.0.0.1:{self.ports[0]}"
        self.result: dict[str, Any] = {"nodes": nodes, "gpus": gpus}
        self.names = [m["metadata"]["name"] for m in cl.node_manifests(nodes)]

    def run(self) -> dict[str, Any]:
        t0 = time.monotonic()
        try:
            kubeconfig = cl.cluster_up(self.root, self.n, f"http://{self.extender}", self.args.timeout,
                                       dra_gpus=self.dra)
        finally:
            for held in self._held:
                held.close()
        passthrough = subprocess.Popen([sys.executable, str(Path(__file__).with_name("scale_wire.py")),
                                        "--passthrough", f"127.0.0.1:{self.ports[2]}"])
        operator: Operator | None = None
        try:
            self.api = rest.Client.from_kubeconfig(kubeconfig, timeout=180)
            cl.install(self.api, kubeconfig, self.args.timeout, self.names, dra_gpus=self.dra)
            started = time.monotonic()
            self.result["fill_pods"] = cl.fill(self.api, self.names, self.args.pods_per_node,
                                               dra_gpus=self.dra)
            self.result["setup_s"] = round(time.monotonic() - t0, 1)
            print(f"    cluster with {self.n} nodes and {self.result['fill_pods']} pods in "
                  f"{self.result['setup_s']:.0f} s (pods {time.monotonic() - started:.0f} s)", flush=True)
            operator = self.start_operator(kubeconfig, "ready_s")
            # A DRA node is a host once its slice is read and its GPUs are taken once the claims
            # are read, neither of which readiness waits for.
            cl.wait_for("FabricTopology status counting every node and fill GPU", self.fabric_counted,
                        self.args.timeout, interval=0.1)
            self.result["taken_s"] = round(time.monotonic() - operator.started, 2)
            print(f"    in the status: every node {self.result['counted_s']:.2f} s, every fill pod's GPU "
                  f"{self.result['taken_s']:.2f} s ({self.result['status_gpus']})", flush=True)
            self.us = wire.Caller(self.extender)
            self.them = wire.Caller(f"127.0.0.1:{self.ports[2]}")
            self.phase("reaction", self.reaction)  # first: the latency phase's plans fill leaves
            self.phase("latency", self.latency)
            rss = operator.peak_rss_mb()
            restarts: list[dict[str, Any]] = []
            for turn in range(self.args.restarts):
                rss = max(rss, operator.peak_rss_mb())
                operator.stop()
                operator = self.start_operator(kubeconfig, "restart_ready_s")
                self.us.close()
                self.us = wire.Caller(self.extender)  # the old connection went with the old process
                self.phase("after_restart", functools.partial(self.first_after_ready, turn, restarts))
            self.result["restart_ready_s"] = max(r["ready_s"] for r in restarts) if restarts else None
            self.result["after_restart_ms"] = after_restarts(restarts)
            if self.n in self.args.preemption_at:
                self.phase("preemption", functools.partial(scale_preempt.run, self, summary))
            if self.n in self.args.throughput_at:
                self.phase("throughput", self.throughput)
            self.result["peak_rss_mb"] = round(max(rss, operator.peak_rss_mb()), 1)
            if self.n in self.args.throughput_at:
                operator.stop()  # the steering stub takes its address
                self.phase("throughput_ceiling", self.ceiling)
            return self.result
        finally:
            if operator is not None:
                operator.stop()
                if self.args.out:  # the log goes with the run's directory: keep it beside the results
                    kept = self.args.out.with_name(f"{self.args.out.stem}.n{self.n}.fabricsched.log")
                    shutil.copyfile(operator.log, kept)
            passthrough.terminate()
            passthrough.wait(10)
            cl.cluster_down(self.root)

    def phase(self, name: str, run: Callable[[], None]) -> None:
        """One phase; a failure is recorded (``errors``) and the next phases still run."""
        try:
            run()
        except (OSError, RuntimeError, TimeoutError, KeyError, ValueError) as e:
            print(f"    {name} failed: {type(e).__name__}: {e}", flush=True)
            # Where: a socket's "timed out" names no call.
            print("".join(traceback.format_exception(e, limit=-3)), flush=True)
            if self.operator is not None:  # what fabricsched said last: the log goes with the run
                print(processes.log_tail(self.operator.log, 20), flush=True)
            self.result.setdefault("errors", {})[name] = f"{type(e).__name__}: {str(e)[:500]}"

    def start_operator(self, kubeconfig: Path, key: str) -> Operator:
        profile = self.args.profile_operator
        stats = profile.with_suffix(f".{self.n}.{key}") if profile else None
        # Not in the CI smoke run (``--quick``): other tests keep the machine busy there.
        quiet = {} if getattr(self.args, "quick", False) else wait_quiet()
        self.result.setdefault("quiet", {}).setdefault(key, []).append(quiet)
        operator = Operator(kubeconfig, self.root / "fabricsched-run.log", self.extender,
                            f"127.0.0.1:{self.ports[1]}", stats, self.args.operator_arg)
        self.operator = operator
        self.result[key] = round(operator.wait_ready(self.args.timeout), 2)
        self.result[f"{key}_parts"] = parts = startup_parts(operator)
        print(f"    {key}: {self.result[key]:.2f} s ({parts}; machine before it {quiet})", flush=True)
        return operator

    def fabric_counted(self) -> bool:
        """FabricTopology status counts every node (``counted_s``, from the start) and every
        fill pod's GPU as taken (``taken_s``): only then do the phases see the cluster as it is."""
        status, body = self.api.request("GET", TOPOLOGY_PATH)
        found = body.get("status") or {} if status == 200 else {}
        if found.get("nodes") == self.n and "counted_s" not in self.result:
            self.result["counted_s"] = round(time.monotonic() - self.operator.started, 2)
        gpus = self.result["status_gpus"] = found.get("gpus") or {}
        taken = gpus.get("total", 0) - self.result["fill_pods"]
        return "counted_s" in self.result and gpus.get("free") == taken

    # --- filter + prioritize --------------------------------------------------------------

    def latency(self) -> None:
        args = self.args
        dra_gpus = self.dra
        cl.namespace(self.api, "lat", args.timeout, dra_gpus)
        # The probes after the restart: real pods too (the extender refuses a pod the API
        # server does not hold), gated, one per request.
        cl.namespace(self.api, "probe", args.timeout, dra_gpus)
        cl.create_pods(self.api, "probe", "p", PROBES * self.args.restarts, 1, "fabricsched", dra_gpus)
        cl.create_jobs(self.api, "lat", "g", args.requests, args.gang, args.gang_gpus, "fabricsched",
                       dra_gpus)
        cl.create_pods(self.api, "lat", "s", args.requests, 1, "fabricsched", dra_gpus)
        wanted = args.requests * (args.gang + 1)
        found = cl.wait_for(f"{wanted} gated pods", lambda: (
            p if len(p := cl.pods(self.api, "lat")) >= wanted else None), args.timeout, interval=1.0)
        # The operator must hold every pod of a gang before it plans it (admission).
        everything = wanted + self.result["fill_pods"] + PROBES * self.args.restarts
        cl.wait_for("the pods in fabricsched's state", lambda: self.pods_seen() >= everything,
                    args.timeout, interval=0.5)
        # The Job controller reports each pod it made with an Event, posted one at a time after
        # the pods: at 10,000 nodes they trail them by tens of seconds, and calls timed meanwhile
        # measure an API server busy with them (and a process that saw the pods sooner starts
        # sooner, into more of them). Timing starts once they are in.
        made = args.requests * args.gang
        reported = lambda: cl.events_of(self.api, "lat", "SuccessfulCreate") >= made  # noqa: E731
        cl.wait_for("the Job controller's Events", reported, args.timeout, interval=1.0)
        singles = sorted((p for p in found if p["metadata"]["name"].startswith("s-")), key=_name)
        gangs: dict[str, list[dict[str, Any]]] = {}
        for p in found:
            if not p["metadata"]["name"].startswith("s-"):
                gangs.setdefault(p["metadata"]["labels"]["job-name"], []).append(p)
        times: dict[str, dict[str, list[float]]] = {"fabricsched": {k: [] for k in KINDS},
                                                    "passthrough": {k: [] for k in KINDS}}
        problems: dict[str, int] = {k: 0 for k in KINDS}
        members = 0
        for i, (_, gang) in enumerate(sorted(gangs.items())):
            gang.sort(key=_rank)
            calls = [("single", singles[i]), ("new_gang", gang[0])]
            if members < args.requests:
                calls += [("planned_member", p) for p in gang[1:]]
                members += len(gang) - 1
            for kind, pod in calls:
                ours = self.us.call(pod, self.names)
                theirs = self.them.call(pod, self.names)
                times["fabricsched"][kind].append(ours.seconds)
                times["passthrough"][kind].append(theirs.seconds)
                if ours.error or len(ours.passed) != 1:
                    problems[kind] += 1
        self.result["latency_ms"] = {who: {k: summary(v) for k, v in per_kind.items()}
                                     for who, per_kind in times.items()}
        self.result["answers_without_one_node"] = problems

    def pods_seen(self) -> int:
        with urllib.request.urlopen(f"{self.operator.health}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith('fabricsched_state_objects{kind="pods"}'):
                    return int(float(line.rsplit(" ", 1)[1]))
        return 0

    def first_after_ready(self, turn: int, into: list[dict[str, Any]]) -> None:
        """The first calls after a restart (caches must be warm), then 20 more for comparison,
        on probes no process has been asked about. The slowest of the first five is kept too:
        work that starts at ready can stall the second or fifth call as well as the first."""
        probe = sorted(cl.pods(self.api, "probe"), key=_name)[turn * PROBES:(turn + 1) * PROBES]
        seconds = [self.us.call(p, self.names).seconds for p in probe]
        into.append({"ready_s": self.result["restart_ready_s"], "first": round(seconds[0] * 1000, 2),
                     "first_5_max": round(max(seconds[:5]) * 1000, 2),
                     "next_20_p50": round(percentile(seconds[1:], 50) * 1000, 2)})

    # --- reaction -------------------------------------------------------------------------

    def reaction(self) -> None:
        """A planned gang member's node set down: the time until its answer moves it off (no
        gang uses a down host; a lone pod would still be sent there, by design), and until
        FabricTopology status lists the node."""
        cl.namespace(self.api, "react", self.args.timeout, self.dra)
        everything = self.pods_seen() + 2
        # Each pod takes a whole host's free GPUs, so the gang spans two hosts: moving one rank
        # off the down host then gives the gang a healthy path.
        gpus = max(1, 8 - self.args.pods_per_node)
        cl.create_jobs(self.api, "react", "r", 1, 2, gpus, "fabricsched", self.dra)
        gang = sorted(cl.wait_for("the reaction gang's pods", lambda: (
            p if len(p := cl.pods(self.api, "react")) >= 2 else None), self.args.timeout), key=_rank)
        cl.wait_for("its pods in fabricsched's state", lambda: self.pods_seen() >= everything, 60, 0.2)
        self.us.call(gang[0], self.names)  # plans the gang
        member = gang[1]
        before = self.us.call(member, self.names).passed
        if len(before) != 1:
            raise RuntimeError(f"the planned member was not steered to one node: {before[:3]}")
        victim = before[0]
        path = f"/api/v1/nodes/{victim}"
        started = time.monotonic()
        self.api.call("PATCH", path, {"metadata": {"labels": {HEALTH_LABEL: "down"}}}, rest.MERGE_PATCH)
        cl.wait_for("a decision moving the member off the down node", lambda: (
            self.us.call(member, self.names).passed not in ([victim], [])), 60, interval=0.01)
        decision = time.monotonic() - started
        cl.wait_for("FabricTopology status listing the down node", lambda: self.listed(victim), 60,
                    interval=0.05)
        shown = time.monotonic() - started
        self.api.call("PATCH", path, {"metadata": {"labels": {HEALTH_LABEL: None}}}, rest.MERGE_PATCH)
        self.result["reaction_s"] = {"decision": round(decision, 3), "status": round(shown, 3)}
        cl.clean(self.api, "react")

    def listed(self, node: str) -> bool:
        body = self.api.call("GET", TOPOLOGY_PATH)
        return any(r.get("node") == node for r in (body.get("status") or {}).get("degraded") or ())

    # --- throughput -----------------------------------------------------------------------

    def throughput(self) -> None:
        # The latency phase's pods and plans would hold GPUs, and their deletion (pods, Jobs,
        # FabricPlacements, the namespace) would still keep the API server and both schedulers
        # busy during the rounds: all of it gone first.
        for ns in ("lat", "probe"):
            cl.clean(self.api, ns)
        cl.settle(self.api, ("lat", "probe"), self.args.timeout)
        # Rounds alternate between the two schedulers, so a slow spell of the machine hits both.
        rounds: dict[str, list[dict[str, Any]]] = {"default-scheduler": [], "fabricsched": []}
        for _ in range(self.args.throughput_rounds):
            for scheduler, done in rounds.items():
                done.append(self.bind_round(scheduler))
        out: dict[str, Any] = {s: median_round(done) for s, done in rounds.items()}
        rates = [out[s].get("pods_per_s") for s in ("fabricsched", "default-scheduler")]
        if all(rates):
            out["ratio"] = round(rates[0] / rates[1], 2)
        self.result["throughput"] = out

    def ceiling(self) -> None:
        """The same round with the steering stub in the extender's place (``scale_wire.py
        --steer``): the rate no extender that steers each pod to one node can beat here."""
        stub = subprocess.Popen([sys.executable, str(Path(__file__).with_name("scale_wire.py")),
                                 "--steer", self.extender])
        try:
            cl.wait_for("the steering stub", lambda: self._answers(self.extender), 60, interval=0.2)
            out = self.result.setdefault("throughput", {})
            out["steering_stub"] = median_round(
                [self.bind_round("fabricsched") for _ in range(self.args.throughput_rounds)])
            default = (out.get("default-scheduler") or {}).get("pods_per_s")
            if default and out["steering_stub"].get("pods_per_s"):
                out["ratio_steering_stub"] = round(out["steering_stub"]["pods_per_s"] / default, 2)
        finally:
            stub.terminate()
            stub.wait(10)

    @staticmethod
    def _answers(address: str) -> bool:
        try:
            with urllib.request.urlopen(urllib.request.Request(
                    f"http://{address}/filter", data=b'{"Pod": {}, "NodeNames": []}'), timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def bind_round(self, scheduler: str) -> dict[str, Any]:
        """Gated gangs of 4 and 16 pods, released at once; the time until every pod is bound."""
        args = self.args
        ns = cl.namespace(self.api, f"tp-{scheduler.split('-')[0]}", args.timeout, self.dra)
        cl.create_jobs(self.api, ns, "a", args.gangs_of_4, 4, args.throughput_gpus, scheduler, self.dra)
        cl.create_jobs(self.api, ns, "b", args.gangs_of_16, 16, args.throughput_gpus, scheduler, self.dra)
        wanted = args.gangs_of_4 * 4 + args.gangs_of_16 * 16

        def gated() -> list[dict[str, Any]] | None:
            found = cl.pods(self.api, ns)
            return found if len(found) >= wanted else None

        def bound() -> bool:
            return sum(1 for p in cl.pods(self.api, ns) if p["spec"].get("nodeName")) >= wanted

        names = [_name(p) for p in cl.wait_for(f"{wanted} gated pods", gated, args.timeout, interval=1.0)]
        started = time.monotonic()
        cl.ungate(self.api, ns, names)
        try:
            cl.wait_for(f"{wanted} pods bound by {scheduler}", bound, args.timeout, interval=0.2)
            span = time.monotonic() - started
            result = {"pods": wanted, "seconds": round(span, 2), "pods_per_s": round(wanted / span, 1)}
        except TimeoutError as e:
            result = {"pods": wanted, "error": str(e)}
        cl.clean(self.api, ns)
        cl.settle(self.api, (ns,), args.timeout)
        return result


def _bound() -> socket.socket:
    """A loopback socket bound to a free port (not listening): no other process gets the port."""
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.bind(("127.0.0.1", 0))
    return held


def median_round(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The round of median rate (each round's rate listed too); an error if any round failed."""
    failed = [r for r in rounds if "pods_per_s" not in r]
    if failed:
        return failed[0]
    ordered = sorted(rounds, key=lambda r: r["pods_per_s"])
    return {**ordered[(len(ordered) - 1) // 2], "rounds_pods_per_s": [r["pods_per_s"] for r in rounds]}


def _name(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["name"])


def _rank(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])


def _sizes(text: str) -> list[int]:
    try:
        return [int(p) for p in text.split(",") if p]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected sizes like 1000,5000: {e}") from e


def show(r: dict[str, Any]) -> None:
    print(f"  {r['nodes']} nodes ({r.get('gpus')}), {r.get('fill_pods')} running GPU pods: "
          f"ready {r.get('ready_s')} s, every node / fill GPU in the status {r.get('counted_s')} / "
          f"{r.get('taken_s')} s, "
          f"after a restart {r.get('restart_ready_s')} s; peak RSS {r.get('peak_rss_mb')} MB; "
          f"reaction {r.get('reaction_s')}")
    latency = r.get("latency_ms") or {}
    for kind in KINDS if latency else ():
        ours, theirs = latency["fabricsched"][kind], latency["passthrough"][kind]
        if ours["n"] and theirs["n"]:
            print(f"    {kind:<15} n={ours['n']:<4} p50 {ours['p50']:6.1f}  p95 {ours['p95']:6.1f}  "
                  f"p99 {ours['p99']:6.1f}  max {ours['max']:7.1f} ms   "
                  f"pass-through p99 {theirs['p99']:6.1f} ms")
    for key in ("after_restart_ms", "preemption", "throughput", "errors"):
        if key in r:
            print(f"    {key}: {r[key]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=_sizes, default=[1000, 5000, 10000])
    parser.add_argument("--quick", action="store_true",
                        help="500 nodes, 40 requests per kind, a small throughput round")
    parser.add_argument("--pods-per-node", type=int, default=5,
                        help="running 1-GPU pods per node (default 5)")
    parser.add_argument("--requests", type=int, default=300, help="requests per kind (default 300)")
    parser.add_argument("--gang", type=int, default=4, help="pods per gang of the latency phase")
    parser.add_argument("--gang-gpus", type=int, default=1, help="GPUs per pod of those gangs")
    parser.add_argument("--restarts", type=int, default=3,
                        help="restarts after the latency phase, each timed and probed (default 3)")
    parser.add_argument("--throughput-at", type=_sizes, default=[1000])
    parser.add_argument("--gangs-of-4", type=int, default=20)
    parser.add_argument("--gangs-of-16", type=int, default=5)
    parser.add_argument("--throughput-rounds", type=int, default=3,
                        help="rounds per scheduler (and for the steering stub); the median counts")
    parser.add_argument("--throughput-gpus", type=int, default=2,
                        help="GPUs per pod of the throughput gangs")
    parser.add_argument("--preemption-at", type=_sizes, default=[5000],
                        help="sizes with the preemption phase (bench/scale_preempt.py)")
    parser.add_argument("--preemption-rounds", type=int, default=20,
                        help="high-priority gangs, one after the other, each preempting (default 20)")
    parser.add_argument("--preemption-gang", type=int, default=16,
                        help="pods of each high-priority gang (default 16: one leaf)")
    parser.add_argument("--gpus", choices=sorted(MODES), default=DEVICE_PLUGIN,
                        help="GPUs from the device plugin's allocatable, through DRA (ResourceSlices "
                             "and claims), or both, one after the other (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="times each size runs (with --gpus both: device plugin, DRA, alternating)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for each wait")
    parser.add_argument("--dir", type=Path, help="work folder (default: a temporary one, removed)")
    parser.add_argument("--out", type=Path,
                        help="write the results as JSON (and keep fabricsched's log beside them)")
    parser.add_argument("--operator-arg", action="append", default=[], metavar="ARG",
                        help="one more argument for `fabricsched run` (repeat for several), e.g. "
                             "--operator-arg=--preemption=off")
    parser.add_argument("--profile-operator", type=Path, metavar="FILE",
                        help="run fabricsched run under cProfile, stats to FILE.<nodes>.<phase>")
    args = parser.parse_args()
    if args.quick:
        args.nodes, args.requests, args.throughput_at, args.restarts = [500], 40, [500], 1
        args.gangs_of_4, args.gangs_of_16, args.throughput_rounds = 4, 1, 1
    if DRA in MODES[args.gpus] and set(args.preemption_at) & set(args.nodes):
        parser.error("the preemption phase has no DRA variant: add --preemption-at 0")
    try:
        cl.binaries.find()
    except errors.MissingBinaries as e:
        print(f"needs the control plane binaries (make tools): {e}", file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="fabricsched-scale-") as tmp:
        root = args.dir or Path(tmp)
        for n in args.nodes:
            for turn in range(args.rounds):
                for gpus in MODES[args.gpus]:
                    load = round(os.getloadavg()[0], 2)  # other work on the machine, at the start
                    print(f"{n} nodes, {gpus}, round {turn + 1}: load {load}", flush=True)
                    results.append({**Size(n, args, root / f"round{turn + 1}", gpus).run(), "load": load})
                    show(results[-1])
                    if gpus == DRA and len(results) > 1 and results[-2]["gpus"] == DEVICE_PLUGIN:
                        results[-1]["against_device_plugin"] = ratios(results[-1], results[-2])
                        print(f"    DRA / device plugin: {results[-1]['against_device_plugin']}", flush=True)
                    if args.out:  # after every run: a later one that fails keeps the earlier ones
                        args.out.write_text(json.dumps({"args": _args(args), "results": results}, indent=2))
    return 0


def ratios(dra: dict[str, Any], plugin: dict[str, Any]) -> dict[str, float | None]:
    """A DRA run's times over the device-plugin run's (same size, same session): ready,
    every node counted, and each kind's p99 of ours and of the pass-through."""
    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 2) if a is not None and b else None

    out = {key: ratio(dra.get(key), plugin.get(key)) for key in ("ready_s", "counted_s", "taken_s")}
    for who in ("fabricsched", "passthrough"):
        for kind in KINDS:
            p99 = [((r.get("latency_ms") or {}).get(who) or {}).get(kind, {}).get("p99")
                   for r in (dra, plugin)]
            out[f"{who}_{kind}_p99"] = ratio(*p99)
    return out


def _args(args: argparse.Namespace) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}


if __name__ == "__main__":
    sys.exit(main())

"""Pods bound per second: the fabricsched scheduler (kube-scheduler + extender) vs the default one.

    python bench/throughput_bench.py [--nodes 500] [--pods 300] [--gang 1] [--gpus-per-pod 1]

Starts a local control plane (``fabricsched.cluster.controlplane``, loopback only) with both
kube-schedulers, creates the CRDs, ``--nodes`` GPU nodes (10 hosts per leaf, 10 leaves per
spine) and a FabricTopology over them, and runs ``fabricsched run`` as a subprocess. Then, for
each scheduler in turn, on the same empty cluster:

1. creates ``--pods`` pods held by a scheduling gate: bare pods with ``--gang 1``, otherwise
   Indexed Jobs of ``--gang`` pods (the Job controller creates them; not timed);
2. once every pod exists, removes the gates (8 threads) and watches the namespace, noting
   when each pod is first seen with a node;
3. reports pods/s = pods / (last bind - first un-gate), and the rate between the 10th and 90th
   percentile binds (without the start and the tail); then deletes the pods.

The gates make both schedulers start from the same queue of pods that already exist, so
the number is the scheduler's, not the speed of creating pods. kwok plays the kubelets
(bound pods go Running), the same for both schedulers. Everything is bounded by
``--timeout``; the cluster and the operator are stopped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.watch import watch as k8s_watch

from fabricsched.cluster import (
    binaries,
    commands,
    controlplane,
    errors,
    kwok,
    nodes,
    processes,
    rest,
    samples,
)

REPO = Path(__file__).resolve().parents[1]
GPU = "nvidia.com/gpu"
GATE = "fabricsched.io/bench"
TOPOLOGY = "bench"
HOSTS_PER_LEAF = 10
LEAVES_PER_SPINE = 10
SCHEDULERS = ("default-scheduler", "fabricsched")


@dataclass(frozen=True)
class Result:
    scheduler: str
    pods: int
    bound: int
    span_s: float
    """First un-gate to last bind."""
    steady_per_s: float
    """Binds between the 10th and the 90th percentile bind, per second."""

    @property
    def per_s(self) -> float:
        return self.bound / self.span_s if self.span_s > 0 else 0.0


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def wait_for(self, what: str, check: Callable[[], Any], interval: float = 0.25) -> Any:
        while True:
            found = check()
            if found:
                return found
            if self.left() <= 0:
                raise TimeoutError(f"timed out waiting for {what}")
            time.sleep(interval)


class Operator:
    """``fabricsched run`` as a subprocess, with its log in the cluster folder."""

    def __init__(self, kubeconfig: Path, log: Path, extender_port: int, health_port: int,
                 profile: Path | None = None) -> None:
        self.health = f"http://127.0.0.1:{health_port}"
        profiling = ["-m", "cProfile", "-o", str(profile)] if profile is not None else []
        argv = [
            sys.executable, *profiling, "-m", "fabricsched.cli", "run", f"--kubeconfig={kubeconfig}",
            f"--extender-address=127.0.0.1:{extender_port}", f"--health-address=127.0.0.1:{health_port}",
        ]
        with log.open("wb") as out:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
        self.log = log

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"fabricsched run exited:\n{processes.log_tail(self.log, 30)}")
        try:
            with urllib.request.urlopen(f"{self.health}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def extender_latency_ms(self) -> dict[str, tuple[int, float]]:
        """Calls and mean latency per verb, from the operator's own histogram (answered calls)."""
        with urllib.request.urlopen(f"{self.health}/metrics", timeout=5) as r:
            text = r.read().decode()
        sums: dict[str, float] = {}
        counts: dict[str, float] = {}
        for line in text.splitlines():
            if not line.startswith("fabricsched_extender_request_seconds_") or 'outcome="ok"' not in line:
                continue
            verb = line.split('verb="', 1)[1].split('"', 1)[0]
            value = float(line.rsplit(" ", 1)[1])
            if line.startswith("fabricsched_extender_request_seconds_sum"):
                sums[verb] = sums.get(verb, 0.0) + value
            elif line.startswith("fabricsched_extender_request_seconds_count"):
                counts[verb] = counts.get(verb, 0.0) + value
        return {v: (int(counts[v]), sums.get(v, 0.0) / counts[v] * 1000) for v in counts if counts[v]}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


class Bench:
    def __init__(self, plane: controlplane.ControlPlane, args: argparse.Namespace) -> None:
        self.plane = plane
        self.api = plane.client()
        self.args = args
        api_client = k8s_config.new_client_from_config(config_file=str(plane.kubeconfig))  # type: ignore[no-untyped-call]
        self.core = k8s_client.CoreV1Api(api_client)

    def close(self) -> None:
        self.api.close()
        self.core.api_client.close()

    # --- setup ------------------------------------------------------------------------

    def install(self, deadline: Deadline) -> None:
        kubectl = [str(self.plane.binaries.kubectl), f"--kubeconfig={self.plane.kubeconfig}"]
        subprocess.run([*kubectl, "apply", "--server-side", "-f", str(REPO / "crds")],
                       check=True, capture_output=True, timeout=60)
        deadline.wait_for("the FabricTopology CRD", lambda: self.api.request(
            "GET", "/apis/fabricsched.io/v1alpha1/fabrictopologies")[0] == 200)
        spines = math.ceil(self.args.nodes / (HOSTS_PER_LEAF * LEAVES_PER_SPINE))
        manifests = samples.sample_fabric(spines, LEAVES_PER_SPINE, HOSTS_PER_LEAF, gpus=self.args.gpus)
        nodes.create(self.api, manifests[: self.args.nodes], datetime.datetime.now(datetime.UTC))
        topology = samples.demo_topology(TOPOLOGY)
        topology["spec"]["links"] = []
        self.api.call("POST", "/apis/fabricsched.io/v1alpha1/fabrictopologies", topology)

    def fabric_ready(self) -> bool:
        """The operator sees every node (its status counts them)."""
        status, body = self.api.request("GET", f"/apis/fabricsched.io/v1alpha1/fabrictopologies/{TOPOLOGY}")
        return status == 200 and (body.get("status") or {}).get("nodes") == self.args.nodes

    # --- one round --------------------------------------------------------------------

    def namespace(self, scheduler: str, deadline: Deadline) -> str:
        name = f"tp-{scheduler.split('-')[0]}-{int(time.time())}"
        self.api.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        account = f"/api/v1/namespaces/{name}/serviceaccounts/default"
        deadline.wait_for(f"ServiceAccount {name}/default",
                          lambda: self.api.request("GET", account)[0] == 200)
        return name

    def pod_spec(self, scheduler: str) -> dict[str, Any]:
        gpus = str(self.args.gpus_per_pod)
        return {
            "schedulerName": scheduler,
            "restartPolicy": "Never",
            "schedulingGates": [{"name": GATE}],
            "containers": [{"name": "c", "image": "bench:1",
                            "resources": {"requests": {GPU: gpus}, "limits": {GPU: gpus}}}],
        }

    def create(self, namespace: str, scheduler: str) -> None:
        args = self.args
        if args.gang == 1:
            def one(i: int) -> None:
                body = {"metadata": {"name": f"p-{i:05d}"}, "spec": self.pod_spec(scheduler)}
                self.api.call("POST", f"/api/v1/namespaces/{namespace}/pods", body)
            _each(one, range(args.pods))
            return

        def job(i: int) -> None:
            body = {
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"j-{i:04d}"},
                "spec": {"parallelism": args.gang, "completions": args.gang, "completionMode": "Indexed",
                         "backoffLimit": 0, "template": {"spec": self.pod_spec(scheduler)}},
            }
            self.api.call("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body)
        _each(job, range(args.pods // args.gang))

    def pod_names(self, namespace: str) -> list[str]:
        items = self.api.call("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
        return [p["metadata"]["name"] for p in items]

    def round(self, scheduler: str, deadline: Deadline) -> Result:
        namespace = self.namespace(scheduler, deadline)
        pods = self.args.pods // self.args.gang * self.args.gang
        try:
            self.create(namespace, scheduler)
            names = deadline.wait_for(f"{pods} gated pods", lambda: (
                found if len(found := self.pod_names(namespace)) >= pods else None))
            watcher = Watcher(self.core, namespace, deadline)
            watcher.start()
            started = time.monotonic()
            _each(lambda name: self.api.call(
                "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}",
                {"spec": {"schedulingGates": None}}, rest.MERGE_PATCH), names)
            try:
                deadline.wait_for(f"{pods} pods bound by {scheduler}", lambda: len(watcher.bound) >= pods)
            except TimeoutError as e:
                print(f"    {e}; {len(watcher.bound)} bound", flush=True)
            watcher.stop()
            times = sorted(t - started for t in watcher.bound.values())
            return Result(scheduler, pods, len(times), times[-1] if times else 0.0, _steady(times))
        finally:
            self.clean(namespace)

    def clean(self, namespace: str) -> None:
        self.api.request("DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs",
                         {"propagationPolicy": "Orphan"})
        names = self.pod_names(namespace)
        _each(lambda name: kwok.delete_now(self.api, namespace, name), names)
        self.api.request("DELETE", f"/api/v1/namespaces/{namespace}")


class Watcher:
    """Notes when each pod of a namespace is first seen bound (a watch, not polling)."""

    def __init__(self, core: Any, namespace: str, deadline: Deadline) -> None:
        self.core, self.namespace, self.deadline = core, namespace, deadline
        self.bound: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bind-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _run(self) -> None:
        while not self._stop.is_set() and self.deadline.left() > 0:
            response = self.core.list_namespaced_pod(
                self.namespace, watch=True, _preload_content=False,
                timeout_seconds=max(1, min(5, int(self.deadline.left()))),
            )
            try:
                for line in k8s_watch.iter_resp_lines(response):  # type: ignore[no-untyped-call]
                    event = json.loads(line)
                    pod = event.get("object") or {}
                    if (pod.get("spec") or {}).get("nodeName"):
                        self.bound.setdefault(pod["metadata"]["name"], time.monotonic())
                    if self._stop.is_set():
                        break
            finally:
                response.release_conn()


def _steady(times: Sequence[float]) -> float:
    """Binds per second between the 10th and the 90th percentile bind."""
    lo, hi = len(times) // 10, (len(times) * 9) // 10 - 1
    return (hi - lo) / (times[hi] - times[lo]) if hi > lo and times[hi] > times[lo] else 0.0


def _each(work: Callable[[Any], None], items: Iterator[Any] | Sequence[Any] | range) -> None:
    with futures.ThreadPoolExecutor(max_workers=8) as pool:
        for done in futures.as_completed([pool.submit(work, item) for item in items]):
            done.result()


def run(args: argparse.Namespace, root: Path) -> list[Result]:
    deadline = Deadline(args.timeout)
    extender_port, health_port = processes.free_ports(2)
    scheduler = commands.fabricsched_scheduler(f"http://127.0.0.1:{extender_port}")
    print(f"starting a control plane in {root} ...", flush=True)
    plane = controlplane.up(root / "cluster", extra_schedulers=[scheduler])
    operator: Operator | None = None
    bench = Bench(plane, args)
    try:
        bench.install(deadline)
        operator = Operator(plane.kubeconfig, root / "fabricsched-run.log", extender_port, health_port,
                            args.profile_operator)
        deadline.wait_for("fabricsched run ready", operator.ready)
        deadline.wait_for(f"FabricTopology status with {args.nodes} nodes", bench.fabric_ready)
        results = []
        for name in SCHEDULERS:
            print(f"  {name}: {args.pods} pods (gangs of {args.gang}) ...", flush=True)
            results.append(bench.round(name, deadline))
            time.sleep(2)  # let the deletions settle before the next round
        for verb, (calls, mean_ms) in sorted(operator.extender_latency_ms().items()):
            print(f"  extender {verb}: {calls} calls, mean {mean_ms:.1f} ms (operator's histogram)")
        return results
    finally:
        if operator is not None:
            operator.stop()
        bench.close()
        plane.down()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument("--pods", type=int, default=300, help="pods per scheduler")
    parser.add_argument("--gang", type=int, default=1, help="pods per Indexed Job; 1: bare pods")
    parser.add_argument("--gpus-per-pod", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole run")
    parser.add_argument("--dir", type=Path, help="cluster folder (default: a temporary one, removed)")
    parser.add_argument("--profile-operator", type=Path, metavar="FILE",
                        help="run fabricsched run under cProfile, writing its stats to FILE")
    args = parser.parse_args()
    if args.pods < args.gang or args.gang < 1:
        parser.error("--pods must be at least --gang, and --gang at least 1")
    try:
        binaries.find()
    except errors.MissingBinaries as e:
        print(f"needs the control plane binaries (make tools): {e}", file=sys.stderr)
        return 2
    if args.dir is not None:
        results = run(args, args.dir)
    else:
        with tempfile.TemporaryDirectory(prefix="fabricsched-throughput-") as tmp:
            results = run(args, Path(tmp))
    print(f"{args.nodes} nodes x {args.gpus} GPUs, {args.pods} pods of {args.gpus_per_pod} GPU(s), "
          f"gangs of {args.gang}:")
    for r in results:
        print(f"    {r.scheduler:<18} {r.bound}/{r.pods} bound in {r.span_s:6.2f} s: {r.per_s:6.1f} pods/s "
              f"(10-90%: {r.steady_per_s:6.1f} pods/s)")
    default, ours = results
    if default.per_s > 0 and default.steady_per_s > 0:
        print(f"    fabricsched / default: x{ours.per_s / default.per_s:.2f} "
              f"(10-90%: x{ours.steady_per_s / default.steady_per_s:.2f})")
    return 0 if all(r.bound == r.pods for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

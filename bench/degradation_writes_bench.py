"""API server writes while a leaf under many running gangs degrades and recovers.

    python bench/degradation_writes_bench.py [--gangs 100] [--timeout 900]

Starts a local control plane (loopback only) with the fabricsched kube-scheduler, the CRDs, two
leaves of ``--gangs`` 8-GPU kwok hosts each, a FabricTopology over them
(``recoverAfterSeconds: 0``) and ``fabricsched run``. Host ``i`` of each leaf carries the label
``bench.fabricsched.io/slot=i``; gang ``i`` is an Indexed Job of two 8-GPU pods selecting that
slot, so fabricsched places one rank in each leaf and every gang's path crosses both leaves'
uplinks. Once all gangs are Bound and the writes are quiet:

1. ``spec.links`` degrades the first leaf's uplinks (capacity 0.25): every gang is touched;
2. waits until every FabricPlacement says ``degradedPath: true`` and no write came for
   ``--quiet`` seconds; then the same for the recovery (``spec.links: []``).

The counts are the API server's own (``apiserver_request_total`` from its /metrics, by
resource and verb): FabricPlacement writes (any verb but GET/LIST/WATCH, status included),
Event writes, FabricTopology writes. Writes/s = writes / (last write - the spec change);
the peak is the most writes in one second; "showed it" is when every FabricPlacement had the
new ``degradedPath`` (polled every 0.25 s). The cluster and the operator are stopped at the
end, whatever happens.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fabricsched.cluster import binaries, commands, controlplane, errors, nodes, processes, rest, samples
from throughput_bench import Deadline, Operator

REPO = Path(__file__).resolve().parents[1]
TOPOLOGY = "writes"
SLOT = "bench.fabricsched.io/slot"
TOPOLOGIES = "/apis/fabricsched.io/v1alpha1/fabrictopologies"
READS = {"GET", "LIST", "WATCH", "WATCHLIST", "CONNECT"}
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def write_counts(api: rest.Client) -> Counter[str]:
    """Writes so far by resource (fabricplacements, events, fabrictopologies, ...), from the
    API server's ``apiserver_request_total``."""
    status, text = api.request("GET", "/metrics")
    if status != 200 or not isinstance(text, str):
        raise RuntimeError(f"GET /metrics: HTTP {status}")
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if found is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', found.group("labels")))
        if labels.get("verb", "GET") not in READS:
            counts[labels.get("resource", "")] += int(float(found.group("value")))
    return counts


@dataclass(frozen=True)
class Phase:
    change: str
    gangs: int
    placement_writes: int
    event_writes: int
    topology_writes: int
    span_s: float
    """From the spec change to the last write seen."""
    peak_per_s: int
    """Most writes (placements + Events) within one second."""
    shown_s: float
    """From the spec change until every FabricPlacement showed it."""

    @property
    def per_s(self) -> float:
        return (self.placement_writes + self.event_writes) / self.span_s if self.span_s > 0 else 0.0


class Bench:
    def __init__(self, plane: controlplane.ControlPlane, gangs: int) -> None:
        self.plane = plane
        self.api = plane.client()
        self.gangs = gangs
        self.namespace = "writes"
        self.leaves: list[str] = []

    def install(self, deadline: Deadline) -> None:
        kubectl = [str(self.plane.binaries.kubectl), f"--kubeconfig={self.plane.kubeconfig}"]
        subprocess.run([*kubectl, "apply", "--server-side", "-f", str(REPO / "crds")],
                       check=True, capture_output=True, timeout=60)
        deadline.wait_for("the CRDs", lambda: all(self.api.request(
            "GET", f"/apis/fabricsched.io/v1alpha1/{crd}")[0] == 200 for crd in ("fabrictopologies",
                                                                               "fabricplacements")))
        manifests = samples.sample_fabric(spines=1, leaves_per_spine=2, hosts_per_leaf=self.gangs, gpus=8)
        by_leaf: dict[str, list[dict[str, Any]]] = {}
        for m in manifests:
            by_leaf.setdefault(m["metadata"]["labels"][samples.TOPOGRAPH.leaf], []).append(m)
        self.leaves = sorted(by_leaf)
        for hosts in by_leaf.values():
            for slot, m in enumerate(sorted(hosts, key=lambda m: m["metadata"]["name"])):
                m["metadata"]["labels"][SLOT] = str(slot)
        nodes.create(self.api, manifests, datetime.datetime.now(datetime.UTC))
        topology = samples.demo_topology(TOPOLOGY)
        topology["spec"]["links"] = []
        topology["spec"]["health"] = {"recoverAfterSeconds": 0}
        self.api.call("POST", TOPOLOGIES, topology)

    def fabric_ready(self) -> bool:
        status, body = self.api.request("GET", f"{TOPOLOGIES}/{TOPOLOGY}")
        return status == 200 and (body.get("status") or {}).get("nodes") == 2 * self.gangs

    def create_gangs(self, deadline: Deadline) -> None:
        self.api.call("POST", "/api/v1/namespaces", {"metadata": {"name": self.namespace}})
        account = f"/api/v1/namespaces/{self.namespace}/serviceaccounts/default"
        deadline.wait_for("the default ServiceAccount", lambda: self.api.request("GET", account)[0] == 200)
        for slot in range(self.gangs):
            spec = {
                "schedulerName": "fabricsched", "restartPolicy": "Never", "nodeSelector": {SLOT: str(slot)},
                "containers": [{"name": "train", "image": "trainer:1",
                                "resources": {"requests": {"nvidia.com/gpu": "8"},
                                              "limits": {"nvidia.com/gpu": "8"}}}],
            }
            job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"g{slot:03d}"},
                   "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed",
                            "backoffLimit": 0, "template": {"spec": spec}}}
            self.api.call("POST", f"/apis/batch/v1/namespaces/{self.namespace}/jobs", job)

    def placements(self) -> list[dict[str, Any]]:
        path = f"/apis/fabricsched.io/v1alpha1/namespaces/{self.namespace}/fabricplacements"
        items: list[dict[str, Any]] = self.api.call("GET", path)["items"]
        return items

    def all_bound(self) -> bool:
        found = self.placements()
        phases = [(p.get("status") or {}).get("phase") for p in found]
        return len(found) == self.gangs and all(phase == "Bound" for phase in phases)

    def degraded(self, wanted: bool) -> bool:
        found = self.placements()
        return len(found) == self.gangs and all(
            bool((p.get("status") or {}).get("degradedPath")) is wanted for p in found
        )

    def quiet(self, seconds: float, deadline: Deadline) -> None:
        """Until no FabricPlacement or Event write came for ``seconds``."""
        last, since = self._writes(), time.monotonic()
        while time.monotonic() - since < seconds:
            if deadline.left() <= 0:
                raise TimeoutError("the writes never went quiet")
            time.sleep(0.5)
            now = self._writes()
            if now != last:
                last, since = now, time.monotonic()

    def _writes(self) -> tuple[int, int]:
        counts = write_counts(self.api)
        return counts["fabricplacements"], counts["events"]

    def phase(self, change: str, links: list[dict[str, Any]], wanted: bool, quiet_s: float,
              deadline: Deadline) -> Phase:
        before = write_counts(self.api)
        started = time.monotonic()
        self.api.call("PATCH", f"{TOPOLOGIES}/{TOPOLOGY}", {"spec": {"links": links}}, rest.MERGE_PATCH)
        per_second: Counter[int] = Counter()
        last_total, last_change = 0, started
        done_at: float | None = None
        while True:
            if deadline.left() <= 0:
                raise TimeoutError(f"{change}: the placements never all showed it")
            time.sleep(0.25)
            counts = write_counts(self.api)
            total = sum(counts[r] - before[r] for r in ("fabricplacements", "events"))
            now = time.monotonic()
            if total != last_total:
                per_second[int(now - started)] += total - last_total
                last_total, last_change = total, now
            if done_at is None and self.degraded(wanted):
                done_at = now
            if done_at is not None and now - last_change >= quiet_s:
                break
        delta = {r: counts[r] - before[r] for r in ("fabricplacements", "events", "fabrictopologies")}
        return Phase(change, self.gangs, delta["fabricplacements"], delta["events"],
                     delta["fabrictopologies"], round(last_change - started, 2),
                     max(per_second.values(), default=0), round((done_at or now) - started, 2))

    def close(self) -> None:
        self.api.close()


def run(args: argparse.Namespace, root: Path) -> list[Phase]:
    deadline = Deadline(args.timeout)
    extender_port, health_port = processes.free_ports(2)
    scheduler = commands.fabricsched_scheduler(f"http://127.0.0.1:{extender_port}")
    print(f"starting a control plane in {root} ...", flush=True)
    plane = controlplane.up(root / "cluster", extra_schedulers=[scheduler])
    operator: Operator | None = None
    bench = Bench(plane, args.gangs)
    try:
        bench.install(deadline)
        operator = Operator(plane.kubeconfig, root / "fabricsched-run.log", extender_port, health_port)
        deadline.wait_for("fabricsched run ready", operator.ready)
        deadline.wait_for(f"FabricTopology status with {2 * args.gangs} nodes", bench.fabric_ready)
        print(f"  placing {args.gangs} two-leaf gangs ...", flush=True)
        bench.create_gangs(deadline)
        deadline.wait_for(f"{args.gangs} FabricPlacements Bound", bench.all_bound, interval=1.0)
        bench.quiet(args.quiet, deadline)
        leaf = bench.leaves[0]
        link = {"tier": "leaf", "domain": leaf, "state": "degraded", "capacity": 0.25,
                "reason": "bench: 12 of 16 uplinks down"}
        print(f"  degrading leaf {leaf} ...", flush=True)
        degraded = bench.phase(f"leaf {leaf} degraded", [link], True, args.quiet, deadline)
        print(f"  recovering leaf {leaf} ...", flush=True)
        recovered = bench.phase(f"leaf {leaf} recovered", [], False, args.quiet, deadline)
        return [degraded, recovered]
    finally:
        if operator is not None:
            operator.stop()
        bench.close()
        plane.down()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gangs", type=int, default=100, help="two-pod gangs (and hosts per leaf)")
    parser.add_argument("--quiet", type=float, default=5.0, help="seconds without a write that end a phase")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the whole run")
    parser.add_argument("--dir", type=Path, help="cluster folder (default: a temporary one, removed)")
    parser.add_argument("--json", action="store_true", help="print the phases as JSON too")
    args = parser.parse_args()
    if args.gangs < 1:
        parser.error("--gangs must be at least 1")
    try:
        binaries.find()
    except errors.MissingBinaries as e:
        print(f"needs the control plane binaries (make tools): {e}", file=sys.stderr)
        return 2
    if args.dir is not None:
        phases = run(args, args.dir)
    else:
        with tempfile.TemporaryDirectory(prefix="fabricsched-writes-") as tmp:
            phases = run(args, Path(tmp))
    for p in phases:
        print(f"  {p.change}: {p.placement_writes} FabricPlacement writes, {p.event_writes} Event writes, "
              f"{p.topology_writes} FabricTopology writes for {p.gangs} gangs in {p.span_s:.2f} s: "
              f"{p.per_s:.1f} writes/s, peak {p.peak_per_s} in one second; every placement showed "
              f"it after {p.shown_s:.2f} s")
    if args.json:
        print(json.dumps([{**asdict(p), "per_s": round(p.per_s, 1)} for p in phases], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The preemption phase of bench/scale_bench.py (``--preemption-at``): a full fabric of
low-priority gangs, then high-priority gangs that must preempt one of them.

1. every host's free GPUs (``8 - --pods-per-node``) are taken by low-priority gangs, one per
   leaf, their pods bound by ``nodeName`` (class ``bench-low``, value -100: below the fill pods'
   0, so the victims are gangs, not the fill pods); each gang is labelled as fabricsched gangs
   are (``fabricsched.io/gang``, size and rank annotations);
2. ``--preemption-rounds`` times: a high-priority Indexed Job (class ``bench-high``) of
   ``--preemption-gang`` pods of those GPUs with ``required-tier: leaf`` is released: it fits
   nowhere, so ``fabricsched run`` evicts one low gang and holds its leaf. Measured: the
   extender's decision time (its log: from the fit check to the choice, "decided in N ms"),
   the time from release until all the gang's pods are bound, and, as usual, the pass-through's
   answer time for the same pod. The gang is then deleted and its victim put back.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import scale_cluster as cl
import scale_wire as wire
from fabricsched.cluster import kwok, samples

LOW, HIGH = ("bench-low", -100), ("bench-high", 1000)
DECIDED = re.compile(r"\(decided in ([0-9.]+) ms(?:, ([0-9.]+) of them waiting for the API)?(?:; [^)]*)?\)")
SPENT = re.compile(r"; CPU ([0-9.]+), collector ([0-9.]+)(?:, other threads ([0-9.]+))?\)")
"""Of a decision, the loop thread's CPU, the garbage collector's pauses and the process's other
threads' CPU (ms)."""


class Bench(Protocol):
    api: Any
    names: list[str]
    them: wire.Caller
    operator: Any
    args: Any
    result: dict[str, Any]

    def pods_seen(self) -> int: ...


def run(bench: Bench, summary: Callable[[Sequence[float]], dict[str, float]]) -> None:
    api, args = bench.api, bench.args
    for ns in ("lat", "probe"):  # their plans hold GPUs the low gangs take here
        cl.clean(api, ns)
    cl.settle(api, ("lat", "probe"), args.timeout)
    for name, value in (LOW, HIGH):
        api.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, "preemptionPolicy": "PreemptLowerPriority"})
    gpus = 8 - args.pods_per_node
    leaves: dict[str, list[str]] = {}
    for manifest in cl.node_manifests(len(bench.names)):
        leaves.setdefault(manifest["metadata"]["labels"][samples.TOPOGRAPH.leaf], []).append(
            manifest["metadata"]["name"])
    cl.namespace(api, "low", args.timeout)
    low = [(f"low-{leaf}", rank, node) for leaf, hosts in sorted(leaves.items())
           for rank, node in enumerate(hosts)]
    sizes = {leaf: len(hosts) for leaf, hosts in leaves.items()}

    def put_back() -> list[float]:
        """The low pods missing from the API created again; [when, how many], for ``_back``."""
        present = {p["metadata"]["name"] for p in cl.pods(api, "low")}
        missing = [item for item in low if f"{item[0]}-{item[1]}" not in present]
        cl.each(create_low, missing)
        return [time.monotonic(), len(missing)]

    def create_low(item: tuple[str, int, str]) -> None:
        gang, rank, node = item
        spec = {**cl.pod_spec("fabricsched", gpus, gated=False, node=node), "priorityClassName": LOW[0],
                "automountServiceAccountToken": False}
        api.call("POST", "/api/v1/namespaces/low/pods", {
            "metadata": {"name": f"{gang}-{rank}", "labels": {"fabricsched.io/gang": gang},
                         "annotations": {"fabricsched.io/gang-size": str(sizes[gang[4:]]),
                                         "fabricsched.io/rank": str(rank)}},
            "spec": spec})

    # Counted before the low pods exist: read after, it already held some of them, and the wait
    # below for as many more never ended.
    everything = bench.pods_seen() + len(low)
    cl.each(create_low, low)
    cl.wait_for("the low gangs in fabricsched's state", lambda: bench.pods_seen() >= everything,
                args.timeout, 0.5)
    # As the fill does: the first rounds must not run during kwok's 5,000 Running status
    # writes (they kept both cores busy, and were measured as the decision's time).
    cl.wait_for("every low pod Running", lambda: not api.call(
        "GET", "/api/v1/namespaces/low/pods?fieldSelector=status.phase%21%3DRunning&limit=1")["items"],
        args.timeout, 1.0)
    cl.namespace(api, "high", args.timeout)
    baseline = bench.pods_seen()
    decided: list[float] = []
    waited: list[float] = []
    spent: list[tuple[float, float]] = []
    bound_s: list[float] = []
    passthrough: list[float] = []
    without = 0
    for turn in range(args.preemption_rounds):
        log_start = len(bench.operator.log.read_text(errors="replace").splitlines())
        job = f"h-{turn:03d}"
        api.call("POST", "/apis/batch/v1/namespaces/high/jobs", {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job},
            "spec": {"parallelism": args.preemption_gang, "completions": args.preemption_gang,
                     "completionMode": "Indexed", "backoffLimit": 0,
                     "template": {"metadata": {"annotations": {"fabricsched.io/required-tier": "leaf"}},
                                  "spec": {**cl.pod_spec("fabricsched", gpus),
                                           "priorityClassName": HIGH[0]}}}})
        pods = cl.wait_for("the high gang's pods", lambda: (
            p if len(p := cl.pods(api, "high")) >= args.preemption_gang else None), args.timeout)
        passthrough.append(bench.them.call(pods[0], bench.names).seconds)
        started = time.monotonic()
        cl.ungate(api, "high", [p["metadata"]["name"] for p in pods])
        cl.wait_for("the high gang bound", lambda: sum(
            1 for p in cl.pods(api, "high") if p["spec"].get("nodeName")) >= args.preemption_gang,
            args.timeout, 0.1)
        bound_s.append(time.monotonic() - started)
        # The round's line is logged after its last eviction, and the gang may bind before it.
        try:
            logged = functools.partial(_decisions, bench, log_start)
            decided += cl.wait_for("the round's decision logged", logged, 30, 0.1)
        except TimeoutError:
            # It bound with no preemption: a victim put back in the last round was not in the
            # state yet when it was asked about. Counted apart, its bind time left out.
            without += 1
            bound_s.pop()
        waited += _waits(bench, log_start)
        spent += _spent(bench, log_start)
        api.request("DELETE", f"/apis/batch/v1/namespaces/high/jobs/{job}", {"propagationPolicy": "Orphan"})
        cl.each(lambda p: kwok.delete_now(api, "high", p["metadata"]["name"]), cl.pods(api, "high"))
        cl.wait_for("the high gang gone", lambda: not cl.pods(api, "high"), args.timeout, 0.2)
        # An evicted pod still terminating is not recreated below: wait until it is gone, or
        # the next gang finds its GPUs free and binds without a preemption.
        cl.wait_for("the victims gone", lambda: not any(
            p["metadata"].get("deletionTimestamp") for p in cl.pods(api, "low")), args.timeout, 0.2)
        recreated = put_back()
        # The next gang must find the fabric full in fabricsched's state too.
        try:
            cl.wait_for("the victim back in fabricsched's state", functools.partial(
                _back, bench, baseline, put_back, recreated), 60, 0.1)
        except TimeoutError as e:
            in_api = len(cl.pods(api, "low")) + len(cl.pods(api, "high"))
            raise TimeoutError(f"{e}: fabricsched holds {bench.pods_seen()} pods, {baseline} expected; "
                               f"{in_api} low and high pods in the API, {len(low)} low made") from e
    bench.result["preemption"] = {
        "low_gangs": len(leaves), "gang_pods": args.preemption_gang, "gpus_per_pod": gpus,
        "decision_ms": summary(decided), "decision_each_ms": [round(d * 1000, 1) for d in decided],
        "decision_cpu_each_ms": [c for c, _, _ in spent],
        "decision_collector_each_ms": [g for _, g, _ in spent],
        "decision_other_threads_each_ms": [o for _, _, o in spent],
        "api_wait_ms": summary(waited), "bound_ms": summary(bound_s),
        "passthrough_ms": summary(passthrough), "rounds_without_preemption": without}
    cl.clean(api, "high")
    cl.clean(api, "low")



def _back(bench: Bench, baseline: int, put_back: Callable[[], list[float]], last: list[float]) -> bool:
    """The victims back in fabricsched's state. kwok deletes an evicted pod by name, so a delete
    it sent late can take the pod created again under that name: every 5 s, what is missing
    from the API is created again."""
    if bench.pods_seen() == baseline:
        return True
    if time.monotonic() - last[0] > 5.0:
        last[:] = put_back()
        bench.result["victims_created_again"] = bench.result.get("victims_created_again", 0) + int(last[1])
    return False


def _decisions(bench: Bench, log_start: int) -> list[float]:
    """Decision times (s) the operator logged after line ``log_start``."""
    lines = bench.operator.log.read_text(errors="replace").splitlines()[log_start:]
    return [float(m.group(1)) / 1000 for line in lines if (m := DECIDED.search(line))]


def _spent(bench: Bench, log_start: int) -> list[tuple[float, float, float]]:
    """Of those decisions, (the loop thread's CPU, the collector's pauses, the other threads'
    CPU) in ms."""
    lines = bench.operator.log.read_text(errors="replace").splitlines()[log_start:]
    return [(float(m.group(1)), float(m.group(2)), float(m.group(3) or 0))
            for line in lines if (m := SPENT.search(line))]


def _waits(bench: Bench, log_start: int) -> list[float]:
    """Of those decisions, the time (s) spent waiting for namespaces and budgets (logged since)."""
    lines = bench.operator.log.read_text(errors="replace").splitlines()[log_start:]
    return [float(m.group(2)) / 1000 for line in lines if (m := DECIDED.search(line)) and m.group(2)]

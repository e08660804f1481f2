"""Evidence on the real control plane: a running gang's path health, the gangs an element
touches, why a gang is Pending, and the user metrics, with the real kube-scheduler, kwok and
``fabricsched run`` (the conftest's ``fabric``: 2 spines x 2 leaves x 4 hosts of 8 GPUs,
``recoverAfterSeconds: 0``)."""

from __future__ import annotations

import re
import time
import urllib.request
from typing import Any

import pytest
from harness import Fabric
from waiting import holds_for, wait_for


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c["type"] == kind:
            return dict(c)
    return {}


def event_list(fabric: Fabric, namespace: str, reason: str) -> list[tuple[str, str]]:
    items = fabric.api.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    return [
        (e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in items if e["reason"] == reason
    ]


def events(fabric: Fabric, namespace: str, reason: str) -> set[tuple[str, str]]:
    return set(event_list(fabric, namespace, reason))


def metric(fabric: Fabric, name: str, labels: str = "") -> float | None:
    url = f"http://127.0.0.1:{fabric.operator.health_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    pattern = re.escape(name) + (re.escape("{" + labels + "}") if labels else "") + r" ([0-9.e+-]+)$"
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else None


def test_a_degraded_host_under_a_running_gang_shows_on_its_placement_job_and_topology(
    fabric: Fabric, ns: str
) -> None:
    fabric.job(ns, "six", pods=6)
    placed = fabric.placed(ns, "six", 6)
    wait_for("six Bound",
             lambda: (fabric.placement(ns, "six") or {}).get("status", {}).get("phase") == "Bound")
    assert condition(fabric.placement(ns, "six"), "PathDegraded")["status"] == "False"
    assert metric(fabric, "fabricsched_gangs", 'phase="Bound"') == 1
    host = placed[0]
    fabric.label_health(host, "degraded")
    started = time.monotonic()
    try:
        degraded = wait_for(
            "degradedPath on six",
            lambda: p if (p := fabric.placement(ns, "six")) and p["status"].get("degradedPath") else None,
            timeout=5,
        )
        assert time.monotonic() - started <= 5
        status = degraded["status"]
        assert [(e["kind"], e["node"], e["state"]) for e in status["unhealthyPath"]] == [
            ("node", host, "degraded")
        ]
        assert [s["source"] for s in status["unhealthyPath"][0]["sources"]] == ["label"]
        assert status["commSlowdown"] > status["commSlowdownAtPlacement"]
        path_condition = condition(degraded, "PathDegraded")
        assert path_condition["status"] == "True" and host in path_condition["message"]
        wait_for("PathDegraded Events on the FabricPlacement and the Job",
                 lambda: {("FabricPlacement", "six"), ("Job", "six")} <= events(fabric, ns, "PathDegraded"),
                 timeout=5)
        row = wait_for(
            "the topology's degraded row names the gang",
            lambda: next((r for r in fabric.topology_status().get("degraded", [])
                          if r.get("node") == host and r.get("affectedGangs")), None),
        )
        assert row["affectedGangs"] == [f"{ns}/six"] and row["affectedGangCount"] == 1
        assert metric(fabric, "fabricsched_gangs_on_degraded_path") == 1
    finally:
        fabric.label_health(host, None)
    recovered = wait_for(
        "six recovered",
        lambda: p if (p := fabric.placement(ns, "six")) and not p["status"].get("degradedPath") else None,
        timeout=10,
    )
    assert recovered["status"]["unhealthyPath"] == []
    assert condition(recovered, "PathDegraded")["reason"] == "PathHealthy"
    wait_for("PathRecovered Events", lambda: {("FabricPlacement", "six"), ("Job", "six")}
             <= events(fabric, ns, "PathRecovered"), timeout=5)
    # One element change: one Event on each object, however often the status was written.
    assert sorted(event_list(fabric, ns, "PathDegraded")) == [("FabricPlacement", "six"), ("Job", "six")]
    assert metric(fabric, "fabricsched_gangs_on_degraded_path") == 0
    assert (metric(fabric, "fabricsched_gang_placement_wait_seconds_count") or 0) >= 1
    assert (metric(fabric, "fabricsched_gang_comm_slowdown_count") or 0) >= 1
    leaf = fabric.leaf_of[host]
    labels = f'domain="{leaf}",state="used",tier="leaf",topology="ib-test"'
    used = metric(fabric, "fabricsched_domain_gpus", labels)
    assert used is not None and used >= 8


def test_an_unplaceable_gang_is_pending_and_says_why_with_numbers(fabric: Fabric, ns: str) -> None:
    fabric.job(ns, "huge", pods=20)
    pending = wait_for(
        "huge Pending with a reason",
        lambda: p if condition(p := fabric.placement(ns, "huge"), "Reserved").get("reason") else None,
    )
    assert pending["status"]["phase"] == "Pending" and pending["spec"]["ranks"] == []
    reserved = condition(pending, "Reserved")
    assert reserved["status"] == "False" and reserved["reason"] == "Unplaceable"
    assert reserved["message"] == (
        "needs 20 x 8 GPUs: the fabric could never hold 20 pods of 8 GPUs (room for 16 when empty)"
    )
    assert metric(fabric, "fabricsched_gangs", 'phase="Pending"') == 1


def test_the_process_metrics_and_build_info_are_served(fabric: Fabric) -> None:
    assert metric(fabric, "fabricsched_build_info", 'version="0.1.0"') == 1
    assert (metric(fabric, "process_cpu_seconds_total") or 0) > 0
    assert metric(fabric, "fabricsched_reservation_expiries_total") is not None


def _path_shows(fabric: Fabric, namespace: str, host: str) -> dict[str, Any] | None:
    p = fabric.placement(namespace, "six")
    status = (p or {}).get("status") or {}
    on_path = [e.get("node") for e in status.get("unhealthyPath") or ()]
    return p if status.get("degradedPath") and host in on_path else None


def _row_names(fabric: Fabric, namespace: str, host: str) -> dict[str, Any] | None:
    rows = fabric.topology_status().get("degraded", [])
    gang = f"{namespace}/six"
    return next((r for r in rows if r.get("node") == host and gang in r.get("affectedGangs", ())), None)


@pytest.mark.parametrize("when", ["before", "while-away"], ids=["degraded before the kill",
                                                                 "degraded while fabricsched was away"])
def test_after_a_sigkill_and_restart_the_gang_still_shows_the_unhealthy_host_on_its_path(
    fabric: Fabric, ns: str, when: str
) -> None:
    fabric.job(ns, "six", pods=6)
    placed = fabric.placed(ns, "six", 6)
    wait_for("six Bound",
             lambda: (fabric.placement(ns, "six") or {}).get("status", {}).get("phase") == "Bound")
    host = placed[1]
    if when == "before":
        fabric.label_health(host, "degraded")
        wait_for("six shows the degraded host", lambda: _path_shows(fabric, ns, host), timeout=5)
    fabric.operator.kill()
    try:
        if when == "while-away":
            fabric.label_health(host, "degraded")
        fabric.operator.start()
        # Nothing about the host changes after the start: the rebuild alone must show it.
        after = wait_for("six shows the degraded host after the restart",
                         lambda: _path_shows(fabric, ns, host), timeout=5)
        assert condition(after, "PathDegraded")["status"] == "True"
        holds_for("six keeps showing it", lambda: _path_shows(fabric, ns, host), seconds=3)
        row = wait_for("the topology's row names six", lambda: _row_names(fabric, ns, host), timeout=10)
        assert row["affectedGangCount"] == 1
        assert metric(fabric, "fabricsched_gangs_on_degraded_path") == 1
        if when == "before":
            # One element change, one Event per object: the restart announces nothing again.
            items = fabric.api.call("GET", f"/api/v1/namespaces/{ns}/events")["items"]
            counts = [
                (e["involvedObject"]["kind"], e.get("count") or (e.get("series") or {}).get("count") or 1)
                for e in items if e["reason"] == "PathDegraded"
            ]
            assert sorted(counts) == [("FabricPlacement", 1), ("Job", 1)], counts
    finally:
        fabric.label_health(host, None)


READ_VERBS = {"GET", "LIST", "WATCH", "WATCHLIST", "CONNECT"}


def api_writes(fabric: Fabric) -> dict[str, int]:
    """Writes so far by resource, as the API server counts them (``apiserver_request_total``)."""
    status, text = fabric.api.request("GET", "/metrics")
    assert status == 200 and isinstance(text, str)
    counts: dict[str, int] = {}
    for line in text.splitlines():
        found = re.match(r"^apiserver_request_total\{([^}]*)\} (\S+)$", line)
        if found is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', found.group(1)))
        if labels.get("verb", "GET") not in READ_VERBS:
            resource = labels.get("resource", "")
            counts[resource] = counts.get(resource, 0) + int(float(found.group(2)))
    return counts


def _quiet(fabric: Fabric, seconds: float = 3.0) -> dict[str, int]:
    """The write counts once no FabricPlacement or Event write came for ``seconds``."""
    last, since = api_writes(fabric), time.monotonic()

    def settled() -> dict[str, int] | None:
        nonlocal last, since
        now = api_writes(fabric)
        keys = ("fabricplacements", "events")
        if [now.get(k) for k in keys] != [last.get(k) for k in keys]:
            last, since = now, time.monotonic()
        return now if time.monotonic() - since >= seconds else None

    found: dict[str, int] = wait_for("the writes to go quiet", settled, timeout=60, interval=0.5)
    return found


def test_a_leaf_degradation_under_several_gangs_writes_each_once_and_one_event_per_object(
    fabric: Fabric, ns: str
) -> None:
    leaves = sorted(set(fabric.leaf_of.values()))
    first, second = ([h for h in sorted(fabric.leaf_of) if fabric.leaf_of[h] == leaf] for leaf in leaves[:2])
    # Two gangs of 8-GPU pods fill the leaves' uplinks exactly (2 x 3200 over 6400 Gbps): more
    # would congest them among themselves, over their floor, and the locality wait holds those.
    first, second = first[:2], second[:2]
    gangs = [f"pair{i}" for i in range(len(first))]
    for name, a, b in zip(gangs, first, second, strict=True):
        # Each gang may use only one host of each leaf: its path crosses both leaves' uplinks.
        hosts = {"key": "kubernetes.io/hostname", "operator": "In", "values": [a, b]}
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [hosts]}]}}}
        fabric.job(ns, name, pods=2, placement={"affinity": affinity})
    for name in gangs:
        fabric.placed(ns, name, 2)
    wait_for("every gang Bound", lambda: all(
        (fabric.placement(ns, n) or {}).get("status", {}).get("phase") == "Bound" for n in gangs))

    def all_degraded(wanted: bool) -> bool:
        return all(bool((fabric.placement(ns, n) or {}).get("status", {}).get("degradedPath")) is wanted
                   for n in gangs)

    # The API server counts writes cluster-wide: earlier tests' plans must be gone first (their
    # release and garbage collection are writes too, and could land inside the window).
    def only_ours() -> bool:
        listed = fabric.api.call("GET", "/apis/fabricsched.io/v1alpha1/fabricplacements")["items"]
        return all(p["metadata"]["namespace"] == ns for p in listed)

    wait_for("no FabricPlacement of an earlier test left", only_ours, timeout=90)
    before = _quiet(fabric)
    link = {"tier": "leaf", "domain": leaves[0], "state": "degraded", "capacity": 0.25,
            "reason": "uplinks down"}
    fabric.set_links([link])
    try:
        wait_for("every gang on a degraded path", lambda: all_degraded(True), timeout=10)
        degraded = _quiet(fabric)
    finally:
        fabric.set_links([])
    wait_for("every gang recovered", lambda: all_degraded(False), timeout=10)
    recovered = _quiet(fabric)

    for start, end in ((before, degraded), (degraded, recovered)):
        # One status write per gang per change; one Event on each FabricPlacement and each Job,
        # and at most two on the topology (its health Event, its condition).
        assert end.get("fabricplacements", 0) - start.get("fabricplacements", 0) == len(gangs)
        assert end.get("events", 0) - start.get("events", 0) <= 2 * len(gangs) + 2
    assert sorted(event_list(fabric, ns, "PathDegraded")) == sorted(
        [("FabricPlacement", n) for n in gangs] + [("Job", n) for n in gangs])
    assert sorted(event_list(fabric, ns, "PathRecovered")) == sorted(
        [("FabricPlacement", n) for n in gangs] + [("Job", n) for n in gangs])

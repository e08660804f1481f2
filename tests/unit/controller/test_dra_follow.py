"""The DRA kinds through the list-and-watch, against a small API server over real HTTP: an API the
cluster does not serve holds no readiness back, and a listing's claims are settled once a page."""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web
from controller_harness import topology_body

import builders
from fabricsched import listwatch
from fabricsched.controller import handlers, informer, metrics, state
from fabricsched.controller import runtime as runtime_module
from timing import Clock

RESOURCE = "/apis/resource.k8s.io/v1"
CLAIMS = f"{RESOURCE}/resourceclaims"
SLICES = f"{RESOURCE}/resourceslices"
DOMAINS = "/apis/resource.nvidia.com/v1beta1/computedomains"
DRIVER = "gpu.nvidia.com"


class ApiServer:
    """Serves the collections in ``served`` (listed in pages, then one scripted watch each);
    every other path answers 404, as an API server for an API or CRD it does not have."""

    def __init__(self, served: dict[str, list[dict[str, Any]]]) -> None:
        self.served = served
        self.watches: dict[str, list[dict[str, Any]]] = {}
        self.requests: list[str] = []
        self.forbidden: set[str] = set()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(request.path)
        if request.path in self.forbidden:  # RBAC without the rule
            return web.json_response({"kind": "Status", "code": 403}, status=403)
        items = self.served.get(request.path)
        if items is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        if request.query.get("watch"):
            response = web.StreamResponse()
            await response.prepare(request)
            for event in self.watches.pop(request.path, []):
                await response.write(web.json_response(event).body + b"\n")  # type: ignore[operator]
            await asyncio.sleep(0.1)  # then the server ends the watch, as on its timeout
            return response
        start = int(request.query.get("continue") or 0)
        limit = int(request.query["limit"])
        more = start + limit < len(items)
        return web.json_response({"items": items[start:start + limit], "metadata": {
            "resourceVersion": "100", **({"continue": str(start + limit)} if more else {})}})


async def _follow(server: ApiServer, cluster: state.ClusterState, until: Callable[[], bool],
                  observer: listwatch.Observer | None = None) -> None:
    """Follow every kind the operator follows, through the real readiness gate, until ``until``."""
    app = web.Application()
    app.router.add_get("/{tail:.*}", server.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    rt: runtime_module.Runtime = types.SimpleNamespace(state=cluster)  # type: ignore[assignment]
    kinds = handlers.kinds(rt)
    gate = handlers.SyncGate(rt, [k.name for k in kinds])
    gate.done(handlers.SyncGate.KOPF)
    connection = listwatch.Connection(lambda: listwatch.Login(server=f"http://127.0.0.1:{port}"))
    tasks = [asyncio.create_task(listwatch.Informer(
        connection, kind, observer, lambda k=kind.name: gate.done(k), page_size=500).follow())
        for kind in kinds]
    try:
        for _ in range(500):
            await asyncio.sleep(0.01)
            if until():
                break
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await connection.close()
        await runner.cleanup()


def _empty_core() -> dict[str, list[dict[str, Any]]]:
    return {"/api/v1/nodes": [], "/api/v1/pods": [], "/apis/batch/v1/jobs": [],
            "/apis/fabricsched.io/v1alpha1/fabrictopologies": []}


def _gpu_slice(node: str) -> dict[str, Any]:
    devices = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}} for i in range(8)]
    return {"metadata": {"name": f"{node}-{DRIVER}", "resourceVersion": "1"}, "spec": {
        "driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        "devices": devices}}


def _claim(name: str, node: str, minor: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "fill", "resourceVersion": "1"},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER}}]}},
            "status": {"allocation": {
                "devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": node,
                                         "device": f"gpu-{minor}"}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}


def _counted(calls: dict[str, int], name: str, real: Callable[..., None]) -> Callable[..., None]:
    def spy(*args: Any) -> None:
        calls[name] += 1
        real(*args)
    return spy


def test_a_dra_api_the_cluster_does_not_serve_holds_no_readiness_back_and_is_asked_again(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # Slices are served; claims, templates, classes, taint rules answer 404; ComputeDomains 403.
    monkeypatch.setattr(listwatch, "NOT_SERVED_RETRY_S", 0.05)
    caplog.set_level(logging.INFO, logger=listwatch.__name__)
    server = ApiServer({**_empty_core(), SLICES: [_gpu_slice("n1")]})
    server.forbidden.add(DOMAINS)
    cluster = state.ClusterState(Clock())
    seen: dict[str, Any] = {}

    def until() -> bool:
        if "synced" not in seen and server.requests.count(CLAIMS) >= 4:  # asked again, no watch
            seen["synced"], seen["slices"] = cluster.synced, cluster.devices.has_devices("n1")
            seen["logs"] = list(caplog.records)
            # The API appears (a cluster upgraded, a CRD installed): its objects are read.
            server.served[CLAIMS] = [_claim("c1", "n1", 0)]
        return ("fill", "c1") in cluster.dra.claims.claims

    asyncio.run(_follow(server, cluster, until))
    assert seen["synced"] and seen["slices"]  # every part done while four DRA kinds are not served
    said = [r.getMessage() for r in seen["logs"] if CLAIMS in r.getMessage()]
    assert len(said) == 1 and "is not served" in said[0], said  # once, not per retry
    [forbidden] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert DOMAINS in forbidden and "403" in forbidden  # a warning, once: the RBAC lacks a rule
    assert server.requests.count(DOMAINS) >= 4
    assert ("fill", "c1") in cluster.dra.claims.claims
    assert any(f"{CLAIMS} is served now" in r.getMessage() for r in caplog.records)


def test_a_listing_of_claims_is_settled_once_a_page_and_a_watch_event_at_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    nodes = [f"n{i:03d}" for i in range(150)]
    fill = [_claim(f"c{i}", nodes[i % 150], i // 150) for i in range(1200)]  # 8 per node
    fill.insert(600, {"metadata": {"name": "forged", "namespace": "fill"}, "spec": {"devices": []}})
    server = ApiServer({
        **_empty_core(), CLAIMS: fill, SLICES: [_gpu_slice(n) for n in nodes],
        "/api/v1/nodes": [builders.make_node(n).leaf(f"l{i // 10}").spine("s1").label("gpu", "yes").build()
                          for i, n in enumerate(nodes)],
        "/apis/fabricsched.io/v1alpha1/fabrictopologies": [topology_body(draGpus={})],
    })
    # After the listing, two watch events: a fill claim is deleted, another deallocated.
    deallocated = {**fill[1], "status": {}, "metadata": {**fill[1]["metadata"], "resourceVersion": "101"}}
    server.watches[CLAIMS] = [{"type": "DELETED", "object": fill[0]},
                              {"type": "MODIFIED", "object": deallocated}]
    cluster = state.ClusterState(Clock())
    calls: dict[str, int] = {"refresh_claims": 0, "refeed_devices": 0}
    for name in calls:
        monkeypatch.setattr(cluster, name, _counted(calls, name, getattr(cluster, name)))
    registry = metrics.Metrics()
    caplog.set_level(logging.WARNING)
    held = cluster.dra.claims
    asyncio.run(_follow(server, cluster, lambda: ("fill", "c0") not in held.claims
                        and len(held.allocations) == 1198, informer.MetricsObserver(registry)))
    assert len(cluster.dra.claims.claims) == 1199
    # 1,201 objects in pages of 500: three settles, not 1,200 re-counts; then one per event
    # (and one as the topology came).
    assert calls["refresh_claims"] == 3 + 2 + 1
    assert calls["refeed_devices"] == 1  # 150 slices, one page
    snap = cluster.snapshot(next(iter(cluster.topologies)))
    assert snap is not None and len(snap.fabric.hosts) == 150
    free = dict(snap.free_gpus)
    assert free[nodes[0]] == free[nodes[1]] == 1 and sum(free.values()) == 2  # c0 gone, c1 freed
    # The forged claim: skipped with a one-line warning and counted; the listing went on.
    assert registry.handler_errors.labels("resourceclaim")._value.get() == 1
    [warning] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "ignoring resourceclaim 'forged'" in warning.getMessage() and not warning.exc_info

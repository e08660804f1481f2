"""In process: the operator's initial listings of a scale-bench cluster through its real
list-and-watch (``handlers.kinds``, ``listwatch.Informer``, the readiness gate), served by a
local HTTP server, with the device plugin's GPUs and with GPUs through DRA.

The objects are those ``bench/scale_bench.py`` creates (``scale_cluster``, ``scale_dra``): the
sample fabric's nodes, ``--pods-per-node`` running 1-GPU fill pods per node, and with DRA a
ResourceSlice per node (8 GPUs and a MIG device), the DeviceClass, the namespace's claim templates
and one allocated ResourceClaim per fill pod. Each pod and claim carries the fields the API server
adds (uid, creationTimestamp, a Running status) so the pages are about the size of the real ones.
No API server, no kwok, no kopf: what this measures is parsing and applying, the part of the
startup this process controls. ``--settle-each`` settles the DRA kinds after every object, as the
kopf handlers did (one re-count per claim), to compare.

    python bench/dra_listing_bench.py --nodes 5000 --pods-per-node 5
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import time
import types
from typing import Any

from aiohttp import web

import scale_cluster
import scale_dra
from fabricsched import listwatch
from fabricsched.cluster import samples
from fabricsched.controller import handlers, state

NS = "fill"


def _status(phase: str = "Running") -> dict[str, Any]:
    return {"phase": phase, "hostIP": "10.0.0.1", "podIP": "10.1.0.1", "startTime": "2026-01-01T00:00:00Z",
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                           for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
            "containerStatuses": [{"name": "c", "ready": True, "restartCount": 0, "image": "bench:1",
                                   "imageID": "", "started": True,
                                   "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}


def _meta(name: str, i: int) -> dict[str, Any]:
    return {"name": name, "namespace": NS, "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(1000 + i), "creationTimestamp": "2026-01-01T00:00:00Z"}


def collections(nodes: int, per_node: int, dra: bool) -> dict[str, list[dict[str, Any]]]:
    manifests = scale_cluster.node_manifests(nodes, dra_gpus=dra)
    names = [n["metadata"]["name"] for n in manifests]
    topology = samples.demo_topology(scale_cluster.TOPOLOGY)
    topology["spec"]["links"] = []
    topology["metadata"].update(uid="uid-t", generation=1)
    served: dict[str, list[dict[str, Any]]] = {
        "/api/v1/nodes": manifests, "/api/v1/pods": [], "/apis/batch/v1/jobs": [],
        "/apis/fabricsched.io/v1alpha1/fabrictopologies": [scale_dra.topology(topology) if dra else topology]}
    claims = []
    for i in range(nodes * per_node):
        node, name = names[i % nodes], f"f-{i:06d}"
        spec = scale_cluster.pod_spec("default-scheduler", 1, gated=False, node=node, dra_gpus=dra,
                                      claim=name if dra else None)
        pod = {"metadata": _meta(name, i), "spec": spec, "status": _status()}
        if dra:
            pod["status"]["resourceClaimStatuses"] = [{"name": scale_dra.CLAIM, "resourceClaimName": name}]
            claims.append(_claim(name, i, node, i // nodes))
        served["/api/v1/pods"].append(pod)
    if dra:
        resource = scale_dra.RESOURCE
        served[f"{resource}/resourceslices"] = [scale_dra.gpu_slice(n) for n in names]
        served[f"{resource}/resourceclaims"] = claims
        served[f"{resource}/resourceclaimtemplates"] = _templates()
        served[f"{resource}/deviceclasses"] = [{"metadata": {"name": scale_dra.CLASS}, "spec": {
            "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}]
        served[f"{resource}/devicetaintrules"] = []
    return served


def _claim(name: str, i: int, node: str, minor: int) -> dict[str, Any]:
    request = {"name": scale_dra.CLAIM, "exactly": {"deviceClassName": scale_dra.CLASS}}
    return {"metadata": _meta(name, i), "spec": {"devices": {"requests": [request]}}, "status": {
        "allocation": {"devices": {"results": [{"request": scale_dra.CLAIM, "driver": scale_dra.DRIVER,
                                                "pool": node, "device": f"gpu-{minor}"}]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
        "reservedFor": [{"resource": "pods", "name": name, "uid": f"u-{i}"}]}}


def _templates() -> list[dict[str, Any]]:
    return [{"metadata": {"name": scale_dra.template_name(g), "namespace": NS}, "spec": {"spec": {
        "devices": {"requests": [{"name": scale_dra.CLAIM, "exactly": {
            "deviceClassName": scale_dra.CLASS, "count": g}}]}}}}
        for g in range(1, scale_dra.GPUS_PER_NODE + 1)]


class Server:
    """Serves every collection in pages (encoded ahead, as an API server's watch cache would
    answer), 404 for any other path; watches stay open and quiet."""

    def __init__(self, served: dict[str, list[dict[str, Any]]], page: int) -> None:
        self.pages: dict[tuple[str, int], bytes] = {}
        for path, items in served.items():
            for start in range(0, max(1, len(items)), page):
                more = start + page < len(items)
                self.pages[(path, start)] = json.dumps({"items": items[start:start + page], "metadata": {
                    "resourceVersion": "100", **({"continue": str(start + page)} if more else {})}}).encode()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch"):
            if (request.path, 0) not in self.pages:
                return web.Response(status=404)
            response = web.StreamResponse()
            await response.prepare(request)
            await asyncio.sleep(3600)
            return response
        body = self.pages.get((request.path, int(request.query.get("continue") or 0)))
        if body is None:
            return web.Response(status=404, text='{"kind":"Status","code":404}')
        return web.Response(body=body, content_type="application/json")


async def listed(served: dict[str, list[dict[str, Any]]], settle_each: bool) -> dict[str, Any]:
    server = Server(served, listwatch.PAGE_SIZE)
    app = web.Application()
    app.router.add_get("/{tail:.*}", server.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    cluster = state.ClusterState(time.time)
    rt: Any = types.SimpleNamespace(state=cluster)
    kinds = handlers.kinds(rt)
    if settle_each:
        kinds = [_settling_each(k) if k.name not in ("node", "pod", "job", "fabrictopology") else k
                 for k in kinds]
    gate = handlers.SyncGate(rt, [k.name for k in kinds])
    gate.done(handlers.SyncGate.KOPF)
    done: dict[str, float] = {}
    started = time.perf_counter()

    def on_listed(name: str) -> None:
        done[name] = time.perf_counter() - started
        gate.done(name)

    connection = listwatch.Connection(lambda: listwatch.Login(server=f"http://127.0.0.1:{port}"))
    followers = [listwatch.Informer(connection, k, None, lambda n=k.name: on_listed(n)) for k in kinds]
    tasks = [asyncio.create_task(f.follow()) for f in followers]
    while not cluster.synced:
        await asyncio.sleep(0.01)
    ready = time.perf_counter() - started
    name = next(iter(cluster.topologies))
    snap = cluster.snapshot(name)
    first = time.perf_counter() - started
    assert snap is not None
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await connection.close()
    await runner.cleanup()
    return {"ready_s": round(ready, 2), "first_snapshot_s": round(first, 2), "hosts": len(snap.fabric.hosts),
            "gpus": sum(h.gpus for h in snap.fabric.hosts.values()), "free": sum(snap.free_gpus.values()),
            "listed_s": {k: round(v, 2) for k, v in sorted(done.items(), key=lambda kv: kv[1])}}


def _settling_each(kind: listwatch.Kind) -> listwatch.Kind:
    def apply(body: Any) -> None:
        kind.apply(body)
        kind.settle()
    return dataclasses.replace(kind, apply=apply)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods-per-node", type=int, default=5)
    parser.add_argument("--settle-each", action="store_true", help="DRA: settle after every object (before)")
    parser.add_argument("--only", choices=("plugin", "dra"), help="one run only")
    args = parser.parse_args()
    results = {}
    for mode in ("plugin", "dra"):
        if args.only and args.only != mode:
            continue
        served = collections(args.nodes, args.pods_per_node, mode == "dra")
        sizes = {p.rsplit("/", 1)[-1]: len(v) for p, v in served.items()}
        results[mode] = {"objects": sizes, **asyncio.run(listed(served, args.settle_each))}
        print(mode, json.dumps(results[mode]), flush=True)
    if len(results) == 2:
        print("ready DRA / device plugin: %.2f" % (results["dra"]["ready_s"] / results["plugin"]["ready_s"]))


if __name__ == "__main__":
    main()

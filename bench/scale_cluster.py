"""The cluster side of bench/scale_bench.py: ``fabricsched cluster up``, filling it, pods and Jobs.

Everything goes through the API server of a real local control plane (kwok plays the nodes),
with plain JSON requests on kept-alive connections (``fabricsched.cluster.rest``), 16 at a time.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import scale_dra as dra
from fabricsched.cluster import binaries, kwok, rest, samples

REPO = Path(__file__).resolve().parents[1]
GPU = samples.GPU_RESOURCE
TOPOLOGY = "scale"
GATE = "fabricsched.io/bench"
HOSTS_PER_LEAF = 16
LEAVES_PER_SPINE = 16
WORKERS = 16


def each(work: Callable[[Any], Any], items: Iterable[Any], workers: int = WORKERS) -> list[Any]:
    with futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return [job.result() for job in [pool.submit(work, item) for item in items]]


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.25) -> Any:
    end = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def node_manifests(count: int, dra_gpus: bool = False) -> list[dict[str, Any]]:
    """The sample fabric: 8-GPU hosts, 16 per leaf, 16 leaves per spine, cut to ``count``; with
    ``dra_gpus``, no allocatable GPUs (they come from ResourceSlices)."""
    spines = math.ceil(count / (HOSTS_PER_LEAF * LEAVES_PER_SPINE))
    nodes = samples.sample_fabric(spines, LEAVES_PER_SPINE, HOSTS_PER_LEAF, gpus=8)[:count]
    return [dra.without_allocatable(n, GPU) for n in nodes] if dra_gpus else nodes


def cluster_up(directory: Path, count: int, extender_url: str, timeout: float,
               dra_gpus: bool = False) -> Path:
    """``fabricsched cluster up`` with ``count`` sample nodes; returns the kubeconfig. With
    ``dra_gpus`` (``--dra``) the fabricsched scheduler lists no managedResources: claim-only pods
    reach the extender."""
    directory.mkdir(parents=True, exist_ok=True)
    nodes_file = directory / "nodes.yaml"
    # JSON is YAML: written fast, and read by the same loader the command uses.
    nodes_file.write_text(json.dumps(samples.node_list(node_manifests(count, dra_gpus))))
    argv = [sys.executable, "-m", "fabricsched.cli", "cluster", "up", "--dir", str(directory / "cluster"),
            "--nodes", str(nodes_file), "--extender-url", extender_url, "--node-lease-seconds", "0",
            "--timeout", str(timeout), *(["--dra"] if dra_gpus else [])]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"fabricsched cluster up failed:\n{done.stdout}\n{done.stderr}")
    print("   ", done.stdout.strip().splitlines()[0], flush=True)
    return directory / "cluster" / "kubeconfig"


def cluster_down(directory: Path) -> None:
    subprocess.run([sys.executable, "-m", "fabricsched.cli", "cluster", "down", "--dir",
                    str(directory / "cluster")], capture_output=True, timeout=120)


def install(api: rest.Client, kubeconfig: Path, timeout: float, nodes: Sequence[str] = (),
            dra_gpus: bool = False) -> None:
    """The CRDs and a FabricTopology over every sample node (no degraded links); with
    ``dra_gpus``, also the DeviceClass and a GPU ResourceSlice for each of ``nodes``, and the
    topology reads GPUs from them (``spec.draGpus``)."""
    kubectl = [str(binaries.find().kubectl), f"--kubeconfig={kubeconfig}"]
    subprocess.run([*kubectl, "apply", "--server-side", "-f", str(REPO / "crds")],
                   check=True, capture_output=True, timeout=120)
    wait_for("the FabricTopology CRD", lambda: api.request(
        "GET", "/apis/fabricsched.io/v1alpha1/fabrictopologies")[0] == 200, timeout)
    topology = samples.demo_topology(TOPOLOGY)
    topology["spec"]["links"] = []
    if dra_gpus:
        dra.device_class(api)
        each(lambda node: dra.publish(api, node), nodes)
        topology = dra.topology(topology)
    api.call("POST", "/apis/fabricsched.io/v1alpha1/fabrictopologies", topology)


def namespace(api: rest.Client, name: str, timeout: float, dra_gpus: bool = False) -> str:
    """Namespace ``name`` with its default ServiceAccount; with ``dra_gpus``, its GPU claim
    templates."""
    api.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    if dra_gpus:
        dra.templates(api, name)
    account = f"/api/v1/namespaces/{name}/serviceaccounts/default"
    wait_for(f"ServiceAccount {name}/default", lambda: api.request("GET", account)[0] == 200, timeout)
    return name


def pod_spec(scheduler: str, gpus: int, gated: bool = True, node: str | None = None,
             dra_gpus: bool = False, claim: str | None = None) -> dict[str, Any]:
    """A pod asking for ``gpus`` GPUs: the device plugin's resource, or (``dra_gpus``) a claim
    from the namespace's template, or the ResourceClaim ``claim``."""
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "bench:1",
                        "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}],
    }
    if dra_gpus:
        dra.claiming(spec, gpus, claim)
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    if node is not None:
        spec["nodeName"] = node
    return spec


def fill(api: rest.Client, node_names: Sequence[str], per_node: int, dra_gpus: bool = False) -> int:
    """``per_node`` 1-GPU pods bound to every node by ``nodeName`` (no scheduler involved); with
    ``dra_gpus``, each through a claim of its own, allocated one GPU of its node."""
    ns = "fill"
    api.call("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    # Pods need the namespace's ServiceAccount only when they mount its token: they do not.
    def one(i: int) -> None:
        node, name = node_names[i % len(node_names)], f"f-{i:06d}"
        if dra_gpus:
            dra.fill_claim(api, ns, name)
        body = {"metadata": {"name": name},
                "spec": {**pod_spec("default-scheduler", 1, gated=False, node=node, dra_gpus=dra_gpus,
                                    claim=name if dra_gpus else None),
                         "automountServiceAccountToken": False}}
        pod = api.call("POST", f"/api/v1/namespaces/{ns}/pods", body)
        if dra_gpus:
            dra.allocate(api, ns, pod, node, i // len(node_names))
    total = len(node_names) * per_node
    each(one, range(total))
    # kwok writes each pod's Running status after it is created: wait for those writes to end,
    # or they would be measured as the operator's startup and the first requests' latency.
    wait_for("every fill pod Running", lambda: not api.call(
        "GET", f"/api/v1/namespaces/{ns}/pods?fieldSelector=status.phase%21%3DRunning&limit=1")["items"],
        timeout=600, interval=2.0)
    return total


def create_jobs(api: rest.Client, ns: str, prefix: str, count: int, size: int, gpus: int,
                scheduler: str, dra_gpus: bool = False) -> None:
    """``count`` Indexed Jobs of ``size`` gated pods of ``gpus`` GPUs."""
    def one(i: int) -> None:
        body = {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{prefix}-{i:04d}"},
            "spec": {"parallelism": size, "completions": size, "completionMode": "Indexed",
                     "backoffLimit": 0,
                     "template": {"spec": pod_spec(scheduler, gpus, dra_gpus=dra_gpus)}},
        }
        api.call("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body)
    each(one, range(count))


def create_pods(api: rest.Client, ns: str, prefix: str, count: int, gpus: int, scheduler: str,
                dra_gpus: bool = False) -> None:
    def one(i: int) -> None:
        body = {"metadata": {"name": f"{prefix}-{i:05d}"},
                "spec": pod_spec(scheduler, gpus, dra_gpus=dra_gpus)}
        api.call("POST", f"/api/v1/namespaces/{ns}/pods", body)
    each(one, range(count))


def listed(api: rest.Client, path: str, field_selector: str = "") -> list[dict[str, Any]]:
    """Every object of the list at ``path``, page by page."""
    query = "?limit=500" + (f"&fieldSelector={urllib.parse.quote(field_selector)}" if field_selector else "")
    found: list[dict[str, Any]] = []
    page = api.call("GET", path + query)
    while True:
        found += page["items"]
        token = page["metadata"].get("continue")
        if not token:
            return found
        page = api.call("GET", f"{path}{query}&continue={token}")


def pods(api: rest.Client, ns: str) -> list[dict[str, Any]]:
    return listed(api, f"/api/v1/namespaces/{ns}/pods")


def events_of(api: rest.Client, ns: str, reason: str) -> int:
    """How many Events of ``reason`` namespace ``ns`` has (repeats counted)."""
    found = listed(api, f"/api/v1/namespaces/{ns}/events", f"reason={reason}")
    return sum(int(e.get("count") or 1) for e in found)


def ungate(api: rest.Client, ns: str, names: Sequence[str]) -> None:
    each(lambda name: api.call("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}",
                               {"spec": {"schedulingGates": None}}, rest.MERGE_PATCH), names)


def clean(api: rest.Client, ns: str) -> None:
    """Jobs and pods of ``ns`` gone now (no grace): their GPUs are free for the next phase."""
    jobs = api.call("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
    each(lambda j: api.request("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs/{j['metadata']['name']}",
                               {"propagationPolicy": "Orphan"}), jobs)
    each(lambda p: kwok.delete_now(api, ns, p["metadata"]["name"]), pods(api, ns))
    api.request("DELETE", f"/api/v1/namespaces/{ns}")


def settle(api: rest.Client, namespaces: Sequence[str], timeout: float) -> None:
    """Wait until ``namespaces`` are gone and no FabricPlacement is left anywhere, then a little
    longer: the last deletions reach both schedulers and fabricsched before anything is timed."""
    wait_for(f"namespaces {', '.join(namespaces)} gone", lambda: all(
        api.request("GET", f"/api/v1/namespaces/{ns}")[0] == 404 for ns in namespaces), timeout, interval=0.5)
    wait_for("no FabricPlacement left", lambda: not api.call(
        "GET", "/apis/fabricsched.io/v1alpha1/fabricplacements?limit=1")["items"], timeout, interval=0.5)
    time.sleep(3)

"""The tour's Jobs (``make demo``): read from ``examples/demo-jobs``, submitted one at a time, each
bound before the next is submitted, and their FabricPlacements read back once Bound.

The extender plans gangs in the order their first pods arrive: one Job at a time, the tour tells
the same story every run. The polling helper ``wait`` is the demo's one way to wait for a state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fabricsched.api import placement as placement_api
from fabricsched.cluster import errors, processes, rest, tour
from fabricsched.ports import errors as api_errors
from fabricsched.ports import jobs as job_types

JOB_NAME_LABEL = tour.JOB_NAME_LABEL


def wait(what: str, check: Callable[[], Any], timeout: float, alive: processes.ProcessRecord | None = None,
          ) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None and not processes.is_alive(alive):
            raise errors.ComponentFailed(f"{alive.component} exited while waiting for {what}; last lines of "
                                         f"{alive.log}:\n{processes.log_tail(alive.log)}")
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            log = f"; last lines of {alive.log}:\n{processes.log_tail(alive.log)}" if alive else ""
            raise errors.ClusterError(f"timed out after {timeout:.0f} s waiting for {what}{log}")
        time.sleep(0.2)


def load_jobs(folder: Path) -> list[dict[str, Any]]:
    """The Job manifests in ``folder``'s ``*.yaml`` files, in file name order."""
    jobs = []
    for path in sorted(folder.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not doc:
                continue
            if doc.get("kind") != "Job":
                raise errors.ClusterError(f"{path}: expected Job manifests, got kind {doc.get('kind')!r}")
            jobs.append(doc)
    if not jobs:
        raise errors.ClusterError(f"no Job manifest in {folder}/*.yaml")
    return jobs


def gang_size(job: Mapping[str, Any]) -> int:
    """Pods the Job runs at once (``ports.job_types.pods_at_once``), parallelism defaulting to 1."""
    spec = job.get("spec", {})
    completions = spec.get("completions")
    parallelism = int(spec.get("parallelism", 1))
    return job_types.pods_at_once(parallelism, None if completions is None else int(completions))


def pods_of(api: rest.Client, namespace: str, job: str | None = None) -> list[dict[str, Any]]:
    selector = f"?labelSelector={JOB_NAME_LABEL}%3D{job}" if job else ""
    items: list[dict[str, Any]] = api.call("GET", f"/api/v1/namespaces/{namespace}/pods{selector}")["items"]
    return items


def scheduling_trouble(api: rest.Client, namespace: str) -> str:
    events = api.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    warnings = [f"{e['involvedObject'].get('name')}: {e.get('reason')}: {e.get('message', '')[:300]}"
                for e in events if e.get("type") == "Warning"]
    return "\n".join(warnings[-5:]) or "(no Warning events)"


def run_job(api: rest.Client, namespace: str, job: Mapping[str, Any], timeout: float,
             operator: processes.ProcessRecord) -> None:
    name = job["metadata"]["name"]
    api.call("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs",
             {**job, "metadata": {**job["metadata"], "namespace": namespace}})
    size = gang_size(job)

    def bound() -> bool:
        pods = pods_of(api, namespace, name)
        return sum(1 for p in pods if p["spec"].get("nodeName")) >= size

    try:
        wait(f"the {size} pod(s) of Job {namespace}/{name} to be bound", bound, timeout, operator)
    except (errors.ClusterError, api_errors.ApiError) as e:
        raise errors.ClusterError(f"{e}\nrecent warnings in {namespace}:\n"
                                  f"{scheduling_trouble(api, namespace)}") from e


def placements_of(api: rest.Client, namespace: str) -> list[dict[str, Any]]:
    path = f"/apis/{placement_api.API_VERSION}/namespaces/{namespace}/{placement_api.PLURAL}"
    items: list[dict[str, Any]] = api.call("GET", path)["items"]
    return items


def place_jobs(api: rest.Client, namespace: str, timeout: float, jobs: Sequence[Mapping[str, Any]],
               topology_path: str, operator: processes.ProcessRecord, say: Callable[[str], None],
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Submit the Jobs one at a time; returns their Bound FabricPlacements and the topology."""
    api.call("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    wait(f"ServiceAccount {namespace}/default",
          lambda: api.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")[0] == 200,
          timeout)
    for job in jobs:
        say(f"==> Job {namespace}/{job['metadata']['name']}: {gang_size(job)} pod(s), waiting until all "
            "are bound")
        run_job(api, namespace, job, timeout, operator)
    order = [j["metadata"]["name"] for j in jobs]

    def all_bound() -> list[dict[str, Any]] | None:
        found = [p for p in placements_of(api, namespace) if p["metadata"]["name"] in order]
        phases = [(p.get("status") or {}).get("phase") for p in found]
        return found if len(found) == len(order) and all(ph == "Bound" for ph in phases) else None

    placements: list[dict[str, Any]] = wait("every FabricPlacement to reach phase Bound", all_bound,
                                             timeout, operator)
    # Status is written at most once per status interval: wait until it counts every bound
    # pod, so the summary printed next is not a second old.
    used = sum(int(p["spec"]["size"]) * int(p["spec"]["gpusPerPod"]) for p in placements)

    def counted() -> dict[str, Any] | None:
        found: dict[str, Any] = api.call("GET", topology_path)
        gpus = (found.get("status") or {}).get("gpus") or {}
        return found if gpus.get("free") == gpus.get("total", 0) - used else None

    topology = wait(f"FabricTopology status to count {used} GPUs in use", counted,
                     timeout, operator)
    placements.sort(key=lambda p: order.index(p["metadata"]["name"]))
    return placements, topology



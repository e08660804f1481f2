"""Nodes from a file (``--nodes``), checked before anything starts, and created fast.

The file is what ``kubectl get nodes -o yaml`` prints (a ``List`` of Nodes), a
``NodeList``, or one or more ``Node`` documents. Server-populated metadata is dropped.
A Node's status is accepted on create (the API server keeps it, unlike most kinds), so
one POST per node makes it Ready and schedulable; if a server ever drops it, we patch
the status subresource. kwok plays the kubelets: it renews each node's Lease and the Ready
condition's heartbeat, and keeps every condition as written.
"""

from __future__ import annotations

import copy
import datetime
import re
from collections.abc import Iterable, Mapping, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import yaml

from fabricsched.cluster import errors, rest

NODES_PATH = "/api/v1/nodes"

_SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation",
                    "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences")
_LIST_KINDS = ("List", "NodeList")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$")


class _Problem(Exception):
    """One validation failure, located by the caller."""


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _Problem(f"{what} must be a mapping, got {type(value).__name__}")
    return value


def _check_string_map(value: object, what: str) -> None:
    for key, item in _mapping(value, what).items():
        if not isinstance(item, str):
            raise _Problem(f"{what}[{key!r}] must be a string, got {type(item).__name__} {item!r}"
                           " (quote it in YAML)")


def _check_resources(value: object, what: str) -> None:
    for key, item in _mapping(value, what).items():
        if isinstance(item, bool) or not isinstance(item, str | int | float) \
                or not _QUANTITY.match(str(item)):
            raise _Problem(f"{what}[{key!r}] is not a resource quantity: {item!r}")


def _check_node(node: object) -> str:
    """Validate one Node manifest; returns its name."""
    node = _mapping(node, "a Node")
    if node.get("kind") != "Node":
        raise _Problem(f"unknown kind {node.get('kind')!r} (expected Node, NodeList or List)")
    if node.get("apiVersion", "v1") != "v1":
        raise _Problem(f"apiVersion must be v1, got {node.get('apiVersion')!r}")
    metadata = _mapping(node.get("metadata"), "metadata")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise _Problem("missing metadata.name")
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise _Problem(f"metadata.name {name!r} is not a valid DNS subdomain")
    for key in ("labels", "annotations"):
        if metadata.get(key) is not None:
            _check_string_map(metadata[key], f"metadata.{key}")
    spec = _mapping(node.get("spec") or {}, "spec")
    taints = spec.get("taints") or []
    if not isinstance(taints, list):
        raise _Problem("spec.taints must be a list")
    for i, taint in enumerate(taints):
        taint = _mapping(taint, f"spec.taints[{i}]")
        if not taint.get("key") or taint.get("effect") not in _TAINT_EFFECTS:
            raise _Problem(f"spec.taints[{i}] needs a key and an effect in {', '.join(_TAINT_EFFECTS)}")
    status = _mapping(node.get("status") or {}, "status")
    if "capacity" not in status:
        raise _Problem("missing status.capacity (a node without capacity can hold no pod)")
    _check_resources(status["capacity"], "status.capacity")
    if status.get("allocatable") is not None:
        _check_resources(status["allocatable"], "status.allocatable")
    conditions = status.get("conditions") or []
    if not isinstance(conditions, list):
        raise _Problem("status.conditions must be a list")
    for i, condition in enumerate(conditions):
        condition = _mapping(condition, f"status.conditions[{i}]")
        if not condition.get("type") or condition.get("status") not in ("True", "False", "Unknown"):
            raise _Problem(f"status.conditions[{i}] needs a type and a status True, False or Unknown")
    return name


def parse(text: str, source: str) -> list[dict[str, Any]]:
    """The Node manifests in ``text``, validated; ``source`` names the file in errors."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        raise errors.NodesFileError(f"{source}: not valid YAML: {e}") from e
    found: list[dict[str, Any]] = []
    where: dict[str, str] = {}
    for index, document in enumerate(documents, start=1):
        if document is None:
            continue
        if isinstance(document, Mapping) and document.get("kind") in _LIST_KINDS:
            items = document.get("items")
            if not isinstance(items, list):
                raise errors.NodesFileError(f"{source}: document {index}: items must be a list")
            located = [(f"document {index}, items[{i}]", item) for i, item in enumerate(items)]
        else:
            located = [(f"document {index}", document)]
        for location, node in located:
            try:
                name = _check_node(node)
            except _Problem as e:
                raise errors.NodesFileError(f"{source}: {location}: {e}") from None
            if name in where:
                raise errors.NodesFileError(
                    f"{source}: {location}: node {name!r} already defined at {where[name]}")
            where[name] = location
            found.append(dict(node))
    if not found:
        raise errors.NodesFileError(f"{source}: no Node found")
    return found


def load(path: Path) -> list[dict[str, Any]]:
    """Read and validate a nodes file (raises ``NodesFileError`` naming the file and document)."""
    try:
        text = path.read_text()
    except OSError as e:
        raise errors.NodesFileError(f"{path}: cannot read: {e.strerror}") from e
    return parse(text, str(path))


def _timestamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def prepare(node: Mapping[str, Any], now: datetime.datetime) -> dict[str, Any]:
    """The manifest to POST: server-owned metadata dropped, allocatable and Ready filled in.

    A Ready condition the file states is kept as is (a NotReady node stays NotReady);
    a missing one is added as True, heartbeat ``now``.
    """
    manifest = copy.deepcopy(dict(node))
    manifest["apiVersion"], manifest["kind"] = "v1", "Node"
    metadata = manifest["metadata"] = dict(manifest["metadata"])
    for key in _SERVER_METADATA:
        metadata.pop(key, None)
    status = manifest["status"] = dict(manifest.get("status") or {})
    status["capacity"] = {k: str(v) for k, v in status["capacity"].items()}
    allocatable = status.get("allocatable") or status["capacity"]
    status["allocatable"] = {k: str(v) for k, v in allocatable.items()}
    conditions = list(status.get("conditions") or [])
    if not any(c.get("type") == "Ready" for c in conditions):
        stamp = _timestamp(now)
        conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                           "message": "fabricsched local cluster: kwok plays the kubelet, status as declared",
                           "lastHeartbeatTime": stamp, "lastTransitionTime": stamp})
    status["conditions"] = conditions
    return manifest


def _create_one(client: rest.Client, manifest: Mapping[str, Any]) -> str:
    created = client.call("POST", NODES_PATH, manifest)
    name = str(created["metadata"]["name"])
    if not (created.get("status") or {}).get("allocatable"):
        client.call("PATCH", f"{NODES_PATH}/{name}/status", {"status": manifest["status"]},
                    rest.MERGE_PATCH)
    return name


def create(client: rest.Client, nodes: Iterable[Mapping[str, Any]], now: datetime.datetime,
           workers: int = 16) -> list[str]:
    """Create every node concurrently; returns their names in input order.

    All requests are attempted; the first failure is raised after the others finish, so
    the caller knows the API server is not left with requests in flight.
    """
    manifests = [prepare(n, now) for n in nodes]
    with futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="create-node") as pool:
        jobs = [pool.submit(_create_one, client, m) for m in manifests]
        futures.wait(jobs)
    return [job.result() for job in jobs]


def delete(client: rest.Client, names: Sequence[str], workers: int = 16) -> None:
    """Delete nodes; already gone is fine."""

    def one(name: str) -> None:
        status, data = client.request("DELETE", f"{NODES_PATH}/{name}")
        if status >= 400 and status != 404:
            raise errors.api_error("DELETE", f"{NODES_PATH}/{name}", status, str(data))

    with futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="delete-node") as pool:
        for job in [pool.submit(one, n) for n in names]:
            job.result()

"""The simulator's YAML inputs: nodes as ``kubectl get nodes -o yaml`` prints them, and a FabricTopology.

Errors point at the line of the offending key: the YAML is composed once to keep every node's
position, then validated, and a validation error's location is walked back to its line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
import yaml

from fabricsched.api import topology as api
from fabricsched.sim import errors

# libyaml's loader when PyYAML was built with it: a 1,000-node list parses ~10x faster.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class NodeManifest:
    """One Node object as read, with the line it starts on."""

    manifest: dict[str, Any]
    line: int


def _documents(path: Path) -> list[tuple[Any, yaml.Node]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise errors.SimInputError(path, 0, f"cannot read: {e.strerror or e}") from e
    try:
        nodes = [n for n in yaml.compose_all(text, Loader=_LOADER) if n is not None]
        datas = [d for d in yaml.load_all(text, Loader=_LOADER) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        raise errors.SimInputError(path, line, f"not valid YAML: {getattr(e, 'problem', e)}") from e
    return list(zip(datas, nodes, strict=True))


def _line_of(node: yaml.Node, loc: Sequence[int | str]) -> int:
    """Line of the deepest YAML node along a validation error's location."""
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = [v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key]
            if not match:
                break
            node = match[0]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            break
    return int(node.start_mark.line) + 1


def read_nodes(path: str | Path) -> list[NodeManifest]:
    """Node objects from a NodeList / List (``kubectl get nodes -o yaml``) or from Node documents."""
    path = Path(path)
    found: list[NodeManifest] = []
    for data, node in _documents(path):
        if not isinstance(data, dict):
            raise errors.SimInputError(path, _line_of(node, []), "expected a Node or a NodeList object")
        kind = data.get("kind")
        if kind in ("List", "NodeList"):
            items = data.get("items") or []
            if not isinstance(items, list):
                raise errors.SimInputError(path, _line_of(node, ["items"]), "items must be a list")
            entries = [(item, _line_of(node, ["items", i])) for i, item in enumerate(items)]
        else:
            entries = [(data, _line_of(node, []))]
        for item, line in entries:
            if not isinstance(item, dict) or item.get("kind", "Node") != "Node":
                raise errors.SimInputError(path, line, "expected a Node object")
            name = (item.get("metadata") or {}).get("name")
            if not isinstance(name, str) or not name:
                raise errors.SimInputError(path, line, "Node without metadata.name")
            found.append(NodeManifest(item, line))
    if not found:
        raise errors.SimInputError(path, 0, "no Node objects")
    seen: dict[str, int] = {}
    for entry in found:
        name = entry.manifest["metadata"]["name"]
        if name in seen:
            raise errors.SimInputError(
                path, entry.line, f"node {name!r} already defined on line {seen[name]}")
        seen[name] = entry.line
    return found


def read_topology(path: str | Path) -> api.FabricTopologySpec:
    """The spec of the file's one FabricTopology."""
    path = Path(path)
    documents = [(d, n) for d, n in _documents(path)
                 if isinstance(d, dict) and d.get("kind") == api.KIND]
    if len(documents) != 1:
        raise errors.SimInputError(path, 0, f"expected exactly one {api.KIND}, found {len(documents)}")
    data, node = documents[0]
    if data.get("apiVersion") != api.API_VERSION:
        raise errors.SimInputError(
            path, _line_of(node, ["apiVersion"]),
            f"apiVersion {data.get('apiVersion')!r}; expected {api.API_VERSION}")
    try:
        return api.FabricTopologySpec.model_validate(data.get("spec") or {})
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        line = _line_of(node, ["spec", *first["loc"]])
        raise errors.SimInputError(path, line, f"spec.{where}: {first['msg']}") from e

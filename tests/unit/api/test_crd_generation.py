"""The generated CRDs: committed copy is current, schemas are structural, kubectl-friendly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fabricsched.api import crd

FORBIDDEN_KEYS = ("$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "title", "const", "uniqueItems")


def schema_of(doc: dict[str, Any]) -> dict[str, Any]:
    (version,) = doc["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path (``.spec.tiers[]`` style, ``{}`` for map values)."""
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}{{}}")
    if "items" in schema:
        yield from nodes(schema["items"], f"{path}[]")


def node_at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    found = dict(nodes(schema))
    assert path in found, f"no schema node {path}"
    return found[path]


@pytest.fixture(params=[r.name for r in crd.RESOURCES])
def committed(request: pytest.FixtureRequest, committed_crds: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return committed_crds[request.param]


def test_committed_crds_equal_the_generator_output(crd_dir: Path) -> None:
    assert crd.stale(crd_dir) == [], "run: python -m fabricsched.api.crd --write crds/"


def test_check_fails_with_a_diff_on_a_stale_directory_and_passes_after_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert crd.main(["--check", str(tmp_path)]) == 1
    assert crd.main(["--write", str(tmp_path)]) == 0
    capsys.readouterr()
    assert crd.main(["--check", str(tmp_path)]) == 0
    path = tmp_path / crd.TOPOLOGY.file_name
    path.write_text(path.read_text().replace("maxItems: 8", "maxItems: 9"))
    assert crd.main(["--check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "-                maxItems: 9" in out and "+                maxItems: 8" in out


def test_every_resource_is_written_once_under_its_crd_name(tmp_path: Path) -> None:
    written = crd.write(tmp_path)
    assert sorted(p.name for p in written) == [
        "fabricplacements.fabricsched.io.yaml", "fabrictopologies.fabricsched.io.yaml",
    ]
    for path in written:
        assert yaml.safe_load(path.read_text())["metadata"]["name"] == path.name.removesuffix(".yaml")


def test_no_json_schema_only_keyword_is_left(committed: dict[str, Any]) -> None:
    for path, node in nodes(schema_of(committed)):
        left = [key for key in FORBIDDEN_KEYS if key in node]
        assert not left, f"{path} keeps {left}"
    assert "&id" not in yaml.safe_dump(committed), "YAML anchors make the CRD hard to read"


def test_every_schema_node_is_structural(committed: dict[str, Any]) -> None:
    for path, node in nodes(schema_of(committed)):
        assert isinstance(node.get("type"), str), f"{path} has no single type"
        if node["type"] == "object":
            assert not ("properties" in node and "additionalProperties" in node), path
            assert (
                "properties" in node or "additionalProperties" in node or path == ".metadata"
            ), f"{path}: an object without fields would prune everything"
        if node["type"] == "array":
            assert "items" in node, f"{path}: array without items"
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            if bound in node:
                assert node[bound] is True, f"{path}: OpenAPI v3.0 wants a boolean {bound}"
                assert ("minimum" if bound == "exclusiveMinimum" else "maximum") in node, path


def test_list_map_keys_are_required_fields_of_the_items(committed: dict[str, Any]) -> None:
    for path, node in nodes(schema_of(committed)):
        if node.get("x-kubernetes-list-type") == "map":
            item = node["items"]
            for key in node["x-kubernetes-list-map-keys"]:
                assert key in item["properties"], f"{path}: map key {key} is no field"
                assert key in item.get("required", []) or "default" in item["properties"][key], path
        if node.get("x-kubernetes-list-type") == "set":
            assert node["items"]["type"] in ("string", "integer", "number", "boolean"), path


def test_defaults_validate_against_their_own_schema(committed: dict[str, Any]) -> None:
    # The API server rejects a CRD whose default breaks its own bounds or enum.
    for path, node in nodes(schema_of(committed)):
        if "default" not in node:
            continue
        value = node["default"]
        if "enum" in node:
            assert value in node["enum"], path
        if node["type"] == "object":
            assert value == {}, f"{path}: object defaults are {{}} so nested defaults apply"
        if "minimum" in node:
            assert value > node["minimum"] if node.get("exclusiveMinimum") else value >= node["minimum"], path
        if "minLength" in node:
            assert len(value) >= node["minLength"], path


def test_every_spec_field_has_a_description_for_kubectl_explain(committed: dict[str, Any]) -> None:
    for path, node in nodes(schema_of(committed)):
        if path.startswith(".spec") or path.startswith(".status"):
            assert node.get("description") or path.endswith(("[]", "{}")), f"{path} has no description"


@pytest.mark.parametrize(
    "path",
    [".spec.tiers", ".spec.tiers[].name", ".spec.tiers[].nodeLabel", ".spec.links", ".spec.links[].tier",
     ".spec.railDevices"],
    ids=lambda p: f"{p} is bounded for the CEL cost estimate",
)
def test_what_the_topology_cel_rules_traverse_is_bounded(
    committed_crds: dict[str, dict[str, Any]], path: str
) -> None:
    node = node_at(schema_of(committed_crds[crd.TOPOLOGY.name]), path)
    assert "maxItems" in node if node["type"] == "array" else "maxLength" in node


def test_topology_cross_field_rules_are_in_the_crd(committed_crds: dict[str, dict[str, Any]]) -> None:
    schema = schema_of(committed_crds[crd.TOPOLOGY.name])
    tier_rules = [r["message"] for r in node_at(schema, ".spec.tiers")["x-kubernetes-validations"]]
    spec_rules = {r["fieldPath"]: r for r in node_at(schema, ".spec")["x-kubernetes-validations"]}
    assert tier_rules == ["tier names must be unique", "tier nodeLabels must be unique"]
    assert set(spec_rules) == {".railDevices", ".links"}
    assert "self.rails" in spec_rules[".railDevices"]["rule"]


def test_names_scope_and_subresources(committed_crds: dict[str, dict[str, Any]]) -> None:
    topology = committed_crds["fabrictopologies.fabricsched.io"]["spec"]
    placement = committed_crds["fabricplacements.fabricsched.io"]["spec"]
    assert (topology["scope"], topology["names"]["shortNames"]) == ("Cluster", ["ft"])
    assert (placement["scope"], placement["names"]["shortNames"]) == ("Namespaced", ["fp"])
    assert topology["names"]["categories"] == placement["names"]["categories"] == ["fabricsched"]
    for spec in (topology, placement):
        (version,) = spec["versions"]
        assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
        assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize(
    ("resource", "columns"),
    [
        (crd.TOPOLOGY, ["Nodes", "GPUs-Free", "GPUs-Total", "Degraded", "Ready", "Age"]),
        (crd.PLACEMENT, ["Gang", "Size", "Required", "Phase", "Slowdown", "Degraded", "Age"]),
    ],
    ids=["topology prints capacity and health", "placement prints the plan and its phase"],
)
def test_printer_columns_point_at_real_fields(
    committed_crds: dict[str, dict[str, Any]], resource: crd.Resource, columns: list[str]
) -> None:
    (version,) = committed_crds[resource.name]["spec"]["versions"]
    printed = version["additionalPrinterColumns"]
    assert [c["name"] for c in printed if c.get("priority", 0) == 0] == columns
    schema = version["schema"]["openAPIV3Schema"]
    types = {"integer": "integer", "number": "number", "string": "string", "boolean": "boolean"}
    for column in printed:
        json_path = column["jsonPath"]
        assert "," not in json_path and " " not in json_path, f"{column['name']}: one JSONPath only"
        if json_path == ".metadata.creationTimestamp":
            continue
        field_path = json_path.replace('[?(@.type=="Ready")]', "[]")
        node = node_at(schema, field_path)
        assert types[column["type"]] == node["type"], column["name"]

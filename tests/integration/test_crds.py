"""The generated CRDs on a real API server: accepted, defaulting, validating, explainable.

Each rule that the pydantic models enforce is also checked here against the API server,
so the two layers are known to agree (a spec one accepts and the other refuses would make
the operator and kubectl disagree about what a valid topology is).
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterkit import Cluster
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from waiting import wait_for

from fabricsched.api import crd, placement, topology

MANIFESTS = Path(__file__).parents[1] / "unit" / "api" / "manifests"
GROUP, VERSION = topology.GROUP, topology.VERSION


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((MANIFESTS / name).read_text(encoding="utf-8"))
    return data


def kubectl_out(cluster: Cluster, *args: str) -> str:
    return cluster.kubectl(*args).stdout


def refusal(error: ApiException) -> str:
    """The API server's message (the body is a JSON Status)."""
    message: str = json.loads(error.body or "{}")["message"]
    return message


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def crds(cluster: Cluster, apiextensions: Any, repo_root: Path) -> list[str]:
    """Both CRDs applied from the committed files, and Established."""
    kubectl_out(cluster, "apply", "--server-side", "--force-conflicts", "-f", str(repo_root / "crds"))
    names = [r.name for r in crd.RESOURCES]

    def established() -> bool:
        for name in names:
            conditions = apiextensions.read_custom_resource_definition(name).status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
        return True

    wait_for("both CRDs to be Established", established)
    return names


@pytest.fixture
def topologies(crds: list[str], custom_objects: Any) -> Iterator[Callable[[dict[str, Any]], dict[str, Any]]]:
    """Creates FabricTopology objects under fresh names; deletes them afterwards (they are
    cluster-scoped, and other tests' operators must not see strays)."""
    created: list[str] = []

    def create(manifest: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(manifest)
        body["metadata"] = {"name": unique(body.get("metadata", {}).get("name", "ft"))}
        obj: dict[str, Any] = custom_objects.create_cluster_custom_object(
            GROUP, VERSION, topology.PLURAL, body
        )
        created.append(obj["metadata"]["name"])
        return obj

    yield create
    for name in created:
        try:
            custom_objects.delete_cluster_custom_object(GROUP, VERSION, topology.PLURAL, name)
        except ApiException as e:
            if e.status != 404:
                raise


def test_both_crds_are_established_under_their_names(crds: list[str], apiextensions: Any) -> None:
    accepted = {n: apiextensions.read_custom_resource_definition(n).status.accepted_names for n in crds}
    assert accepted["fabrictopologies.fabricsched.io"].short_names == ["ft"]
    assert accepted["fabricplacements.fabricsched.io"].short_names == ["fp"]
    assert accepted["fabrictopologies.fabricsched.io"].categories == ["fabricsched"]


def test_the_design_example_reads_back_with_defaults_applied(
    topologies: Callable[[dict[str, Any]], dict[str, Any]], custom_objects: Any, cluster: Cluster
) -> None:
    manifest = load("fabrictopology-ib-east.yaml")
    created = topologies({k: v for k, v in manifest.items() if k != "status"})
    name = created["metadata"]["name"]
    got = custom_objects.get_cluster_custom_object(GROUP, VERSION, topology.PLURAL, name)
    assert got["spec"]["tiers"][1]["oversubscription"] == 1, "the spine tier's default"
    assert got["spec"]["links"][0]["reason"] == "4 of 16 uplinks flapping"
    spec = topology.FabricTopologySpec
    assert spec.model_validate(got["spec"]) == spec.model_validate(manifest["spec"])

    custom_objects.patch_cluster_custom_object_status(
        GROUP, VERSION, topology.PLURAL, name, {"status": manifest["status"]}
    )
    got = custom_objects.get_cluster_custom_object(GROUP, VERSION, topology.PLURAL, name)
    status = topology.FabricTopologyStatus
    assert status.model_validate(got["status"]) == status.model_validate(manifest["status"])
    row = kubectl_out(cluster, "get", "ft", name, "--no-headers").split()
    assert row[:5] == [name, "96", "512", "768", "2"], "Nodes, GPUs-Free, GPUs-Total, Degraded"


def test_a_minimal_spec_is_completed_by_the_server_defaults(
    topologies: Callable[[dict[str, Any]], dict[str, Any]],
) -> None:
    created = topologies({
        "apiVersion": topology.API_VERSION, "kind": topology.KIND, "metadata": {"name": "minimal"},
        "spec": {"tiers": [{"name": "leaf", "nodeLabel": "fabric.topograph.run/tier-0"}]},
    })
    assert created["spec"] == {
        "gpuResource": "nvidia.com/gpu",
        "rails": 1,
        "gpuBandwidthGbps": 400,
        "health": {
            "nodeConditions": ["FabricLinkDegraded"], "conditionPresets": ["nvsentinel"],
            "dra": {"enabled": True, "rdmaDeviceAttribute": "dra.net/rdmaDevice"},
            "degradedCapacity": 0.5, "recoverAfterSeconds": 300,
        },
        "tiers": [{"name": "leaf", "nodeLabel": "fabric.topograph.run/tier-0", "oversubscription": 1}],
    }


LEAF = {"name": "leaf", "nodeLabel": "t0"}
SPINE = {"name": "spine", "nodeLabel": "t1"}
LINK = {"tier": "leaf", "domain": "l07", "state": "degraded"}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"tiers": "leaf"}, "spec.tiers in body must be of type array"),
        ({"tiers": [{**LEAF, "oversubscription": 0}]},
         "spec.tiers[0].oversubscription in body should be greater than 0"),
        ({"tiers": [{**LEAF, "oversubscription": -1.5}]}, "should be greater than 0"),
        ({"tiers": [LEAF, {**SPINE, "name": "leaf"}]},
         'spec.tiers: Invalid value: tier names must be unique'),
        ({"tiers": [LEAF, {**SPINE, "nodeLabel": "t0"}]}, "tier nodeLabels must be unique"),
        ({"tiers": [LEAF], "links": [{**LINK, "capacity": 1.5}]},
         "spec.links[0].capacity in body should be less than or equal to 1"),
        ({"tiers": [LEAF], "links": [{**LINK, "state": "broken"}]},
         'spec.links[0].state: Unsupported value: "broken": supported values: "healthy", "degraded", "down"'),
        ({"tiers": [LEAF], "links": [{**LINK, "tier": "core"}]},
         'spec.links: Invalid value: every links[].tier must name a tier declared in spec.tiers'),
        ({"tiers": [LEAF], "rails": 4, "railDevices": ["mlx5_0", "mlx5_1"]},
         'spec.railDevices: Invalid value: railDevices must name one device per rail'),
        ({"tiers": [LEAF], "health": {"conditionPresets": ["nvsentinel-typo"]}},
         'spec.health.conditionPresets[0]: Unsupported value: "nvsentinel-typo": '
         'supported values: "nvsentinel"'),
        ({"tiers": [LEAF], "health": {"dra": {"rdmaDeviceAttribute": "dra.net/rdma device"}}},
         "spec.health.dra.rdmaDeviceAttribute in body should match"),
    ],
    ids=[
        "tiers that are not a list are refused",
        "oversubscription 0 is refused",
        "negative oversubscription is refused",
        "duplicate tier names are refused",
        "duplicate tier node labels are refused",
        "link capacity above 1 is refused",
        "an unknown link state is refused",
        "a link naming an undeclared tier is refused",
        "rail devices that do not match the rail count are refused",
        "an unknown condition preset is refused",
        "a device attribute that is no qualified name is refused",
    ],
)
def test_invalid_specs_are_refused_with_a_readable_message(
    topologies: Callable[[dict[str, Any]], dict[str, Any]], spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiException) as caught:
        topologies({"apiVersion": topology.API_VERSION, "kind": topology.KIND,
                    "metadata": {"name": "invalid"}, "spec": spec})
    assert caught.value.status == 422, caught.value.body
    # Kubernetes before 1.37 names the value's type in a CEL refusal ("Invalid value: "array": ...");
    # 1.37 leaves it out. The field and the rule's message are what a reader needs either way.
    assert message in re.sub(r'Invalid value: "(array|object)": ', "Invalid value: ", refusal(caught.value))
    with pytest.raises(ValidationError):
        topology.FabricTopologySpec.model_validate(spec)


def test_kubectl_explain_prints_the_tier_descriptions(crds: list[str], cluster: Cluster) -> None:
    def explained() -> str:
        # The OpenAPI document is published a moment after the CRD is Established.
        result = cluster.kubectl("explain", "fabrictopology.spec.tiers", check=False)
        return " ".join(result.stdout.split()) if result.returncode == 0 else ""

    text: str = wait_for("kubectl explain to know FabricTopology", explained)
    described = [topology.FabricTopologySpec.model_fields["tiers"].description]
    described += [f.description for f in topology.TierSpec.model_fields.values()]
    for description in described:
        assert description is not None and " ".join(description.split()) in text
    for field in ("name", "nodeLabel", "oversubscription"):
        assert f"{field} <" in text


def test_the_design_placement_example_round_trips_with_its_status(
    crds: list[str], namespace: str, custom_objects: Any, cluster: Cluster
) -> None:
    manifest = load("fabricplacement-b.yaml")
    # The example holds the tier in its first shape (name + policy), still read; today's shape
    # is written, and only it has columns (Required; Preferred with -o wide).
    assert placement.FabricPlacement.model_validate(manifest).spec.tier.constraint() == ("leaf", False, None)
    manifest["spec"]["tier"] = {"required": "leaf"}
    body = {k: v for k, v in manifest.items() if k != "status"}
    body["metadata"] = {"name": "b", "namespace": namespace}
    custom_objects.create_namespaced_custom_object(GROUP, VERSION, namespace, placement.PLURAL, body)
    custom_objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, placement.PLURAL, "b", {"status": manifest["status"]}
    )
    got = custom_objects.get_namespaced_custom_object(GROUP, VERSION, namespace, placement.PLURAL, "b")
    expected = placement.FabricPlacement.model_validate(manifest)
    assert placement.FabricPlacementSpec.model_validate(got["spec"]) == expected.spec
    assert placement.FabricPlacementStatus.model_validate(got["status"]) == expected.status
    row = kubectl_out(cluster, "get", "fp", "b", "-n", namespace, "--no-headers").split()
    assert row[:7] == ["b", "b", "12", "leaf", "Reserved", "1.07", "false"]


def test_a_placement_with_a_rank_beyond_its_size_is_refused(
    crds: list[str], namespace: str, custom_objects: Any
) -> None:
    body = load("fabricplacement-b.yaml")
    del body["status"]
    body["metadata"] = {"name": "b", "namespace": namespace}
    body["spec"]["size"] = 4
    with pytest.raises(ApiException) as caught:
        custom_objects.create_namespaced_custom_object(GROUP, VERSION, namespace, placement.PLURAL, body)
    assert caught.value.status == 422
    assert "spec.ranks" in refusal(caught.value)
    assert "every ranks[].rank must be below size" in refusal(caught.value)

"""The sample fabric generator and the demo files written from it."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import yaml

from fabricsched.api import topology as api
from fabricsched.cluster import nodes, samples

LEAF, SPINE = samples.TOPOGRAPH.leaf, samples.TOPOGRAPH.spine


def test_shape_counts_hosts_per_leaf_and_leaves_per_spine() -> None:
    manifests = samples.sample_fabric(spines=3, leaves_per_spine=2, hosts_per_leaf=5, gpus=4)
    assert len(manifests) == 30
    per_leaf = collections.Counter(m["metadata"]["labels"][LEAF] for m in manifests)
    assert set(per_leaf.values()) == {5} and len(per_leaf) == 6
    leaves_per_spine = collections.defaultdict(set)
    for m in manifests:
        labels = m["metadata"]["labels"]
        leaves_per_spine[labels[SPINE]].add(labels[LEAF])
    assert {s: len(v) for s, v in leaves_per_spine.items()} == {"s1": 2, "s2": 2, "s3": 2}


def test_every_host_declares_its_gpus_and_is_a_valid_node() -> None:
    manifests = samples.sample_fabric(gpus=4)
    for m in manifests:
        assert m["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
        assert m["status"]["capacity"]["nvidia.com/gpu"] == "4"
        assert m["status"]["allocatable"] == m["status"]["capacity"]
    assert len(nodes.parse(yaml.safe_dump(samples.node_list(manifests)), "sample")) == 32


def test_names_follow_fabric_order() -> None:
    manifests = samples.sample_fabric(spines=2, leaves_per_spine=1, hosts_per_leaf=2)
    assert [(m["metadata"]["name"], m["metadata"]["labels"][LEAF]) for m in manifests] == [
        ("gpu-001", "l01"), ("gpu-002", "l01"), ("gpu-003", "l02"), ("gpu-004", "l02")]


def test_a_custom_label_preset_names_the_tiers() -> None:
    preset = samples.LabelPreset(leaf="example.com/leaf", spine="example.com/spine")
    labels = samples.sample_fabric(1, 1, 1, label_preset=preset)[0]["metadata"]["labels"]
    assert labels["example.com/leaf"] == "l01" and labels["example.com/spine"] == "s1"
    assert LEAF not in labels


def test_an_empty_dimension_is_an_error() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        samples.sample_fabric(hosts_per_leaf=0)


@pytest.mark.parametrize("file_name", ["demo-nodes.yaml", "demo-topology.yaml"])
def test_demo_examples_are_what_the_generator_writes(repo_root: Path, file_name: str) -> None:
    written = (repo_root / "examples" / file_name).read_text()
    assert written == samples.demo_files()[file_name], (
        "regenerate with: python -m fabricsched.cluster.samples --write examples/")


def test_demo_topology_is_a_valid_fabric_topology_for_the_demo_nodes(repo_root: Path) -> None:
    manifest = yaml.safe_load((repo_root / "examples" / "demo-topology.yaml").read_text())
    spec = api.FabricTopologySpec.model_validate(manifest["spec"])
    assert [(t.name, t.oversubscription) for t in spec.tiers] == [("leaf", 2.0), ("spine", 1.0)]
    demo_nodes = nodes.load(repo_root / "examples" / "demo-nodes.yaml")
    assert len(demo_nodes) == 32
    leaves = {n["metadata"]["labels"][spec.tiers[0].node_label] for n in demo_nodes}
    [override] = spec.links
    assert override.state == api.LinkState.DEGRADED and override.domain in leaves

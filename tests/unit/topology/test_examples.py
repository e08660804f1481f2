from __future__ import annotations

import pathlib

import pytest
import yaml

import builders
from fabricsched.api import topology as api
from fabricsched.topology import building

EXAMPLES = pathlib.Path(__file__).parents[3] / "examples"
NODES = {
    "topology-topograph.yaml": builders.make_node("n").leaf("l07").spine("s1"),
    "topology-nvidia.yaml": builders.make_node("n").nvidia("su03", "sp1", "c1")
    .label("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),
    "topology-aws.yaml": builders.make_node("n").aws("nn-1", "nn-2", "nn-3"),
    "topology-gke.yaml": builders.make_node("n").gke("b1", "sb1", "h1")
    .label("cloud.google.com/gke-accelerator", "nvidia-h200-141gb"),
}


@pytest.mark.parametrize("name", sorted(NODES), ids=lambda n: f"{n} selects and places its labelled node")
def test_example_topologies_build_a_fabric_from_their_provider_labels(name: str) -> None:
    manifest = yaml.safe_load((EXAMPLES / name).read_text())
    assert manifest["kind"] == api.KIND
    spec = api.FabricTopologySpec.model_validate(manifest["spec"])
    result = building.build_fabric(spec, [NODES[name].gpus(8).info()], {})
    assert result.conflicts == ()
    assert list(result.fabric.hosts) == ["n"]

"""Reading a ``--nodes`` file: accepted shapes, clear errors, and the manifest we POST."""

from __future__ import annotations

import datetime
import textwrap
from pathlib import Path

import pytest
import yaml

from fabricsched.cluster import errors, nodes, samples

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)

KUBECTL_LIST = textwrap.dedent("""\
    apiVersion: v1
    items:
    - apiVersion: v1
      kind: Node
      metadata:
        creationTimestamp: "2024-05-01T12:00:00Z"
        labels: {kubernetes.io/hostname: gpu-001, fabric.topograph.run/tier-0: l01}
        managedFields: [{manager: kubelet, operation: Update}]
        name: gpu-001
        resourceVersion: "4711"
        uid: 0b7c4a6e-0000-0000-0000-000000000001
      spec:
        taints: [{key: dedicated, value: training, effect: NoSchedule}]
      status:
        allocatable: {cpu: 94, memory: 1000Gi, nvidia.com/gpu: "8", pods: "110"}
        capacity: {cpu: "96", memory: 1Ti, nvidia.com/gpu: "8", pods: "110"}
        conditions:
        - {type: Ready, status: "False", reason: KubeletNotReady}
    kind: List
    metadata: {resourceVersion: ""}
    """)


def test_kubectl_list_output_is_accepted_and_server_metadata_dropped() -> None:
    [node] = nodes.parse(KUBECTL_LIST, "nodes.yaml")
    manifest = nodes.prepare(node, NOW)
    assert set(manifest["metadata"]) == {"name", "labels"}
    assert manifest["spec"]["taints"] == [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}]
    assert manifest["status"]["allocatable"]["cpu"] == "94"  # numbers become quantities (strings)


def test_a_stated_ready_condition_is_kept_as_declared() -> None:
    [node] = nodes.parse(KUBECTL_LIST, "nodes.yaml")
    conditions = nodes.prepare(node, NOW)["status"]["conditions"]
    assert [(c["type"], c["status"]) for c in conditions] == [("Ready", "False")]


def test_missing_ready_condition_and_allocatable_are_filled_in() -> None:
    text = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {capacity: {nvidia.com/gpu: 4}}\n"
    manifest = nodes.prepare(nodes.parse(text, "f")[0], NOW)
    assert manifest["status"]["allocatable"] == {"nvidia.com/gpu": "4"}
    [ready] = manifest["status"]["conditions"]
    assert (ready["type"], ready["status"]) == ("Ready", "True")
    assert ready["lastHeartbeatTime"] == "2026-01-02T03:04:05Z"


def test_prepare_does_not_modify_its_input() -> None:
    [node] = nodes.parse(KUBECTL_LIST, "nodes.yaml")
    before = yaml.safe_dump(node)
    nodes.prepare(node, NOW)
    assert yaml.safe_dump(node) == before


def test_node_documents_and_node_lists_mix_in_one_file() -> None:
    node_list = {"apiVersion": "v1", "kind": "NodeList", "items": samples.sample_fabric(1, 1, 2)}
    single = samples.sample_fabric(1, 1, 3)[2]
    text = yaml.safe_dump_all([node_list, None, single])
    assert [n["metadata"]["name"] for n in nodes.parse(text, "f")] == ["gpu-001", "gpu-002", "gpu-003"]


_NODE = "apiVersion: v1\nkind: Node\n"
_CAPACITY = "status: {capacity: {cpu: '1'}}\n"

MALFORMED = [
    pytest.param("kind: Pod\nmetadata: {name: p}\n", "document 1: unknown kind 'Pod'", id="unknown kind"),
    pytest.param(_NODE + "metadata: {labels: {a: b}}\n" + _CAPACITY, "document 1: missing metadata.name",
                 id="missing metadata name"),
    pytest.param(_NODE + "metadata: {name: n1}\nstatus: {capacity: [cpu]}\n",
                 "document 1: status.capacity must be a mapping, got list", id="capacity not a mapping"),
    pytest.param(_NODE + "metadata: {name: n1}\n", "missing status.capacity", id="no capacity at all"),
    pytest.param(_NODE + "metadata: {name: n1}\nstatus: {capacity: {cpu: lots}}\n",
                 "status.capacity['cpu'] is not a resource quantity", id="capacity not a quantity"),
    pytest.param(_NODE + "metadata: {name: n1, labels: {nvidia.com/gpu.present: true}}\n" + _CAPACITY,
                 "must be a string, got bool", id="unquoted boolean label value"),
    pytest.param(_NODE + "metadata: {name: Bad_Name}\n" + _CAPACITY, "not a valid DNS subdomain",
                 id="invalid node name"),
    pytest.param(_NODE + "metadata: {name: n1}\nspec: {taints: [{key: k, effect: Sometimes}]}\n" + _CAPACITY,
                 "spec.taints[0] needs a key and an effect", id="taint with unknown effect"),
    pytest.param("---\n" + _NODE + "metadata: {name: n1}\n" + _CAPACITY + "---\n" + _NODE
                 + "metadata: {name: n1}\n" + _CAPACITY,
                 "document 2: node 'n1' already defined at document 1", id="duplicate node name"),
    pytest.param("apiVersion: v1\nkind: List\nitems:\n- " + _NODE.replace("\n", "\n  ")
                 + "metadata: {}\n", "document 1, items[0]: missing metadata.name", id="bad item in a list"),
    pytest.param("kind: List\nitems: {}\n", "document 1: items must be a list", id="list without items list"),
    pytest.param("[1, 2\n", "not valid YAML", id="broken yaml"),
    pytest.param("", "no Node found", id="empty file"),
]


@pytest.mark.parametrize(("text", "expected"), MALFORMED)
def test_malformed_files_are_rejected_with_file_document_and_problem(tmp_path: Path, text: str,
                                                                     expected: str) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text(text)
    with pytest.raises(errors.NodesFileError) as raised:
        nodes.load(path)
    assert str(raised.value).startswith(f"{path}: ")
    assert expected in str(raised.value)


def test_a_missing_file_is_a_nodes_file_error(tmp_path: Path) -> None:
    with pytest.raises(errors.NodesFileError, match="cannot read"):
        nodes.load(tmp_path / "absent.yaml")

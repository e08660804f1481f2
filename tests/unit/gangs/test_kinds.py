"""The workload kinds table (``gangs.kinds.KINDS``) agrees with the sources, the chart and the
cluster state: a kind added in one place and forgotten in another fails here, not in a cluster.

For every kind:
(a) a pod labelled as its controller labels it is claimed by one of ``gangs.SOURCES`` (never
    taken for a lone pod) whose workload object is that kind, unless the kind is documented
    below as read-only (``READ_ONLY``: its pods are another kind's);
(b) a kind that sizes gangs, and every owner a source reads, is readable (get, list, watch)
    by the operator's ClusterRole in charts/fabricsched/templates/rbac.yaml;
(c) its pod label is one the cluster state keeps (``LABEL_PREFIXES`` or ``LEGACY_LABELS``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from gang_lookups import NOBODY

from builders import make_pod
from fabricsched import gangs
from fabricsched.controller import pod_records
from fabricsched.gangs import keys, kinds, sources
from fabricsched.topology import nodes

RBAC = Path(__file__).resolve().parents[3] / "charts" / "fabricsched" / "templates" / "rbac.yaml"
READ_VERBS = {"get", "list", "watch"}

READ_ONLY = {"TrainJob": "JobSet"}
"""Kinds no source keys by, with the kind whose pods they run as: a Kubeflow Trainer TrainJob
runs as a JobSet of the same name, its pods carry only the JobSet's labels, and its gang's Events
go to that JobSet."""

EXTRA_LABELS = {
    # What the controller writes besides the kind's own label, so the source can key the pod.
    "LeaderWorkerSet": {sources.LWS_GROUP_INDEX: "0", sources.LWS_WORKER_INDEX: "0",
                        sources.LWS_GROUP_KEY: "hash0"},
}


def pod_of(kind: kinds.WorkloadKind) -> nodes.PodUsage:
    """A GPU pod of a ``kind`` workload named ``w`` (UID ``uid-w``), labelled and owned as its
    controller makes it."""
    builder = make_pod("w-0", "train").gpus(8)
    if kind.pod_label:
        builder.label(kind.pod_label, "uid-w" if kind.pod_value == "uid" else "w")
    for key, value in EXTRA_LABELS.get(kind.kind, {}).items():
        builder.label(key, value)
    manifest = builder.build()
    if kind.pod_label:
        manifest["metadata"]["ownerReferences"] = [{
            "apiVersion": kind.api_version, "kind": kind.kind, "name": "w", "uid": "uid-w",
            "controller": True,
        }]
    else:  # a PodGroup's pods name it in their spec
        manifest["spec"]["schedulingGroup"] = {"podGroupName": "w"}
    return nodes.PodUsage.from_manifest(manifest)


def operator_rules() -> list[dict[str, Any]]:
    """The rules of the ``-operator`` ClusterRole, read with the Helm template lines left out (and
    the expressions inside a line replaced by a placeholder)."""
    lines = [re.sub(r"\{\{.*?\}\}", "tpl", line) for line in RBAC.read_text().splitlines()
             if not line.strip().startswith("{{")]
    for document in yaml.safe_load_all("\n".join(lines)):
        document = document or {}
        if document.get("kind") == "ClusterRole" and document["metadata"]["name"].endswith("-operator"):
            rules: list[dict[str, Any]] = document["rules"]
            return rules
    raise AssertionError(f"no operator ClusterRole in {RBAC}")


def readable(kind: kinds.WorkloadKind, rules: list[dict[str, Any]]) -> bool:
    return any(
        kind.group in rule.get("apiGroups", ()) and kind.plural in rule.get("resources", ())
        and set(rule.get("verbs", ())) >= READ_VERBS
        for rule in rules
    )


@pytest.mark.parametrize("kind", kinds.KINDS, ids=[k.kind for k in kinds.KINDS])
def test_every_kind_is_claimed_by_a_source_whose_workload_is_that_kind(kind: kinds.WorkloadKind) -> None:
    pod = pod_of(kind)
    source = gangs.source_of(pod, NOBODY)
    assert source in gangs.SOURCES and source.kind is not gangs.SourceKind.POD, source.kind
    workload = gangs.workload_of(pod, NOBODY, "uid-w")
    assert workload is not None
    expected = kinds.named(READ_ONLY.get(kind.kind, kind.kind))
    assert expected is not None
    assert (workload.api_version, workload.kind, workload.name) == (expected.api_version, expected.kind, "w")


@pytest.mark.parametrize("kind", [kinds.named(k) for k in READ_ONLY], ids=list(READ_ONLY))
def test_a_read_only_kind_sizes_no_gang_and_its_pods_carry_the_label_of_the_kind_they_run_as(
    kind: kinds.WorkloadKind | None,
) -> None:
    assert kind is not None and not kind.sizes_gangs
    runs_as = kinds.named(READ_ONLY[kind.kind])
    assert runs_as is not None and kind.pod_label == runs_as.pod_label


def test_every_kind_that_sizes_gangs_and_every_owner_a_source_reads_is_readable_by_the_operator() -> None:
    rules = operator_rules()
    sizing = [k for k in kinds.KINDS if k.sizes_gangs]
    assert sizing and set(gangs.OWNER_KINDS) == {k.kind for k in sizing} | {kinds.WORKLOAD.kind}
    read = set()
    for kind in kinds.KINDS:
        pod = pod_of(kind)
        owner = gangs.source_of(pod, NOBODY).owner(pod)
        if owner is not None:
            read.add(owner[0])
    read |= {"Job"}  # a Job's pods key through their owner Job, read by the state's watch
    for name in sorted({k.kind for k in sizing} | read | {kinds.WORKLOAD.kind}):
        kind = gangs.OWNER_KINDS.get(name) or kinds.named(name)
        assert kind is not None, name
        assert readable(kind, rules), f"{kind.plural}.{kind.group or 'core'} is not readable in {RBAC.name}"


@pytest.mark.parametrize("kind", [k for k in kinds.KINDS if k.pod_label],
                         ids=[k.kind for k in kinds.KINDS if k.pod_label])
def test_every_pod_label_of_a_kind_is_kept_on_the_states_pod_records(kind: kinds.WorkloadKind) -> None:
    assert kind.pod_label.startswith(kinds.LABEL_PREFIXES) or kind.pod_label in kinds.LEGACY_LABELS


def test_every_label_a_source_reads_is_kept_on_the_states_pod_records() -> None:
    # The module's own constants (not the key marker it imports): each a label or annotation key.
    labels = [value for name, value in vars(sources).items()
              if name.isupper() and isinstance(value, str) and name not in vars(keys)]
    assert labels
    for label in labels:
        assert label.startswith(kinds.LABEL_PREFIXES) or label in kinds.LEGACY_LABELS, label


def test_kueues_pod_labels_are_kept_on_the_states_pod_records() -> None:
    # Preemption reads them from the records to leave Kueue-managed workloads alone.
    labels = {label: "team" for label in kinds.KUEUE_LABELS} | {"app": "bert"}
    pod = nodes.PodUsage.from_manifest({"metadata": {"name": "p", "namespace": "ns", "uid": "u",
                                                     "labels": labels}, "spec": {}, "status": {}})
    assert pod_records.trimmed(pod).labels == labels  # ``app`` too: a budget may select on it
    assert not pod_records.trimmed(pod).labels_cut
    # Past the cap, other labels go (the record says so); the conventions' stay.
    many = labels | {f"extra-{i:03}": "x" for i in range(pod_records.MAX_OTHER_LABELS)}
    cut = pod_records.trimmed(nodes.PodUsage.from_manifest(
        {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": many}, "spec": {}, "status": {}}))
    assert cut.labels_cut and set(cut.labels) >= kinds.KUEUE_LABELS and "app" in cut.labels
    assert len(cut.labels) == len(kinds.KUEUE_LABELS) + pod_records.MAX_OTHER_LABELS

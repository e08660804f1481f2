"""Re-counting pods' claimed GPUs: a claim's event re-counts the pods naming it, a template's
the pods of its namespace, not every pod (thousands of claims arrive one event each at a start;
a namespace comes with its templates)."""

from __future__ import annotations

import pytest

from fabricsched.controller import dra_gpus
from fabricsched.topology import dra, nodes


def test_a_claim_event_recounts_only_the_pods_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = dra_gpus.DraGpus(dra.DeviceIndex())
    pods = {("ns", f"p{i}"): nodes.PodUsage("ns", f"p{i}", f"u{i}", None, "Pending",
                                            claims=(nodes.PodClaim(claim=f"c{i}"),))
            for i in range(100)}
    for pod in pods.values():
        gpus.count(pod, [])
    counted: list[str] = []
    original = gpus._count
    monkeypatch.setattr(gpus, "_count", lambda pod, listed: counted.append(pod.name) or original(pod, listed))
    by_namespace = {"ns": pods}
    gpus.claims.set_claim(("ns", "c7"), (), None)
    gpus.recount(pods, [], by_namespace)
    assert counted == ["p7"]
    assert gpus.recount(pods, [], by_namespace) == {} and counted == ["p7"]  # nothing moved since
    gpus.claims.remove_claim(("ns", "c7"))
    gpus.recount(pods, [], by_namespace)
    assert counted == ["p7", "p7"]


def test_a_template_or_channel_recounts_its_namespace_and_a_class_every_pod(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = dra_gpus.DraGpus(dra.DeviceIndex())
    by_namespace = {ns: {(ns, f"p{i}"): nodes.PodUsage(ns, f"p{i}", f"{ns}{i}", None, "Pending",
                                                        claims=(nodes.PodClaim(template="t"),))
                         for i in range(50)} for ns in ("a", "b")}
    pods = {**by_namespace["a"], **by_namespace["b"]}
    counted: list[str] = []
    original = gpus._count
    monkeypatch.setattr(gpus, "_count",
                        lambda pod, listed: counted.append(pod.namespace) or original(pod, listed))
    gpus.claims.set_template(("new", "t"), ())  # a new namespace's template: no pod there yet
    assert gpus.recount(pods, [], by_namespace) == {} and counted == []
    gpus.claims.set_template(("a", "t"), ())
    gpus.recount(pods, [], by_namespace)
    assert counted == ["a"] * 50
    gpus.claims.set_channel(("b", "domain"), "t")
    gpus.recount(pods, [], by_namespace)
    assert counted == ["a"] * 50 + ["b"] * 50
    gpus.claims.set_class("gpu.nvidia.com", "")  # cluster-wide: every pod
    gpus.recount(pods, [], by_namespace)
    assert len(counted) == 200

"""Re-counting pods' claimed GPUs: a claim's event re-counts the pods naming it, a template's
the pods of its namespace, not every pod (thousands of claims arrive one event each at a start;
a namespace comes with its templates)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from controller_harness import topology_body

from fabricsched.api import topology as api
from fabricsched.controller import dra_gpus
from fabricsched.topology import claims, dra, nodes


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


def test_the_dra_fabrics_follow_a_new_spec_and_an_unchanged_count_is_the_same_pod() -> None:
    # ``fabrics_of`` is made once per spec object (every pod applied asks for it): a topology
    # given another spec must be counted by the new one, not the remembered one.
    def spec(*classes: str) -> api.FabricTopologySpec:
        return api.FabricTopologySpec.model_validate(
            topology_body(draGpus={"deviceClasses": list(classes)})["spec"])

    topology = SimpleNamespace(spec=spec("gpu.nvidia.com"))
    gpus = dra_gpus.DraGpus(dra.DeviceIndex())
    first = gpus.fabrics_of([topology])  # type: ignore[list-item]
    assert gpus.fabrics_of([topology]) is first  # type: ignore[list-item]
    eight = {"name": "g", "exactly": {"deviceClassName": "other", "count": 8}}
    gpus.claims.set_template(("ns", "t"), claims.parse_requests({"devices": {"requests": [eight]}}, "spec"))
    pod = nodes.PodUsage("ns", "p", "u", None, "Pending", claims=(nodes.PodClaim(template="t"),))
    counted = gpus.count(pod, [topology])  # type: ignore[list-item]
    assert counted.claim_gpus == {}
    assert gpus.count(counted, [topology]) is counted  # type: ignore[list-item]  # as it was: no copy
    topology.spec = spec("gpu.nvidia.com", "other")
    again = gpus.count(counted, [topology])  # type: ignore[list-item]
    assert again.claim_gpus == {"nvidia.com/gpu": 8}
    assert gpus.fabrics_of([topology]) is not first  # type: ignore[list-item]
    assert gpus.fabrics_of([]) == []

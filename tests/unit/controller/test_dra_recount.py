"""Re-counting pods' claimed GPUs: a claim's event re-counts the pods naming it, not every pod
(thousands of claims arrive one event each at a start)."""

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
    gpus.claims.set_claim(("ns", "c7"), (), None)
    gpus.recount(pods, [])
    assert counted == ["p7"]
    assert gpus.recount(pods, []) == {} and counted == ["p7"]  # nothing moved since
    gpus.claims.remove_claim(("ns", "c7"))
    gpus.recount(pods, [])
    assert counted == ["p7", "p7"]
    # A template (or class, channel, topology) may change any pod's count: all of them again.
    gpus.claims.set_template(("ns", "t"), ())
    gpus.recount(pods, [])
    assert len(counted) == 102

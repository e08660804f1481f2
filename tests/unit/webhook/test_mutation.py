"""Which admitted pods get ``schedulerName: fabricsched``: GPU detection, an existing scheduler
name, a bound pod, the operation, and forged objects that must leave the pod alone."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fabricsched.webhook import mutation
from fabricsched.webhook import options as webhook_options


def container(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None,
              **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "image": "trainer", "resources": resources, **extra}


def pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None,
        **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": containers, "schedulerName": "default-scheduler", **spec}
    if init is not None:
        body["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "w-", "namespace": "team"},
            "spec": body}


GPU = {"nvidia.com/gpu": "8"}

MUTATED = [
    pod([container(GPU, GPU)]),
    pod([container(limits=GPU)]),
    pod([container({"cpu": "1"}), container({"amd.com/gpu": 2}, {"amd.com/gpu": 2})]),
    pod([container()], init=[container(GPU, GPU)]),
    pod([container()], init=[container(GPU, GPU, restartPolicy="Always")]),
    pod([container(GPU, GPU)], schedulerName=""),
    pod([container(GPU, GPU)], schedulerName=None),
]


@pytest.mark.parametrize("body", MUTATED, ids=[
    "a container requesting GPUs gets the name",
    "a GPU limit alone counts (API defaulting makes it the request)",
    "any configured GPU resource in any container counts",
    "an init container's GPUs count",
    "a sidecar init container's GPUs count",
    "an empty scheduler name is filled",
    "a null scheduler name is filled",
])
def test_gpu_pods_get_the_scheduler_name(body: dict[str, Any],
                                         options: webhook_options.WebhookOptions) -> None:
    decision = mutation.decide("CREATE", body, options)
    assert decision.scheduler_name == "fabricsched", decision.reason
    assert not decision.malformed


LEFT_ALONE = [
    ("CREATE", pod([container({"cpu": "4", "memory": "1Gi"})]), "requests none of"),
    ("CREATE", pod([container({"nvidia.com/gpu": "0"}, {"nvidia.com/gpu": "0"})]), "requests none of"),
    ("CREATE", pod([container({"example.com/gpu": "8"})]), "requests none of"),
    ("CREATE", pod([container({"nvidia.com/gpu": "lots"})]), "requests none of"),
    ("CREATE", pod([container(GPU, GPU)], schedulerName="volcano"), "another scheduler, 'volcano'"),
    ("CREATE", pod([container(GPU, GPU)], schedulerName="fabricsched"), "already names fabricsched"),
    ("CREATE", pod([container(GPU, GPU)], nodeName="host-1"), "bound to 'host-1'"),
    ("UPDATE", pod([container(GPU, GPU)]), "is not CREATE"),
    ("DELETE", pod([container(GPU, GPU)]), "is not CREATE"),
]


@pytest.mark.parametrize(("operation", "body", "reason"), LEFT_ALONE, ids=[
    "a pod without GPUs is untouched",
    "zero GPUs is no GPU pod",
    "a GPU resource that is not configured is ignored",
    "an unparsable quantity is no request (the API server refuses the pod next)",
    "another explicit scheduler is never overwritten",
    "a pod naming fabricsched already needs nothing",
    "a pod bound at creation is untouched",
    "an update is untouched",
    "a deletion is untouched",
])
def test_other_pods_are_left_alone(operation: str, body: dict[str, Any], reason: str,
                                   options: webhook_options.WebhookOptions) -> None:
    decision = mutation.decide(operation, body, options)
    assert decision.scheduler_name is None
    assert reason in decision.reason
    assert not decision.malformed


FORGED: list[object] = [
    None,
    "a pod",
    ["spec"],
    {"spec": "containers"},
    {"spec": {"containers": {"name": "c"}}},
    {"spec": {"containers": ["c"]}},
    {"spec": {"containers": [{"resources": {"requests": ["nvidia.com/gpu"]}}]}},
    {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": True}}}]}},
    {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": {"n": 8}}}}]}},
    {"spec": {"schedulerName": 7, "containers": []}},
    {"spec": {"nodeName": ["n"], "containers": []}},
]


@pytest.mark.parametrize("body", FORGED, ids=[
    "no object", "a string object", "an array object", "a string spec", "containers as an object",
    "a container as a string", "requests as an array", "a boolean quantity", "an object quantity",
    "a numeric scheduler name", "an array node name",
])
def test_forged_objects_leave_the_pod_alone_with_a_reason(body: object,
                                                         options: webhook_options.WebhookOptions) -> None:
    decision = mutation.decide("CREATE", body, options)
    assert (decision.scheduler_name, decision.malformed) == (None, True)
    assert decision.reason.startswith("unreadable pod: ")
    assert len(decision.reason) <= 220


def test_a_huge_forged_value_is_echoed_only_as_an_excerpt(options: webhook_options.WebhookOptions) -> None:
    body = pod([container(GPU, GPU)], schedulerName="x" * 100_000)
    decision = mutation.decide("CREATE", body, options)
    assert decision.scheduler_name is None
    assert len(decision.reason) < 100
    assert len(mutation.decide("x" * 100_000, body, options).reason) < 100


def test_claim_only_pods_are_gpu_pods_with_dra_claims(options: webhook_options.WebhookOptions) -> None:
    body = {"spec": {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "eight-gpus"}],
                     "containers": [{"name": "c", "resources": {"claims": [{"name": "g"}]}}]}}
    assert mutation.decide("CREATE", body, options).scheduler_name is None  # off by default
    with_claims = dataclasses.replace(options, dra_claims=True)
    assert mutation.decide("CREATE", body, with_claims).scheduler_name == options.scheduler_name
    forged = {"spec": {"resourceClaims": "all"}}
    assert mutation.decide("CREATE", forged, with_claims).malformed

"""The AdmissionReview in, the answer out: a JSONPatch for a GPU pod's CREATE, an unpatched
``allowed`` for everything else, never ``allowed: false``, nothing kept."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import pytest

from fabricsched.webhook import options as webhook_options
from fabricsched.webhook import review

GPU_POD = {"metadata": {"name": "w-0"},
           "spec": {"schedulerName": "default-scheduler",
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}


def envelope(obj: Any = None, operation: str = "CREATE", uid: str = "u-1", **request: Any) -> bytes:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "operation": operation, "namespace": "team",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "object": GPU_POD if obj is None else obj, **request}}
    return json.dumps(body).encode()


def response(answer: review.Answer) -> dict[str, Any]:
    decoded = json.loads(answer.body)
    assert decoded["kind"] == "AdmissionReview" and decoded["apiVersion"] == "admission.k8s.io/v1"
    found: dict[str, Any] = decoded["response"]
    assert found["allowed"] is True
    return found


def patch_of(found: dict[str, Any]) -> list[dict[str, Any]]:
    assert found["patchType"] == "JSONPatch"
    patch: list[dict[str, Any]] = json.loads(base64.b64decode(found["patch"]))
    return patch


def test_a_gpu_pod_gets_a_json_patch_replacing_the_scheduler_name(
        options: webhook_options.WebhookOptions, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=review.__name__):
        answer = review.answer(envelope(), options)
    found = response(answer)
    assert found["uid"] == "u-1" and answer.patched
    assert patch_of(found) == [{"op": "replace", "path": "/spec/schedulerName", "value": "fabricsched"}]
    assert "'team'/'w-0': scheduler name set: requests 8 nvidia.com/gpu" in caplog.text


def test_a_pod_without_the_field_gets_an_add(options: webhook_options.WebhookOptions) -> None:
    body = {**GPU_POD, "spec": {k: v for k, v in GPU_POD["spec"].items() if k != "schedulerName"}}
    found = response(review.answer(envelope(body), options))
    assert patch_of(found) == [{"op": "add", "path": "/spec/schedulerName", "value": "fabricsched"}]


@pytest.mark.parametrize("request_fields", [
    {"operation": "UPDATE"}, {"operation": "DELETE", "object": None}, {"operation": "CONNECT"},
    {"subResource": "status"}, {"kind": {"group": "", "version": "v1", "kind": "Service"}},
    {"resource": {"group": "apps", "version": "v1", "resource": "pods"}}, {"operation": ["CREATE"]},
], ids=["update", "delete", "connect", "subresource", "another kind", "another group", "a list"])
def test_anything_but_the_create_of_a_pod_is_allowed_unpatched_without_reading_the_object(
        options: webhook_options.WebhookOptions, request_fields: dict[str, Any]) -> None:
    found = response(review.answer(envelope(**request_fields), options))
    assert "patch" not in found and found["uid"] == "u-1"


def test_a_huge_uid_is_echoed_and_nothing_is_kept(options: webhook_options.WebhookOptions) -> None:
    uid = "u" * 500_000
    found = response(review.answer(envelope(operation="UPDATE", uid=uid), options))
    assert found["uid"] == uid
    assert not [name for name in vars(review) if name.startswith("_seen") or name.endswith("_cache")]


def test_a_forged_pod_is_admitted_unchanged_with_a_warning(
        options: webhook_options.WebhookOptions, caplog: pytest.LogCaptureFixture) -> None:
    forged = {"metadata": {"name": "w-0"}, "spec": {"containers": "all of them"}}
    found = response(review.answer(envelope(forged), options))
    assert "patch" not in found
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "unreadable pod: spec.containers must be an array, not a string" in caplog.text


class Exploding(dict[str, Any]):
    def get(self, *_: Any, **__: Any) -> Any:
        raise RuntimeError("boom")


def test_an_unexpected_error_admits_the_pod_unchanged(
        options: webhook_options.WebhookOptions, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*_: Any) -> Any:
        raise RuntimeError("boom")
    monkeypatch.setattr(review.mutation, "decide", explode)
    found = response(review.answer(envelope(), options))
    assert "patch" not in found
    assert "left alone after an unexpected error" in caplog.text


@pytest.mark.parametrize("raw", [
    b"not json", b"\xff\xfe", b"[]", b'{"request": []}', b'{"request": {}}', b'{"request": {"uid": 7}}',
    b"[" * 100_000,
], ids=["text", "bytes", "a list", "a list request", "no uid", "a number uid", "deep nesting"])
def test_what_is_not_a_review_is_refused_with_a_bounded_reason(
        options: webhook_options.WebhookOptions, raw: bytes) -> None:
    with pytest.raises(review.BadReview) as refused:
        review.answer(raw, options)
    assert len(str(refused.value)) < 200

"""The kopf handler's body: the decision put into kopf's patch, never an exception (an exception
would make kopf answer ``allowed: false`` and block the pod)."""

from __future__ import annotations

import logging
from typing import Any

import kopf
import pytest

from fabricsched.webhook import options as webhook_options
from fabricsched.webhook import server

GPU_POD = {"metadata": {"name": "w-0", "namespace": "team"},
           "spec": {"schedulerName": "default-scheduler",
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}


def test_a_gpu_pod_gets_a_json_patch_replacing_the_scheduler_name(
        options: webhook_options.WebhookOptions, caplog: pytest.LogCaptureFixture) -> None:
    patch = kopf.Patch(body=kopf.Body(GPU_POD))
    with caplog.at_level(logging.INFO, logger=server.__name__):
        server.apply("CREATE", GPU_POD, patch, options)
    assert patch.as_json_patch() == [{"op": "replace", "path": "/spec/schedulerName", "value": "fabricsched"}]
    assert "'team'/'w-0': scheduler name set: requests 8 nvidia.com/gpu" in caplog.text


def test_a_pod_without_the_field_gets_an_add(options: webhook_options.WebhookOptions) -> None:
    body = {**GPU_POD, "spec": {k: v for k, v in GPU_POD["spec"].items() if k != "schedulerName"}}
    patch = kopf.Patch(body=kopf.Body(body))
    server.apply("CREATE", body, patch, options)
    assert patch.as_json_patch() == [{"op": "add", "path": "/spec/schedulerName", "value": "fabricsched"}]


def test_a_forged_pod_is_admitted_unchanged_with_a_warning(
        options: webhook_options.WebhookOptions, caplog: pytest.LogCaptureFixture) -> None:
    body: dict[str, Any] = {"metadata": {"name": "w-0"}, "spec": {"containers": "all of them"}}
    patch = kopf.Patch(body=kopf.Body(body))
    server.apply("CREATE", body, patch, options)
    assert not patch
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "unreadable pod: spec.containers must be an array, not a string" in caplog.text


class Exploding(dict[str, Any]):
    def get(self, *_: Any, **__: Any) -> Any:
        raise RuntimeError("boom")


def test_an_unexpected_error_admits_the_pod_unchanged(
        options: webhook_options.WebhookOptions, caplog: pytest.LogCaptureFixture) -> None:
    patch = kopf.Patch()
    patch["spec"] = {"schedulerName": "x"}
    server.apply("CREATE", Exploding(), patch, options)
    assert not patch
    assert "a pod left alone after an unexpected error" in caplog.text


def test_install_registers_one_create_handler_and_an_unmanaged_https_server(
        options: webhook_options.WebhookOptions) -> None:
    registry, settings = kopf.OperatorRegistry(), kopf.OperatorSettings()
    server.install(registry, settings, options)
    webhook = settings.admission.server
    assert isinstance(webhook, kopf.WebhookServer)
    assert (webhook.addr, webhook.port, webhook.insecure) == ("127.0.0.1", 8443, False)
    assert (webhook.certfile, webhook.pkeyfile) == (str(options.cert_file), str(options.key_file))
    assert settings.admission.managed is None
    [handler] = registry._webhooks.get_all_handlers()
    assert (handler.id, list(handler.operations or [])) == ("scheduler-name", ["CREATE"])

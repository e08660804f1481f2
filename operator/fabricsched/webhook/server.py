"""The webhook on kopf's admission support: one ``@kopf.on.mutate`` handler for pods, served
by ``kopf.WebhookServer`` (HTTPS, aiohttp) on the operator's own event loop.

kopf reads and answers the AdmissionReview: an envelope it cannot read (not JSON, no
``request.resource``, no ``userInfo``, a body above aiohttp's 1 MiB) gets an HTTP error, and
the API server, with ``failurePolicy: Ignore``, admits the pod unchanged. kopf turns the
handler's change into a JSONPatch (``replace`` or ``add`` of ``/spec/schedulerName``). A
handler that raised would make kopf answer ``allowed: false`` and block the pod, so the
handler never raises: whatever goes wrong leaves the pod as it is and is logged.

kopf does not manage the MutatingWebhookConfiguration (``settings.admission.managed`` stays
None): the chart and ``fabricsched cluster up`` register it, with the namespace selector and
failure policy kopf's managed mode would not set. kopf reloads the certificate files when
they change (a renewed Secret needs no restart).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from fabricsched import parsing
from fabricsched.api import admission
from fabricsched.webhook import mutation
from fabricsched.webhook import options as webhook_options

logger = logging.getLogger(__name__)


def install(registry: kopf.OperatorRegistry, settings: kopf.OperatorSettings,
            options: webhook_options.WebhookOptions) -> None:
    """Register the handler on ``registry`` and the HTTPS server on ``settings``."""
    settings.admission.server = kopf.WebhookServer(
        addr=options.host, port=options.port, certfile=str(options.cert_file),
        pkeyfile=str(options.key_file))
    settings.admission.managed = None

    @kopf.on.mutate("", "v1", "pods", id=admission.HANDLER_ID, operations=["CREATE"],
                    registry=registry)
    async def set_scheduler_name(*, body: kopf.Body, patch: kopf.Patch, **kwargs: Any) -> None:
        apply(kwargs.get("operation"), body, patch, options)


def apply(operation: object, body: Mapping[str, Any], patch: dict[str, Any],
          options: webhook_options.WebhookOptions) -> None:
    """Decide and put the decision into kopf's ``patch``; never raises."""
    try:
        decision = mutation.decide(operation, body, options)
        if decision.scheduler_name is not None:
            patch["spec"] = {"schedulerName": decision.scheduler_name}
        level = logging.WARNING if decision.malformed else logging.INFO \
            if decision.scheduler_name is not None else logging.DEBUG
        logger.log(level, "pod %s: %s %s", _pod_name(body),
                   "scheduler name set:" if decision.scheduler_name is not None else "left alone:",
                   decision.reason)
    except Exception:  # the pod must never be blocked by us: log, admit unchanged
        patch.clear()
        logger.exception("a pod left alone after an unexpected error")


def _pod_name(body: object) -> str:
    metadata = body.get("metadata") if isinstance(body, Mapping) else None
    if not isinstance(metadata, Mapping):
        return "(no metadata)"
    name = parsing.excerpt(metadata.get("name") or metadata.get("generateName"))
    namespace = metadata.get("namespace")
    return f"{parsing.excerpt(namespace)}/{name}" if namespace else name

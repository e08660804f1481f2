"""The namespace opt-in webhook's contract: the label, the handler's URL path and the
MutatingWebhookConfiguration that points the API server at ``fabricsched run``.

``fabricsched cluster up`` registers the configuration ``mutating_configuration`` builds (a
loopback ``url``); the chart renders the same webhook with a Service reference, and its test
compares the two. Here, beside the scheduler configuration, because both adapters (the
webhook server and the local cluster) read it and neither may import the other.
"""

from __future__ import annotations

import base64
from typing import Any

NAMESPACE_LABEL = "fabricsched.io/scheduling"
NAMESPACE_LABEL_VALUE = "enabled"
"""A namespace labelled ``fabricsched.io/scheduling=enabled`` has its GPU pods scheduled by fabricsched."""
HANDLER_ID = "scheduler-name"
"""The kopf handler's id; kopf serves it at ``/<id>``, so it is the webhook's URL path too."""
PATH = f"/{HANDLER_ID}"
CONFIGURATION_NAME = "fabricsched"
WEBHOOK_NAME = "scheduler-name.fabricsched.io"
DEFAULT_ADDRESS = "127.0.0.1:8443"
DEFAULT_URL = f"https://{DEFAULT_ADDRESS}"
TIMEOUT_SECONDS = 2
"""The API server waits this long for an answer, then admits the pod unchanged (failurePolicy Ignore)."""


def webhook(client_config: dict[str, Any]) -> dict[str, Any]:
    """The one webhook: pods only, CREATE only, in labelled namespaces only, never blocking.

    ``reinvocationPolicy: IfNeeded``: a later webhook that adds a GPU container still gets
    the scheduler name. ``matchPolicy: Equivalent``: pods by any API version.
    """
    return {
        "name": WEBHOOK_NAME,
        "admissionReviewVersions": ["v1"],
        "clientConfig": client_config,
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                   "resources": ["pods"], "scope": "Namespaced"}],
        "namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: NAMESPACE_LABEL_VALUE}},
        "objectSelector": {},
        "failurePolicy": "Ignore",
        "matchPolicy": "Equivalent",
        "reinvocationPolicy": "IfNeeded",
        "sideEffects": "None",
        "timeoutSeconds": TIMEOUT_SECONDS,
    }


def mutating_configuration(url: str, ca_pem: bytes, name: str = CONFIGURATION_NAME) -> dict[str, Any]:
    """The MutatingWebhookConfiguration calling ``url`` + ``PATH``, trusting ``ca_pem``."""
    if not url.startswith("https://"):
        raise ValueError(f"webhook URL {url[:80]!r} must start with https:// (API servers call only HTTPS)")
    client_config = {"url": url.rstrip("/") + PATH, "caBundle": base64.b64encode(ca_pem).decode("ascii")}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "fabricsched"}},
        "webhooks": [webhook(client_config)],
    }

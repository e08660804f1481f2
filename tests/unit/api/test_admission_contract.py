"""The webhook configuration ``cluster up`` registers: labelled namespaces, pods on CREATE, fail open."""

from __future__ import annotations

import base64

import pytest

from fabricsched.api import admission


def test_the_configuration_selects_labelled_namespaces_and_never_blocks() -> None:
    config = admission.mutating_configuration("https://127.0.0.1:8443/", b"CA PEM")
    [webhook] = config["webhooks"]
    assert webhook["clientConfig"] == {"url": "https://127.0.0.1:8443/scheduler-name",
                                       "caBundle": base64.b64encode(b"CA PEM").decode()}
    assert webhook["namespaceSelector"] == {"matchLabels": {"fabricsched.io/scheduling": "enabled"}}
    assert webhook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                 "resources": ["pods"], "scope": "Namespaced"}]
    assert (webhook["failurePolicy"], webhook["sideEffects"]) == ("Ignore", "None")
    assert webhook["timeoutSeconds"] == 2
    assert config["metadata"]["name"] == "fabricsched"


def test_plain_http_is_refused() -> None:
    with pytest.raises(ValueError, match="https://"):
        admission.mutating_configuration("http://127.0.0.1:8443", b"")

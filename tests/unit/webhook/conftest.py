"""Fixtures of the webhook tests: options with certificate files that exist (their content is
not read by the decision)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricsched.webhook import options as webhook_options


@pytest.fixture
def options(tmp_path: Path) -> webhook_options.WebhookOptions:
    for name in ("tls.crt", "tls.key"):
        (tmp_path / name).write_text("PEM\n")
    return webhook_options.WebhookOptions(cert_file=tmp_path / "tls.crt", key_file=tmp_path / "tls.key",
                                          gpu_resources=("nvidia.com/gpu", "amd.com/gpu"))

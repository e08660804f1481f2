"""The webhook's ``fabricsched run`` flags: off without a certificate, on with both files, the
address and GPU resources checked at the command line, naming the flag."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fabricsched.app import commands, front
from fabricsched.dashboard import server as dashboard_server

NO_PAGE = dashboard_server.DashboardOptions("")


def parse(tmp_path: Path, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    commands.register(parser.add_subparsers())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    return parser.parse_args(["run", "--kubeconfig", str(kubeconfig), *argv])


@pytest.fixture
def pem(tmp_path: Path) -> list[str]:
    for name in ("tls.crt", "tls.key"):
        (tmp_path / name).write_text("PEM\n")
    return [f"--webhook-cert-file={tmp_path / 'tls.crt'}", f"--webhook-key-file={tmp_path / 'tls.key'}"]


def test_without_a_certificate_the_webhook_is_off(tmp_path: Path) -> None:
    options = commands.options_from(parse(tmp_path))
    assert options.webhook is None
    assert not front.FrontOptions(options.webhook, NO_PAGE).needed


def test_with_both_files_it_serves_on_the_loopback_by_default(tmp_path: Path, pem: list[str]) -> None:
    options = commands.options_from(parse(tmp_path, *pem))
    assert options.webhook is not None
    assert (options.webhook.host, options.webhook.port) == ("127.0.0.1", 8443)
    assert options.webhook.gpu_resources == ("nvidia.com/gpu",)
    assert options.webhook.scheduler_name == "fabricsched"
    assert options.webhook.client_ca is None  # any TLS client, as the API server by default
    assert front.FrontOptions(options.webhook, NO_PAGE).needed


def test_the_address_and_gpu_resources_reach_the_webhook(tmp_path: Path, pem: list[str]) -> None:
    options = commands.options_from(parse(tmp_path, *pem, "--webhook-address=[::]:9443",
                                          "--webhook-gpu-resource=amd.com/gpu",
                                          "--webhook-gpu-resource=nvidia.com/gpu",
                                          "--webhook-gpu-resource=amd.com/gpu"))
    assert options.webhook is not None
    assert (options.webhook.host, options.webhook.port) == ("::", 9443)
    assert options.webhook.gpu_resources == ("amd.com/gpu", "nvidia.com/gpu")


@pytest.mark.parametrize(("argv", "message"), [
    (["--webhook-cert-file=/nonexistent/tls.crt"], "go together"),
    (["--webhook-cert-file=/nonexistent/tls.crt", "--webhook-key-file=/nonexistent/tls.key"],
     "certificate file '/nonexistent/tls.crt' does not exist"),
], ids=["a certificate without a key is refused", "a missing file is refused"])
def test_bad_files_are_refused(tmp_path: Path, argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        commands.options_from(parse(tmp_path, *argv))


@pytest.mark.parametrize(("flag", "message"), [
    ("--webhook-address=8443", "host:port"),
    ("--webhook-address=127.0.0.1:https", "host:port"),
    ("--webhook-address=127.0.0.1:99999", "host:port"),
    ("--webhook-gpu-resource=gpu", "extended resource name"),
], ids=["an address without a host is refused", "a named port is refused", "a port out of range is refused",
        "a resource name without a prefix is refused"])
def test_bad_flags_are_refused_naming_the_webhook(tmp_path: Path, pem: list[str], flag: str,
                                                   message: str) -> None:
    with pytest.raises(ValueError, match=f"--webhook: .*{message}"):
        commands.options_from(parse(tmp_path, *pem, flag))


def test_a_client_ca_is_checked_and_kept(tmp_path: Path, pem: list[str]) -> None:
    with pytest.raises(ValueError, match=r"client CA file .* does not exist"):
        commands.options_from(parse(tmp_path, *pem, "--webhook-client-ca=/nonexistent/ca.crt"))
    (tmp_path / "ca.crt").write_text("PEM\n")
    options = commands.options_from(parse(tmp_path, *pem, f"--webhook-client-ca={tmp_path / 'ca.crt'}"))
    assert options.webhook is not None and options.webhook.client_ca == tmp_path / "ca.crt"

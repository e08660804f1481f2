"""``cluster up``'s webhook registration: a loopback HTTPS URL, and a serving certificate from
the cluster CA that names the loopback address."""

from __future__ import annotations

import argparse
import datetime
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from fabricsched.cluster import admission, certs, commands


@pytest.mark.parametrize("url", ["https://127.0.0.1:8443", "https://127.0.0.1:9443/", "https://[::1]:8443"])
def test_loopback_urls_are_taken(url: str) -> None:
    assert admission.loopback_url(url) == url.rstrip("/")


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8443", "https://10.0.0.7:8443", "https://localhost:8443", "https://127.0.0.1",
    "https://127.0.0.1:8443/hook", "https://127.0.0.1:http",
], ids=["plain http", "not loopback", "a name, not an address", "no port", "a path", "a named port"])
def test_other_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        admission.loopback_url(url)


def test_the_serving_certificate_is_signed_by_the_cluster_ca_for_the_loopback(tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    pki = certs.generate(tmp_path, now)
    pair = certs.issue_serving(tmp_path, "fabricsched-webhook", "fabricsched-webhook", ["localhost"],
                               ["127.0.0.1"], now)
    cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
    ca = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usage
    assert pair.key.stat().st_mode & 0o077 == 0
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)


def test_run_flags_serve_the_registered_address(tmp_path: Path) -> None:
    registration = admission.Registration("https://127.0.0.1:9443", tmp_path / "c.crt", tmp_path / "c.key")
    assert registration.run_flags() == ["--webhook-address=127.0.0.1:9443",
                                        f"--webhook-cert-file={tmp_path}/c.crt",
                                        f"--webhook-key-file={tmp_path}/c.key"]


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fabricsched")
    commands.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_cluster_up_registers_the_webhook_on_the_default_loopback_address() -> None:
    args = _parse("cluster", "up", "--dir", "c")
    assert (args.webhook, args.webhook_url) == (True, "https://127.0.0.1:8443")
    assert _parse("cluster", "up", "--dir", "c", "--no-webhook").webhook is False


def test_a_webhook_url_off_the_loopback_is_refused_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse("cluster", "up", "--dir", str(tmp_path / "c"), "--webhook-url", "https://10.1.2.3:8443")
    assert args.handler(args) == 1
    assert "must be https://<loopback IP>:<port>" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()

"""The local control plane's certificates: who each one says it is, and who signed it."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fabricsched.cluster import certs

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> certs.Pki:
    return certs.generate(tmp_path_factory.mktemp("pki"), NOW)


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _subject(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> list[str]:
    return [str(a.value) for a in cert.subject.get_attributes_for_oid(oid)]


def test_serving_certificate_names_loopback_and_the_kubernetes_service(pki: certs.Pki) -> None:
    cert = _cert(pki.apiserver.cert)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) >= {
        "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local"}
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage


@pytest.mark.parametrize(("pair", "common_name", "organizations"), [
    pytest.param("admin", "fabricsched-admin", ["system:masters"], id="admin is in system:masters"),
    pytest.param("controller_manager", "system:kube-controller-manager", [],
                 id="controller manager has its RBAC identity"),
    pytest.param("scheduler", "system:kube-scheduler", [], id="scheduler has its RBAC identity"),
])
def test_client_certificates_carry_the_identity_rbac_expects(
        pki: certs.Pki, pair: str, common_name: str, organizations: list[str]) -> None:
    cert = _cert(getattr(pki, pair).cert)
    assert _subject(cert, NameOID.COMMON_NAME) == [common_name]
    assert _subject(cert, NameOID.ORGANIZATION_NAME) == organizations
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]


@pytest.mark.parametrize("pair", ["apiserver", "admin", "controller_manager", "scheduler"])
def test_every_certificate_is_signed_by_the_ca_and_valid_now(pki: certs.Pki, pair: str) -> None:
    ca = _cert(pki.ca.cert)
    cert = _cert(getattr(pki, pair).cert)
    cert.verify_directly_issued_by(ca)
    assert cert.not_valid_before_utc <= NOW < cert.not_valid_after_utc


def test_ca_is_a_ca(pki: certs.Pki) -> None:
    constraints = _cert(pki.ca.cert).extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca


def test_service_account_public_key_matches_the_private_key(pki: certs.Pki) -> None:
    private = serialization.load_pem_private_key(pki.service_account_key.read_bytes(), None)
    public = serialization.load_pem_public_key(pki.service_account_pub.read_bytes())
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert private.public_key().public_numbers() == public.public_numbers()  # type: ignore[union-attr]


def test_private_keys_are_readable_by_the_owner_only(pki: certs.Pki) -> None:
    for key in (pki.ca.key, pki.admin.key, pki.service_account_key):
        assert key.stat().st_mode & 0o077 == 0

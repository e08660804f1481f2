"""The local control plane's PKI: one CA, the API server's serving certificate, client
certificates per component, and the service-account signing key pair.

ECDSA P-256 keys throughout: generating them takes microseconds where RSA takes tens of
milliseconds each, and every Kubernetes component accepts them (ES256 for service-account
tokens). Everything is written once per cluster folder into ``DIR/pki``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)

APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
APISERVER_IPS = ("127.0.0.1", "10.0.0.1")
"""Loopback, and the first address of the service range (the ``kubernetes`` Service)."""


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Paths of every file the components and kubeconfigs refer to."""

    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    controller_manager: KeyPair
    scheduler: KeyPair
    service_account_key: Path
    """Private key: the API server signs tokens with it, the controller manager too."""
    service_account_pub: Path
    """Public key: the API server verifies tokens with it."""


@dataclass(frozen=True)
class _Issuer:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey,
             now: datetime.datetime) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        # Backdated a little so a clock a few seconds behind does not reject a fresh cluster.
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def _make_ca(now: datetime.datetime) -> _Issuer:
    key = _new_key()
    name = _name("fabricsched-local-ca")
    cert = (
        _builder(name, name, key, now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _Issuer(cert, key)


def _issue(ca: _Issuer, now: datetime.datetime, common_name: str, organizations: Sequence[str] = (),
           *, server: bool = False, dns_names: Sequence[str] = APISERVER_DNS_NAMES,
           ips: Sequence[str] = APISERVER_IPS) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        _builder(_name(common_name, organizations), ca.cert.subject, key, now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_encipherment=False, key_cert_sign=False, crl_sign=False,
                content_commitment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
    )
    if server:
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca.key, hashes.SHA256()), key


def _save(pki_dir: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> KeyPair:
    pair = KeyPair(pki_dir / f"{stem}.crt", pki_dir / f"{stem}.key")
    _write_cert(pair.cert, cert)
    _write_key(pair.key, key)
    return pair


def generate(pki_dir: Path, now: datetime.datetime) -> Pki:
    """Create a fresh PKI in ``pki_dir`` (overwriting any previous one)."""
    pki_dir.mkdir(parents=True, exist_ok=True)
    ca = _make_ca(now)
    ca_pair = _save(pki_dir, "ca", ca.cert, ca.key)

    def client(stem: str, common_name: str, organizations: Sequence[str] = ()) -> KeyPair:
        cert, key = _issue(ca, now, common_name, organizations)
        return _save(pki_dir, stem, cert, key)

    serving_cert, serving_key = _issue(ca, now, "kube-apiserver", server=True)
    sa_key = _new_key()
    _write_key(pki_dir / "sa.key", sa_key)
    (pki_dir / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return Pki(
        ca=ca_pair,
        apiserver=_save(pki_dir, "apiserver", serving_cert, serving_key),
        # system:masters bypasses RBAC: the admin of a throwaway test cluster.
        admin=client("admin", "fabricsched-admin", ["system:masters"]),
        # The CNs below are the identities the default RBAC bootstrap policy grants rights to.
        controller_manager=client("kube-controller-manager", "system:kube-controller-manager"),
        scheduler=client("kube-scheduler", "system:kube-scheduler"),
        service_account_key=pki_dir / "sa.key",
        service_account_pub=pki_dir / "sa.pub",
    )


def issue_serving(pki_dir: Path, stem: str, common_name: str, dns_names: Sequence[str], ips: Sequence[str],
                  now: datetime.datetime) -> KeyPair:
    """One more serving certificate from the CA ``generate`` wrote into ``pki_dir`` (for a
    server the API server calls, such as an admission webhook), saved as ``stem.crt/.key``."""
    ca_cert = x509.load_pem_x509_certificate((pki_dir / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki_dir / "ca.key").read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{pki_dir / 'ca.key'} is not the ECDSA key of this PKI")
    cert, key = _issue(_Issuer(ca_cert, ca_key), now, common_name, server=True, dns_names=dns_names, ips=ips)
    return _save(pki_dir, stem, cert, key)

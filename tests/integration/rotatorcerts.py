"""Certificates for controllers that keep theirs with a certificate rotator (Kueue's own,
open-policy-agent/cert-controller in the Kubeflow training operator).

Such a rotator keeps a Secret (``ca.crt``/``ca.key``/``tls.crt``/``tls.key``) and replaces it
unless it already holds a valid CA whose certificate names ``ca_name`` and a server certificate
for ``<service>.<namespace>.svc`` signed by it, valid beyond the rotator's look-ahead (90 days).
The tests issue such a Secret with 127.0.0.1 among the server certificate's SANs, so the API
server can reach the webhook on a loopback URL and verify it: the rotator then keeps it.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=400)  # the rotators renew anything expiring within 90 days


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: rsa.RSAPrivateKey) -> bytes:
    # PKCS#1 RSA: the rotators parse their keys with x509.ParsePKCS1PrivateKey.
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _certificate(subject: str, issuer: x509.Name | None, signer: rsa.RSAPrivateKey,
                 key: rsa.RSAPrivateKey, sans: list[x509.GeneralName], ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.SubjectAlternativeName(sans), critical=False))
    if not ca:
        usage = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
        builder = builder.add_extension(usage, critical=False)
    return builder.sign(signer, hashes.SHA256())


def issue(ca_name: str, service_dns: str) -> dict[str, bytes]:
    """ca.crt/ca.key/tls.crt/tls.key as a rotator keeps them: a CA naming ``ca_name`` and a
    server certificate for ``service_dns`` and 127.0.0.1."""
    ca_key, key = (rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2))
    ca = _certificate(ca_name, None, ca_key, ca_key, [x509.DNSName(ca_name)], ca=True)
    server = _certificate(service_dns, ca.subject, ca_key, key,
                          [x509.DNSName(service_dns), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
                          ca=False)
    return {"ca.crt": _pem(ca), "ca.key": _key_pem(ca_key), "tls.crt": _pem(server), "tls.key": _key_pem(key)}


def secret(name: str, namespace: str, data: dict[str, bytes]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque", "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}

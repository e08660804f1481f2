"""The namespace opt-in webhook on a local cluster: a serving certificate from the cluster's CA
and the MutatingWebhookConfiguration with a loopback ``url``.

``fabricsched cluster up`` calls ``register`` (unless ``--no-webhook``); tests call it with a
port of their own. The API server calls loopback webhook URLs as it calls any other (the
control plane runs on this machine), so nothing else is needed: ``fabricsched run`` with the
flags ``Registration.run_flags`` prints serves the other end. The configuration fails open
(``failurePolicy: Ignore``) and selects only labelled namespaces, so while nothing listens
pod creation is unaffected.
"""

from __future__ import annotations

import datetime
import ipaddress
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from fabricsched.api import admission
from fabricsched.cluster import certs, components, errors, rest

CERT_STEM = "fabricsched-webhook"
_CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


@dataclass(frozen=True)
class Registration:
    url: str
    """Where the API server calls the webhook (without the handler's path)."""
    cert: Path
    key: Path

    @property
    def address(self) -> str:
        parts = urllib.parse.urlsplit(self.url)
        return parts.netloc

    def run_flags(self) -> list[str]:
        """The ``fabricsched run`` flags that serve this registration."""
        return [f"--webhook-address={self.address}", f"--webhook-cert-file={self.cert}",
                f"--webhook-key-file={self.key}"]


def loopback_url(url: str) -> str:
    """``url`` checked: https, a loopback IP address, a port; raises ValueError otherwise."""
    parts = urllib.parse.urlsplit(url)
    try:
        loopback = parts.hostname is not None and ipaddress.ip_address(parts.hostname).is_loopback
        port = parts.port
    except ValueError:
        loopback, port = False, None
    if parts.scheme != "https" or not loopback or port is None or parts.path not in ("", "/"):
        raise ValueError(f"webhook URL {url[:80]!r} must be https://<loopback IP>:<port>")
    return f"https://{parts.netloc}"


def register(directory: Path, api: rest.Client, url: str = admission.DEFAULT_URL,
             now: datetime.datetime | None = None) -> Registration:
    """Issue the webhook's certificate in the cluster folder ``directory`` and (re)create the
    configuration pointing at ``url``."""
    url = loopback_url(url)
    pki = components.Layout(directory).pki
    host = urllib.parse.urlsplit(url).hostname or ""
    pair = certs.issue_serving(pki, CERT_STEM, "fabricsched-webhook", ["localhost"], [host],
                               now or datetime.datetime.now(datetime.UTC))
    body = admission.mutating_configuration(url, (pki / "ca.crt").read_bytes())
    unregister(api)
    api.call("POST", _CONFIGURATIONS, body)
    return Registration(url, pair.cert, pair.key)


def unregister(api: rest.Client) -> None:
    """Remove the configuration (absent is fine)."""
    path = f"{_CONFIGURATIONS}/{admission.CONFIGURATION_NAME}"
    status, answer = api.request("DELETE", path)
    if status not in (200, 202, 404):
        raise errors.api_error("DELETE", path, status, str(answer)[:200])

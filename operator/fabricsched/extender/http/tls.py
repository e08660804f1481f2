"""Mutual TLS of the extender's listener: the kube-scheduler's ``enableHTTPS`` + ``tlsConfig``.

The extender serves its certificate and answers only a client that shows a certificate signed by
the given CA (the chart generates both pairs from one CA). The context is built when the options
are checked, so a missing or mismatched file fails ``fabricsched run`` at start, not at the
scheduler's first call.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TLSFiles:
    cert: Path
    """The extender's serving certificate (PEM; a chain may follow it)."""
    key: Path
    """Its private key (PEM)."""
    client_ca: Path
    """CA certificates a client certificate must be signed by (PEM)."""

    def context(self) -> ssl.SSLContext:
        """The server context; raises ValueError naming the file that does not do."""
        for what, path in (("certificate", self.cert), ("key", self.key), ("client CA", self.client_ca)):
            if not path.is_file():
                raise ValueError(f"TLS {what} {path} is not a readable file")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = ssl.CERT_REQUIRED
        try:
            context.load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, OSError) as e:
            raise ValueError(f"TLS certificate {self.cert} and key {self.key} do not load: {e}") from e
        try:
            context.load_verify_locations(cafile=self.client_ca)
        except (ssl.SSLError, OSError) as e:
            raise ValueError(f"client CA {self.client_ca} does not load: {e}") from e
        return context

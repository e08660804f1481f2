"""What the stand-in kubelet writes, and the kubeconfigs the components read."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

from fabricsched.cluster import certs, kubeconfig, kubelet

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
POD: dict[str, Any] = {"spec": {"nodeName": "gpu-001", "containers": [{"name": "trainer", "image": "t:1"}]}}


@pytest.mark.parametrize(("phase", "ready", "state", "exit_code"), [
    pytest.param("Running", "True", "running", None, id="running pod is ready"),
    pytest.param("Succeeded", "False", "terminated", 0, id="succeeded pod exited zero"),
    pytest.param("Failed", "False", "terminated", 1, id="failed pod exited non-zero"),
])
def test_pod_status_matches_the_phase(phase: kubelet.Phase, ready: str, state: str,
                                      exit_code: int | None) -> None:
    status = kubelet.pod_status(POD, phase, NOW)
    assert status["phase"] == phase
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == ready
    [container] = status["containerStatuses"]
    assert container["name"] == "trainer" and list(container["state"]) == [state]
    if exit_code is not None:
        assert container["state"]["terminated"]["exitCode"] == exit_code


def test_an_explicit_exit_code_is_reported() -> None:
    status = kubelet.pod_status(POD, "Failed", NOW, exit_code=137)
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137


def test_kubeconfig_round_trips_server_and_embedded_certificates(tmp_path: Path) -> None:
    pki = certs.generate(tmp_path / "pki", NOW)
    server = "https://127.0.0.1:6443"
    path = kubeconfig.write(tmp_path / "kubeconfig", server, pki.ca.cert, pki.admin, "admin")
    creds = kubeconfig.read(path)
    assert creds.server == "https://127.0.0.1:6443"
    assert creds.ca_pem == pki.ca.cert.read_bytes()
    assert creds.cert_pem == pki.admin.cert.read_bytes()
    assert creds.key_pem == pki.admin.key.read_bytes()
    assert path.stat().st_mode & 0o077 == 0

"""What kwok is told to play (its configuration and Stages), and the kubeconfigs the components read."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import yaml

from fabricsched.cluster import certs, components, kubeconfig, kwok

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _stages() -> dict[str, dict[str, Any]]:
    return {s["metadata"]["name"]: s["spec"] for s in kwok.stages()}


def _expressions(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["key"]: e for e in spec["selector"]["matchExpressions"]}


def test_only_an_annotated_running_pod_finishes_and_each_phase_has_its_exit_code() -> None:
    stages = _stages()
    key = f'.metadata.annotations["{kwok.FINISH_ANNOTATION}"]'
    for phase, code in (("Succeeded", 0), ("Failed", 1)):
        spec = stages[f"pod-{phase.lower()}"]
        found = _expressions(spec)
        assert found[key] == {"key": key, "operator": "In", "values": [phase]}
        assert found[".status.phase"]["values"] == ["Running"]
        template = spec["next"]["statusTemplate"]
        assert f"phase: {phase}\n" in template and f"exitCode: {code}," in template
    # Every stage that writes a terminal phase is keyed on the annotation: no default completion.
    terminal = [name for name, spec in stages.items()
                if "phase: Succeeded" in spec["next"].get("statusTemplate", "")
                or "phase: Failed" in spec["next"].get("statusTemplate", "")]
    assert all(key in _expressions(stages[name]) for name in terminal) and len(terminal) == 2


def test_a_bound_pending_pod_goes_running_and_a_deleted_one_is_removed() -> None:
    stages = _stages()
    running = stages["pod-running"]
    assert _expressions(running)[".status.phase"]["values"] == ["Pending"]
    assert "phase: Running\n" in running["next"]["statusTemplate"]
    assert stages["pod-delete"]["next"] == {"delete": True}
    assert _expressions(stages["pod-delete"])[".metadata.deletionTimestamp"]["operator"] == "Exists"


def test_the_heartbeat_touches_only_the_ready_conditions_timestamp() -> None:
    # Conditions are the test's input: the heartbeat must never rewrite a status.
    heartbeat = yaml.safe_load(_stages()["node-heartbeat"]["next"]["statusTemplate"].replace(
        "{{ Now | Quote }}", '"2026-01-01T00:00:00Z"'))
    assert heartbeat == {"conditions": [{"type": "Ready", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]}


def test_a_node_reports_an_unchanged_status_as_seldom_as_a_kubelet() -> None:
    # Every node status write reaches every watcher of nodes: every 20 s at 10,000 nodes kept
    # the API server busy. A kubelet reports an unchanged status every 5 minutes.
    delay = _stages()["node-heartbeat"]["delay"]
    shortest, longest = delay["durationMilliseconds"], delay["jitterDurationMilliseconds"]
    assert (shortest + longest) / 2 == 300_000


def test_nodes_created_together_do_not_report_together() -> None:
    # kwok draws each wait uniformly between the two durations: over a spread of 10 %, 10,000
    # nodes created at once wrote their status within 30 s of each other every 5 minutes.
    delay = _stages()["node-heartbeat"]["delay"]
    assert delay["jitterDurationMilliseconds"] - delay["durationMilliseconds"] >= 300_000


def test_configuration_is_explicit_loopback_and_without_debugging_handlers(tmp_path: Path) -> None:
    path = kwok.write_configuration(tmp_path / "kwok.yaml", "127.0.0.1:4321")
    config, *stages = yaml.safe_load_all(path.read_text())
    assert config["kind"] == "KwokConfiguration" and len(stages) == len(kwok.stages())
    options = config["options"]
    assert options["serverAddress"] == "127.0.0.1:4321" and options["manageAllNodes"] is True
    assert options["enableDebuggingHandlers"] is False and options["enableProfilingHandler"] is False
    assert options["nodeLeaseDurationSeconds"] > 0


def test_kwok_reads_our_files_only() -> None:
    layout = components.Layout(Path("/c"))
    argv = kwok.argv(Path("/bin/kwok"), layout.kwok_config, layout.admin_kubeconfig)
    assert "--config=/c/kwok.yaml" in argv and "--kubeconfig=/c/kubeconfig" in argv
    # KWOK_WORKDIR is where kwok would find a default ~/.kwok/kwok.yaml: inside the cluster folder.
    assert kwok.environment(layout.kwok_workdir) == {"KWOK_WORKDIR": "/c/kwok"}


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

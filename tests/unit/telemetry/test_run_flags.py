"""``fabricsched run``'s Prometheus flags become the policy the telemetry client enforces."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fabricsched.app import commands
from fabricsched.telemetry import access


def parse(tmp_path: Path, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    commands.register(parser.add_subparsers())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    return parser.parse_args(["run", "--kubeconfig", str(kubeconfig), *argv])


def test_without_flags_no_url_is_allowed_and_credentials_come_from_the_chart_mount(tmp_path: Path) -> None:
    policy = commands.options_from(parse(tmp_path)).operator.prometheus
    assert policy.allowed == ()
    assert [str(d) for d in policy.credential_dirs] == [access.DEFAULT_CREDENTIALS_DIR]
    with pytest.raises(access.AccessError):
        policy.check_url("http://prometheus.monitoring:9090")


def test_repeated_flags_allow_each_prefix_and_directory(tmp_path: Path) -> None:
    args = parse(tmp_path, "--prometheus-allow-url=http://prom.monitoring:9090",
                 "--prometheus-allow-url=https://mimir.example.com/prometheus",
                 "--prometheus-credentials-dir=/run/secrets/prom")
    policy = commands.options_from(args).operator.prometheus
    assert policy.check_url("https://mimir.example.com/prometheus/") == "https://mimir.example.com/prometheus"
    assert policy.check_url("http://prom.monitoring:9090") == "http://prom.monitoring:9090"
    assert [str(d) for d in policy.credential_dirs] == ["/run/secrets/prom"]


@pytest.mark.parametrize("argv", [["--prometheus-allow-url=prom:9090"], ["--prometheus-credentials-dir=rel"]],
                         ids=["a prefix without a scheme", "a relative credentials dir"])
def test_bad_prometheus_flags_are_refused_at_start(tmp_path: Path, argv: list[str]) -> None:
    with pytest.raises(ValueError, match=argv[0].split("=")[0]):
        commands.options_from(parse(tmp_path, *argv))

"""``fabricsched run``'s flags: each part's options, the defaults, and the checks that refuse
a bad flag at the command line (naming it) rather than at start."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from kubernetes import client

from fabricsched import cli
from fabricsched.app import commands
from fabricsched.extender import service
from fabricsched.extender.book import released
from fabricsched.extender.decide import preemption_options
from fabricsched.extender.kube import disruptions, evictions
from fabricsched.placement import request
from fabricsched.sim import policies


def parse(tmp_path: Path, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    commands.register(parser.add_subparsers())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    return parser.parse_args(["run", "--kubeconfig", str(kubeconfig), *argv])


def test_run_options_take_the_flags(tmp_path: Path) -> None:
    args = parse(tmp_path, "--health-address", "0.0.0.0:9000", "--log-format", "json",
                 "--namespace-for-leases", "fabric")
    options = commands.options_from(args)
    assert (options.operator.health_address, options.log_format, options.leases.namespace) == (
        "0.0.0.0:9000", "json", "fabric")
    assert options.extender.address == "127.0.0.1:8888"


def test_the_reservation_ttl_and_the_body_limit_reach_the_extender(tmp_path: Path) -> None:
    options = commands.options_from(parse(tmp_path, "--reservation-ttl", "7.5",
                                          "--extender-max-body-bytes", "65536"))
    assert options.extender.reservation_ttl_s == 7.5
    assert options.extender.book_options().reservation_ttl_s == 7.5
    assert options.extender.server_options().max_body_bytes == 65536


def test_without_flags_the_documented_defaults_hold(tmp_path: Path) -> None:
    options = commands.options_from(parse(tmp_path))
    assert (options.extender.reservation_ttl_s, options.extender.max_body_bytes) == (120.0, 8 * 1024 * 1024)
    assert options.leases.namespace == "kube-system"


@pytest.mark.parametrize(("argv", "message"), [
    (["--health-address", "8081"], "--health-address"),
    (["--extender-address", "localhost:http"], "--extender-address"),
    (["--status-interval", "0"], "--status-interval"),
    (["--reservation-ttl", "0"], "--reservation-ttl"),
    (["--reservation-ttl", "-5"], "--reservation-ttl"),
    (["--extender-max-body-bytes", "100"], "--extender-max-body-bytes"),
    (["--namespace-for-leases", "Kube_System"], "--namespace-for-leases"),
], ids=["an address without a host is refused", "a named port is refused", "a zero interval is refused",
        "a zero reservation TTL is refused", "a negative reservation TTL is refused",
        "a body limit too small for any pod is refused", "a lease namespace that is no DNS label is refused"])
def test_run_options_refuse_bad_flags(tmp_path: Path, argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        commands.options_from(parse(tmp_path, *argv))


def test_missing_kubeconfig_is_refused(tmp_path: Path) -> None:
    args = parse(tmp_path)
    args.kubeconfig = tmp_path / "absent"
    with pytest.raises(ValueError, match="does not exist"):
        commands.options_from(args)


@pytest.mark.parametrize(
    ("flag", "environ", "expected"),
    [
        pytest.param(None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, None,
                     id="in a pod without flags: service account"),
        pytest.param("given", {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "given",
                     id="an explicit flag wins in a pod"),
        pytest.param(None, {"KUBECONFIG": "env", "KUBERNETES_SERVICE_HOST": "h"}, "env",
                     id="KUBECONFIG wins over the service account"),
    ],
)
def test_kubeconfig_resolution_follows_client_go_order(
    tmp_path: Path, flag: str | None, environ: dict[str, str], expected: str | None
) -> None:
    for name in ("given", "env"):
        (tmp_path / name).write_text("apiVersion: v1\nkind: Config\n")
    env = {k: str(tmp_path / v) if k == "KUBECONFIG" else v for k, v in environ.items()}
    resolved = commands.resolve_kubeconfig(tmp_path / flag if flag else None, env)
    assert resolved == (tmp_path / expected if expected else None)


def test_run_flags_set_the_extenders_default_wait(tmp_path: Path) -> None:
    args = parse(tmp_path, "--locality-wait", "10m", "--locality-tolerance", "0.1",
                 "--locality-hold-limit", "1")
    options = commands.options_from(args)
    assert options.extender.locality_wait == request.LocalityWait(600.0, 0.1, hold_limit=1.0)


def test_by_default_run_waits_as_the_simulator_does_and_0s_turns_it_off(tmp_path: Path) -> None:
    # One constant: the extender's default is the simulator's fabric policy's.
    assert commands.options_from(parse(tmp_path)).extender.locality_wait == policies.DEFAULT_LOCALITY_WAIT
    assert policies.DEFAULT_LOCALITY_WAIT.enabled
    off = commands.options_from(parse(tmp_path, "--locality-wait", "0s")).extender.locality_wait
    assert not off.enabled


def test_both_help_texts_print_the_default_wait_the_same_way(capsys: pytest.CaptureFixture[str]) -> None:
    shown = f"(default: {policies.DEFAULT_LOCALITY_WAIT.timeout_s:g}s)"
    for command in ("run", "simulate"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        after = text[text.index("--locality-wait ", text.index("options:")):]
        assert shown in after[:after.index("--locality-tolerance FRACTION")], command


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--locality-wait", "600"], "--locality-wait"),
        (["--locality-tolerance", "5"], "--locality-tolerance"),
        (["--locality-hold-limit", "0.5"], "--locality-hold-limit"),
    ],
    ids=["a wait without a unit is refused", "a tolerance given as a percentage is refused",
         "a hold limit below one timeout is refused"],
)
def test_run_refuses_bad_locality_flags_at_the_command_line(
    tmp_path: Path, argv: list[str], flag: str
) -> None:
    with pytest.raises(ValueError, match=rf"^{flag}: "):
        commands.options_from(parse(tmp_path, *argv))


def test_the_per_namespace_reservation_limit_defaults_to_none_and_reaches_the_extender(
    tmp_path: Path,
) -> None:
    assert commands.options_from(parse(tmp_path)).extender.max_reserved_gpus_per_namespace == 0
    flagged = commands.options_from(parse(tmp_path, "--max-reserved-gpus-per-namespace", "64"))
    assert flagged.extender.max_reserved_gpus_per_namespace == 64
    with pytest.raises(ValueError, match=r"^--max-reserved-gpus-per-namespace: "):
        commands.options_from(parse(tmp_path, "--max-reserved-gpus-per-namespace", "-1"))


def test_restart_placement_defaults_to_previous_and_fresh_restores_the_old_behaviour(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    default = commands.options_from(parse(tmp_path)).extender
    assert default.restart_placement == "previous"
    assert default.releases().window_s == released.DEFAULT_WINDOW_S
    fresh = commands.options_from(parse(tmp_path, "--restart-placement", "fresh")).extender
    assert fresh.restart_placement == "fresh" and fresh.releases().window_s == 0
    with pytest.raises(SystemExit):
        parse(tmp_path, "--restart-placement", "same")
    assert "invalid choice: 'same'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--restart-placement {previous,fresh}" in text and "(default: previous)" in text


def test_fit_order_defaults_to_top_down_and_holding_restores_the_rule_before_issue_31(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    default = commands.options_from(parse(tmp_path)).extender
    assert default.fit_order is request.FitOrder.TOP_DOWN
    assert default.preemption_options().placement.fit_order is request.FitOrder.TOP_DOWN
    holding = commands.options_from(parse(tmp_path, "--fit-order", "holding")).extender
    assert holding.fit_order is request.FitOrder.HOLDING
    # Plans and preemption's plans alike.
    assert holding.preemption_options().placement.fit_order is request.FitOrder.HOLDING
    with pytest.raises(SystemExit):
        parse(tmp_path, "--fit-order", "bottom-up")
    assert "invalid choice: 'bottom-up'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--fit-order {top-down,holding}" in text and "(default: top-down)" in text


def test_preemption_budgets_default_to_their_watches_and_read_restores_the_reads_at_each_decision(
    tmp_path: Path,
) -> None:
    default = commands.options_from(parse(tmp_path)).extender.preemption
    assert default.budgets_from == "watch"
    calls, follow = service.preemption_calls_on(client.ApiClient(), default)
    assert isinstance(calls, disruptions.FollowedDisruptions) and follow is not None
    read = commands.options_from(parse(tmp_path, "--preemption-budgets", "read")).extender.preemption
    calls, follow = service.preemption_calls_on(client.ApiClient(), read)
    assert isinstance(calls, evictions.ApiPreemptionCalls) and follow is None
    with pytest.raises(ValueError, match="preemption budgets must be one of watch, read"):
        preemption_options.PreemptionOptions(budgets_from="api")

"""The front's diagnosis callable: its options travel in the options frame, and an API server it
cannot use is an answer with a status, not an exception."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fabricsched.app import front, front_diagnose, front_wire
from fabricsched.dashboard import diagnosis
from fabricsched.dashboard import server as dashboard_server
from fabricsched.telemetry import access


def test_the_options_travel_to_the_front(tmp_path: Path) -> None:
    policy = access.AccessPolicy.parse(["http://prometheus.monitoring:9090"], [str(tmp_path)])
    options = front.FrontOptions(None, dashboard_server.DashboardOptions(),
                                 diagnosis=front_diagnose.PageDiagnosis("/k/config", policy))
    received = front_wire.read_options(front_wire.options_frame(options)[8:])
    assert received == options and received.diagnosis.prometheus.check_url("http://prometheus.monitoring:9090/")


def test_an_unusable_kubeconfig_is_a_503_and_the_next_ask_tries_again(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    diagnoser = front_diagnose.Diagnoser(front_diagnose.PageDiagnosis(str(missing), access.AccessPolicy()))
    asked = diagnosis.GangAsked("ns/train@u", "ns", "train", 3600)
    try:
        first = asyncio.run(diagnoser(asked))
        second = asyncio.run(diagnoser(asked))
    finally:
        diagnoser.close()
    assert first.status == second.status == 503 and "kubeconfig" in str(first.body["error"])

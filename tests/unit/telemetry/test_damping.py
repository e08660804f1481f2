"""Flap damping: N consecutive evaluations to degrade, held while flapping, evidence in the reason."""

from __future__ import annotations

import pytest
from telemetry_builders import make_rule

from fabricsched.telemetry import rules
from fabricsched.topology import fabric, health

H1 = health.ElementId.node("h1")
RULE = make_rule("symbol-errors", comparison=">", threshold=1)


def run(verdicts: str, options: rules.DampingOptions | None = None, step: float = 30.0,
        rule: rules.Rule = RULE) -> list[bool]:
    """Feed one reading per character (B = fires with value 5, g = good, - = no sample) and return
    whether the element is held unhealthy after each evaluation."""
    damper = rules.Damper(options or rules.DampingOptions())
    held = []
    for i, verdict in enumerate(verdicts):
        readings = {}
        if verdict != "-":
            value = 5.0 if verdict == "B" else 0.0
            readings[H1] = rules.Reading(H1, value, rule.fires(value))
        damper.observe(i * step, rule, readings)
        held.append(any(o.element == H1 for o in damper.observations()))
    return held


def marks(held: list[bool]) -> str:
    return "".join("X" if h else "." for h in held)


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        ("gBBBg", "..XX."),
        ("gBgBB", "...XX"),
        ("gBgggg", "......"),
        ("BBB--", ".XX.."),
        ("BgBg", "..XX"),
        ("BgBgggggggggggggggggggggg", "..XXXXXXXXXXXXXXXXXXX...."),
    ],
    ids=[
        "two consecutive firing evaluations degrade, one good one releases",
        "a streak restarts after a good reading",
        "one blip is ignored",
        "a vanished series reads good",
        "three verdict changes within the window hold it while it flaps",
        "the hold ends when the third-last change leaves the 600 s window",
    ],
)
def test_damping_sequences(verdicts: str, expected: str) -> None:
    assert marks(run(verdicts)) == expected


def test_degrade_after_and_flap_threshold_are_options() -> None:
    options = rules.DampingOptions(degrade_after=3, flap_changes=5, flap_window_s=600)
    assert marks(run("BBBB", options)) == "..XX"
    assert marks(run("BgBgB", options)) == "....X"


def test_the_observation_names_the_rule_value_and_source_and_says_it_flaps() -> None:
    damper = rules.Damper(rules.DampingOptions())
    rule = make_rule("ib-link-downed", threshold=0, rail_label="device")
    for t, value in ((0.0, 2.0), (30.0, 0.0), (60.0, 3.0), (90.0, 0.0)):
        damper.observe(t, rule, {H1: rules.Reading(H1, value, rule.fires(value), "device mlx5_1")})
    [obs] = damper.observations()
    assert (obs.source, obs.rule, obs.value, obs.state) == ("prometheus", "ib-link-downed", 3.0,
                                                            fabric.HealthState.DEGRADED)
    assert obs.reason == ("prometheus rule ib-link-downed: 3 > 0 (device mlx5_1); "
                          "flapping: 4 changes in 600s")


def test_from_value_capacity_follows_the_latest_firing_value() -> None:
    damper = rules.Damper(rules.DampingOptions(degrade_after=1))
    rule = make_rule("ib-link-rate", comparison="<", threshold=1, capacity_from_value=True)
    damper.observe(0.0, rule, {H1: rules.Reading(H1, 0.5, True)})
    damper.observe(30.0, rule, {H1: rules.Reading(H1, 0.25, True)})
    [obs] = damper.observations()
    assert (obs.capacity, obs.value) == (0.25, 0.25)


def test_a_seeded_element_stays_held_until_a_good_reading() -> None:
    damper = rules.Damper(rules.DampingOptions(degrade_after=3))
    damper.seed(RULE, H1, 9.0, now=0.0)
    assert [o.value for o in damper.observations()] == [9.0]
    damper.observe(30.0, RULE, {H1: rules.Reading(H1, 4.0, True)})
    assert [o.value for o in damper.observations()] == [4.0]
    damper.observe(60.0, RULE, {H1: rules.Reading(H1, 0.0, False)})
    assert damper.observations() == []


def test_retain_forgets_rules_that_were_removed() -> None:
    damper = rules.Damper(rules.DampingOptions(degrade_after=1))
    damper.observe(0.0, RULE, {H1: rules.Reading(H1, 5.0, True)})
    assert damper.observations()
    damper.retain([make_rule("other")])
    assert damper.observations() == []


def test_the_tracker_holds_a_released_element_for_recover_after_seconds() -> None:
    """Damper and tracker together: release by the rule, recovery after the hysteresis."""
    damper = rules.Damper(rules.DampingOptions())
    tracker = health.HealthTracker(recover_after_s=120, degraded_capacity=0.5)
    states = {}
    for t, value in ((0, 5), (30, 5), (60, 0), (90, 0), (150, 0), (180, 0)):
        damper.observe(float(t), RULE, {H1: rules.Reading(H1, float(value), RULE.fires(value))})
        tracker.update(float(t), "prometheus", damper.observations())
        record = tracker.get(H1)
        states[t] = record.state.value if record else "healthy"
    assert states == {0: "healthy", 30: "degraded", 60: "degraded", 90: "degraded", 150: "degraded",
                      180: "healthy"}

"""The locality wait's inputs as a cluster gives them: annotations, flags, creation times."""

from __future__ import annotations

import pytest

from fabricsched import ids
from fabricsched.extender.decide import locality
from fabricsched.placement import patience, request

DEFAULT = request.LocalityWait(timeout_s=0.0, tolerance=0.05)
KEY = ids.gang_key("train", "g", "uid-1")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("600s", 600.0),
        ("10m", 600.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("90s500ms", 90.5),
        (" 2m ", 120.0),
        ("0", 0.0),
        ("0s", 0.0),
    ],
    ids=lambda v: repr(v) if isinstance(v, str) else None,
)
def test_a_go_style_duration_is_read_in_seconds(text: str, seconds: float) -> None:
    assert locality.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    ["", "600", "-10m", "10 minutes", "5d", "m", "1h-5m", "1e3s"],
    ids=lambda v: f"{v!r} is refused",
)
def test_anything_else_is_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        locality.parse_duration(text)


@pytest.mark.parametrize(("text", "value"), [("0.05", 0.05), ("0", 0.0), ("1", 1.0), (" 0.2 ", 0.2)])
def test_a_tolerance_is_a_fraction(text: str, value: float) -> None:
    assert locality.parse_tolerance(text) == value


@pytest.mark.parametrize(
    "text",
    ["5", "-0.1", "five percent", "nan", "inf", "5%"],
    ids=lambda v: f"{v!r} is refused",
)
def test_a_tolerance_outside_zero_to_one_or_not_a_number_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"0\.05 = 5%"):
        locality.parse_tolerance(text)


def test_the_annotations_override_the_cluster_default() -> None:
    found = locality.settings(
        {locality.WAIT_ANNOTATION: "10m", locality.TOLERANCE_ANNOTATION: "0.1"}, DEFAULT
    )
    assert found == locality.Settings(request.LocalityWait(600.0, 0.1))
    # The cluster's hold limit stays: no annotation sets it.
    once = request.LocalityWait(1800.0, hold_limit=1.0)
    assert locality.settings({locality.WAIT_ANNOTATION: "10m"}, once).wait.hold_limit == 1.0


def test_without_annotations_the_cluster_default_applies() -> None:
    default = request.LocalityWait(1800.0, 0.02)
    assert locality.settings({}, default) == locality.Settings(default)


def test_a_zero_annotation_turns_off_a_cluster_default() -> None:
    found = locality.settings({locality.WAIT_ANNOTATION: "0s"}, request.LocalityWait(1800.0))
    assert not found.wait.enabled and not found.problems


@pytest.mark.parametrize(
    ("annotations", "named"),
    [
        ({locality.WAIT_ANNOTATION: "ten minutes"}, locality.WAIT_ANNOTATION),
        (
            {locality.WAIT_ANNOTATION: "10m", locality.TOLERANCE_ANNOTATION: "5"},
            locality.TOLERANCE_ANNOTATION,
        ),
    ],
    ids=["an unreadable wait", "a tolerance given as a percentage"],
)
def test_an_invalid_annotation_turns_the_wait_off_and_says_which(
    annotations: dict[str, str], named: str
) -> None:
    found = locality.settings(annotations, request.LocalityWait(3600.0))
    assert not found.wait.enabled
    assert len(found.problems) == 1 and found.problems[0].startswith(f"annotation {named}: ")
    assert repr(annotations[named]) in found.problems[0]


def test_the_cluster_default_names_the_flag_it_refuses() -> None:
    assert locality.cluster_default("10m", 0.05) == request.LocalityWait(600.0, 0.05)
    with pytest.raises(ValueError, match=r"^--locality-wait: "):
        locality.cluster_default("10", 0.05)
    with pytest.raises(ValueError, match=r"^--locality-tolerance: "):
        locality.cluster_default("10m", 2.0)


@pytest.mark.parametrize(
    ("stamp", "seconds"),
    [("2023-11-14T22:13:20Z", 1_700_000_000.0), ("2023-11-14T23:13:20+01:00", 1_700_000_000.0)],
    ids=["in UTC", "with an offset"],
)
def test_a_creation_timestamp_is_read_in_seconds_since_the_epoch(stamp: str, seconds: float) -> None:
    assert locality.created_at({"metadata": {"creationTimestamp": stamp}}) == seconds


@pytest.mark.parametrize("metadata", [{}, {"creationTimestamp": "yesterday"}], ids=["absent", "unreadable"])
def test_no_creation_time_is_none(metadata: dict[str, str]) -> None:
    assert locality.created_at({"metadata": metadata}) is None


def test_a_gang_is_held_from_its_first_plan_whichever_pod_asks() -> None:
    clocks = locality.Clocks()
    assert clocks.waited(KEY, now=1000.0) == patience.Held(0.0, 0.0)
    assert clocks.waited(KEY, now=1300.0) == patience.Held(300.0, 300.0)
    clocks.forget(KEY)  # it started
    assert clocks.waited(KEY, now=2000.0) == patience.Held(0.0, 0.0)


def test_a_gang_that_lost_its_fit_is_held_afresh_and_keeps_its_first_hold() -> None:
    clocks = locality.Clocks()
    clocks.waited(KEY, now=1000.0)
    clocks.lost_fit(KEY, now=1500.0)
    clocks.lost_fit(KEY, now=1800.0)  # asked again, still no plan
    assert clocks.waited(KEY, now=2000.0) == patience.Held(0.0, 1000.0)
    assert clocks.waited(KEY, now=2100.0) == patience.Held(100.0, 1100.0)


def test_a_gang_never_held_does_not_get_a_clock_from_losing_its_fit() -> None:
    clocks = locality.Clocks()
    clocks.lost_fit(KEY, now=1000.0)
    assert len(clocks) == 0
    assert clocks.waited(KEY, now=1200.0) == patience.Held(0.0, 0.0)


def test_gangs_not_asked_about_for_long_are_forgotten() -> None:
    clocks = locality.Clocks()
    clocks.waited(KEY, now=0.0)
    clocks.waited(ids.gang_key("train", "h", "uid-2"), now=locality.FORGET_AFTER_S)
    clocks.prune(now=locality.FORGET_AFTER_S + 1)
    assert len(clocks) == 1

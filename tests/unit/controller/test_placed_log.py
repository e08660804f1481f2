"""The state's log of changed pods on nodes (controller.placed_log): what preemption's index
follows between decisions instead of passing over every pod again."""

from __future__ import annotations

from fabricsched.controller import placed_log


def test_since_names_the_pods_changed_after_a_version_and_none_when_it_reaches_back_no_further() -> None:
    log = placed_log.PlacedLog(limit=8)
    assert log.since(0) == set()
    log.moved([("a", "p0")])
    log.moved([])  # nothing moved: the version stays
    assert log.version == 1
    log.moved([("a", "p1"), ("a", "p2")])  # one change of two records: one version
    assert log.version == 2
    assert log.since(0) == {("a", "p0"), ("a", "p1"), ("a", "p2")}
    assert log.since(1) == {("a", "p1"), ("a", "p2")}
    assert log.since(2) == set()
    assert log.since(3) is None, "a version it never gave"
    for i in range(3, 10):
        log.moved([("b", f"q{i}")])
    assert log.since(0) is None, "the oldest entries were dropped"
    kept_from = min(v for v in range(log.version + 1) if log.since(v) is not None)
    assert log.since(kept_from) == {("b", f"q{i}") for i in range(kept_from + 1, 10)}
    assert log.since(log.version) == set()


def test_one_change_larger_than_the_log_is_never_split() -> None:
    log = placed_log.PlacedLog(limit=4)
    log.moved([("a", "p0")])
    log.moved([("a", f"p{i}") for i in range(1, 11)])
    assert log.since(0) is None
    assert log.since(1) is None, "the change that overflowed it is dropped whole"
    assert log.since(2) == set()


def test_a_flood_of_changes_keeps_the_log_bounded_and_an_old_version_gets_none() -> None:
    log = placed_log.PlacedLog()
    for i in range(100_000):
        log.moved([("flood", f"p{i}" + "x" * 100)])
        assert len(log._keys) <= placed_log.MAX_ENTRIES
    assert len(log._keys) == len(log._versions) >= placed_log.MAX_ENTRIES // 2
    assert log.since(0) is None, "too long ago: the index makes a full pass"
    assert log.since(log.version - 10) == {("flood", f"p{i}" + "x" * 100) for i in range(99_990, 100_000)}

from __future__ import annotations

import explain_objects as o

from fabricsched.explain import events


def test_the_newest_ten_are_kept_oldest_first() -> None:
    items = [o.event(f"R{i:02d}", f"2026-12-01T10:{i:02d}:00Z") for i in reversed(range(15))]
    lines = events.recent(items)
    assert [e.reason for e in lines] == [f"R{i:02d}" for i in range(5, 15)]


def test_mixed_timestamp_forms_sort_by_time_and_duplicates_count_once() -> None:
    late = {**o.event("Late", "x"), "lastTimestamp": None, "eventTime": "2026-12-01T12:00:00.500000Z"}
    early = o.event("Early", "2026-12-01T11:00:00Z", uid="same")
    lines = events.recent([late, early, {**early}, {"junk": 1}])
    assert [e.reason for e in lines] == ["", "Early", "Late"]
    assert lines[1].object == "FabricPlacement/a" and lines[1].count == 1

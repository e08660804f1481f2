"""A decision's log line (decide.laps): named laps, then the thread's CPU and the garbage
collector's pauses over them, so a slow decision on a busy machine is told from a slow search."""

from __future__ import annotations

import gc
import re
import threading
import time

from fabricsched.extender.decide import laps

MS = r"([0-9.]+)"
LINE_OF_ONE = re.compile(rf"^waited {MS}; CPU {MS}, collector {MS}, other threads {MS}$")
LINE = re.compile(rf"^busy {MS}, idle {MS}, collected {MS}; CPU {MS}, collector {MS}, other threads {MS}$")


def test_the_laps_say_their_time_and_of_it_the_cpu_and_the_collectors_pauses() -> None:
    timed = laps.Laps()
    ends = time.thread_time() + 0.03
    while time.thread_time() < ends:  # 30 ms of CPU
        pass
    timed.lap("busy")
    time.sleep(0.05)  # 50 ms of no CPU
    timed.lap("idle")
    garbage = [[] for _ in range(200_000)]
    for item in garbage:
        item.append(item)  # cycles: the collection has work
    del garbage, item
    gc.collect()
    timed.lap("collected")
    time.sleep(0.02)  # after the last lap: not counted
    found = LINE.match(timed.text())
    assert found is not None, timed.text()
    busy, idle, collected, cpu, collector, others = (float(g) for g in found.groups())
    assert busy >= 29 and idle >= 49
    assert 29 <= cpu <= busy + collected + 5, "the sleep took no CPU"
    assert collector > 0, "the collection was timed"
    assert others < 5, "no other thread ran"


def test_the_cpu_of_the_process_s_other_threads_is_told_apart() -> None:
    timed = laps.Laps()

    def spin() -> None:
        ends = time.thread_time() + 0.04
        while time.thread_time() < ends:  # 40 ms of another thread's CPU
            pass

    worker = threading.Thread(target=spin)
    worker.start()
    worker.join()
    timed.lap("waited")
    found = LINE_OF_ONE.match(timed.text())
    assert found is not None, timed.text()
    waited, cpu, _, others = (float(g) for g in found.groups())
    assert others >= 35, "the other thread's CPU is counted"
    assert cpu < 20, "not as this thread's"
    assert waited >= 39

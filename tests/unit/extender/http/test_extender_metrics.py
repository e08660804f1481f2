"""The extender's user metrics, read from a real registry after real decisions."""

from __future__ import annotations

import prometheus_client
from extender_harness import Harness, fabric_nodes

from fabricsched.controller import metrics as operator_metrics


def sample(registry: prometheus_client.CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def leaf_gpus(registry: prometheus_client.CollectorRegistry, leaves: list[str], *states: str) -> float:
    return sum(
        sample(registry, "fabricsched_domain_gpus", topology="ib-east", tier="leaf", domain=leaf, state=state)
        or 0
        for state in states
        for leaf in leaves
    )


def test_gangs_waits_slowdowns_and_domain_gpus() -> None:
    registry = prometheus_client.CollectorRegistry()
    harness = Harness(fabric_nodes(), registry=registry)  # the service registers its metrics
    harness.restore()
    uid = harness.job("six", 6)
    harness.clock.advance(7)
    for rank in range(5):
        harness.place(harness.pod("six", uid, rank), created=harness.clock() - 7)
    huge = harness.job("huge", 40)
    harness.filter(harness.pod("huge", huge, 0))

    assert sample(registry, "fabricsched_gangs", phase="Reserved") == 1
    assert sample(registry, "fabricsched_gangs", phase="Bound") == 0
    assert sample(registry, "fabricsched_gangs", phase="Pending") == 1
    assert sample(registry, "fabricsched_gangs_on_degraded_path") == 0
    assert sample(registry, "fabricsched_gang_placement_wait_seconds_count") == 1
    assert sample(registry, "fabricsched_gang_placement_wait_seconds_sum") == 7
    assert sample(registry, "fabricsched_gang_comm_slowdown_count") == 1
    entry = harness.store.get("train", "six")
    leaves = entry["spec"]["domains"]["leaf"]
    used, reserved = leaf_gpus(registry, leaves, "used"), leaf_gpus(registry, leaves, "reserved")
    assert (used, reserved) == (5 * 8, 8)  # five ranks bound, the sixth held
    total = leaf_gpus(registry, leaves, "free", "reserved", "used")
    assert total == len(leaves) * 4 * 8  # free + reserved + used = every GPU of the leaves
    assert sample(registry, "fabricsched_reservation_expiries_total") == 0
    harness.clock.advance(1000)
    harness.coordinator.housekeeping()
    assert sample(registry, "fabricsched_reservation_expiries_total") == 1


def test_the_operator_registry_has_build_info_process_metrics_and_telemetry_failures() -> None:
    registry = operator_metrics.Metrics()
    registry.telemetry_failures.labels("ib-east", "unreachable").inc()
    text = registry.exposition().decode()
    assert 'fabricsched_build_info{version="0.1.0"} 1.0' in text
    assert "process_cpu_seconds_total" in text and "python_info" in text
    assert 'fabricsched_telemetry_query_failures_total{kind="unreachable",topology="ib-east"} 1.0' in text

"""Resource quantities: Kubernetes' grammar, read strictly and in constant time.

A pod may ask for ``example.com/foo: "1e1000000"`` (the API server accepts it); building that
number exactly took ~26 s of the event loop per read, so values beyond any node are clamped.
"""

from __future__ import annotations

import time

import pytest

import builders
from fabricsched.topology import nodes, quantities

HUGE = quantities.MAX_UNITS


@pytest.mark.parametrize(("text", "expected"), [
    ("8", 8), ("+8", 8), ("-8", -8), ("8.", 8), (".5", 1), ("0.5", 1), ("0", 0), ("000", 0), ("007", 7),
    ("1n", 1), ("1u", 1), ("1500m", 2), ("1k", 1000), ("1M", 10**6), ("1G", 10**9), ("1T", 10**12),
    ("1P", 10**15), ("1E", 10**18), ("1Ki", 1024), ("1.5Ki", 1536), ("1Mi", 2**20), ("1Ei", 2**60),
    ("1e3", 1000), ("1E3", 1000), ("1e+3", 1000), ("15e-1", 2), ("-15e-1", -1), (" 8 ", 8),
    ("9223372036854775807", HUGE), (8, 8), (0.5, 1),
], ids=lambda v: repr(v))
def test_the_kubernetes_grammar_reads_as_whole_units_rounded_up(
    text: str | int | float, expected: int
) -> None:
    assert quantities.to_int(text) == expected


@pytest.mark.parametrize("text", [
    "1e1000000", "1e999999999999999999999999999999", "9" * 60, "1e19", "9223372036854775808", "8Ei",
], ids=["the bomb", "a huge exponent", "sixty nines", "ten to the nineteenth", "int64 max plus one",
        "eight exbibytes"])
def test_values_beyond_any_node_clamp_at_once(text: str) -> None:
    started = time.perf_counter()
    assert quantities.to_int(text) == HUGE
    assert quantities.to_int("-" + text) == -HUGE
    assert time.perf_counter() - started < 0.05


def test_tiny_positive_values_need_one_unit_and_tiny_negative_ones_none() -> None:
    started = time.perf_counter()
    assert quantities.to_int("1e-1000000") == 1
    assert quantities.to_int("-1e-1000000") == 0
    assert quantities.to_int("0." + "0" * 40 + "1Ei") == 1
    assert quantities.to_int("0." + "0" * 16 + "1Ei") == 12  # 2**60 / 10**17 = 11.53, rounded up
    assert time.perf_counter() - started < 0.05


def test_a_thousand_bombs_cost_milliseconds() -> None:
    started = time.perf_counter()
    for i in range(1000):
        quantities.to_int(f"{i + 1}e{10**6 + i}")
    assert time.perf_counter() - started < 0.5


@pytest.mark.parametrize("text", [
    "", " ", ".", "-", "+", "e3", "1e", "1e+", "1e3.5", "1.2.3", "1 k", "1kk", "1Ki5", "1ki", "1K", "1e3Ki",
    "0x10", "1_000", "nan", "inf", "Infinity", "²", "٣", "\uff11", "8\u200b", "1" * (quantities.MAX_TEXT + 1),
], ids=lambda v: repr(v)[:24])
def test_text_outside_the_grammar_is_refused_with_a_short_message(text: str) -> None:
    with pytest.raises(ValueError, match="not a quantity") as caught:
        quantities.to_int(text)
    assert len(str(caught.value)) <= 60 and str(caught.value).isascii()


@pytest.mark.parametrize("value", [True, None, [], {}, float("nan"), float("inf")], ids=repr)
def test_values_of_other_types_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        quantities.to_int(value)


def test_a_huge_python_int_from_yaml_is_clamped() -> None:
    assert quantities.to_int(10**100) == HUGE
    assert quantities.to_int(-(10**100)) == -HUGE


def test_a_pod_asking_for_the_bomb_is_read_at_once_and_requests_more_than_any_node() -> None:
    bomb = builders.make_pod("bomb", "tenant").gpus(1).build()
    bomb["spec"]["containers"][0]["resources"]["requests"]["example.com/foo"] = "1e1000000"
    bomb["spec"]["containers"].append(
        {"name": "side", "resources": {"limits": {"nvidia.com/gpu": "1e1000000"}}}
    )
    started = time.perf_counter()
    pod = nodes.PodUsage.from_manifest(bomb)
    assert time.perf_counter() - started < 0.05
    assert pod.requests["example.com/foo"] == HUGE
    assert pod.gpus("nvidia.com/gpu") > nodes.MAX_HOST_GPUS


@pytest.mark.parametrize("allocatable", ["1e1000000", "1e19", str(nodes.MAX_HOST_GPUS + 1), "-8", "0"])
def test_a_node_claiming_more_gpus_than_any_host_holds_none(allocatable: str) -> None:
    started = time.perf_counter()
    info = builders.make_node("n").allocatable("nvidia.com/gpu", allocatable).info()
    assert info.gpus("nvidia.com/gpu") == 0
    assert time.perf_counter() - started < 0.05


def test_a_node_at_the_ceiling_keeps_its_gpus() -> None:
    info = builders.make_node("n").allocatable("nvidia.com/gpu", str(nodes.MAX_HOST_GPUS)).info()
    assert info.gpus("nvidia.com/gpu") == nodes.MAX_HOST_GPUS

"""The strict readers every label, annotation and pod field goes through."""

from __future__ import annotations

import time

import pytest

from fabricsched import parsing


@pytest.mark.parametrize(("text", "expected"), [
    ("0", 0), ("7", 7), ("007", 7), (" 12\t", 12), ("999", 999),
], ids=["zero", "a digit", "leading zeros", "blanks around", "the maximum"])
def test_ascii_whole_numbers_are_read(text: str, expected: int) -> None:
    assert parsing.count(text, "rank", 999) == expected


@pytest.mark.parametrize("text", [
    "²", "٣", "\uff11", "¹²", "3\u200b", "-1", "+1", "1.0", "1e3", "1_0", "0x1", "", " ", "one", "1 2",
], ids=["superscript two", "arabic-indic three", "fullwidth one", "superscripts", "zero-width space",
        "negative", "a plus sign", "a fraction", "an exponent", "an underscore", "hex", "empty", "blank",
        "a word", "two numbers"])
def test_anything_but_ascii_digits_is_invalid(text: str) -> None:
    with pytest.raises(parsing.Invalid, match="not a whole number"):
        parsing.count(text, "rank", 999)


UNICODE_DIGITS = [chr(c) for c in range(0x80, 0x30000) if chr(c).isdigit()]
"""Every non-ASCII character ``str.isdigit`` accepts (superscripts, Arabic-Indic and fullwidth
digits...): ``int`` reads some of them as numbers and refuses others, so a reader built on either
lets hostile text through or fails on it with a ValueError of its own."""


def test_no_digit_outside_ascii_reads_as_a_number_alone_or_among_ascii_digits() -> None:
    assert len(UNICODE_DIGITS) > 500  # the set is the one Python knows, not a handful
    for digit in UNICODE_DIGITS:
        for text in (digit, f"1{digit}", f"{digit}0", f" {digit} "):
            with pytest.raises(parsing.Invalid, match="not a whole number"):
                parsing.count(text, "rank", 999)


@pytest.mark.parametrize(("text", "minimum"), [("1000", 0), ("0", 1), ("0" * 20 + "1000", 0)],
                         ids=["above the maximum", "below the minimum", "above it behind zeros"])
def test_numbers_out_of_range_are_invalid(text: str, minimum: int) -> None:
    with pytest.raises(parsing.Invalid, match="not between"):
        parsing.count(text, "rank", 999, minimum=minimum)


def test_a_256_kb_number_is_refused_at_once_with_a_short_message() -> None:
    started = time.perf_counter()
    with pytest.raises(parsing.Invalid) as caught:
        parsing.count("9" * 256 * 1024, "annotation fabricsched.io/gang-size", 10**6)
    assert time.perf_counter() - started < 0.01
    assert len(str(caught.value)) < 100


def test_a_value_of_another_type_is_invalid() -> None:
    with pytest.raises(parsing.Invalid, match="not a number"):
        parsing.count(3, "rank", 9)


@pytest.mark.parametrize(("value", "expected"), [
    ("abc", "'abc'"),
    ("a\nb\x00²", "'a?b?'"),
    ("x" * 40, "'" + "x" * 29 + "...'"),
    (None, "null"),
    (["a"], "an array"),
], ids=["short text reads as its repr", "a run of unprintable characters becomes one ?", "long text is cut",
        "null", "an array"])
def test_excerpts_are_short_printable_ascii(value: object, expected: str) -> None:
    assert parsing.excerpt(value) == expected


def test_an_excerpt_of_256_kb_costs_no_more_than_a_short_one() -> None:
    text = "é" * 256 * 1024
    started = time.perf_counter()
    for _ in range(1000):
        shown = parsing.excerpt(text)
    assert time.perf_counter() - started < 0.1
    assert len(shown) <= parsing.EXCERPT_CHARS + 2 and shown.isascii()


@pytest.mark.parametrize("text", ["short", "x" * 160, "x" * 161, "é" * 100, "€" * 1000, "a" * 10**6],
                         ids=["short", "exactly the limit", "one over", "two-byte characters",
                              "three-byte characters", "a megabyte"])
def test_truncate_bounds_utf8_bytes_and_marks_the_cut(text: str) -> None:
    cut = parsing.truncate(text, 160)
    assert len(cut.encode()) <= 160
    if len(text.encode()) <= 160:
        assert cut == text
    else:
        assert cut.endswith(parsing.ELLIPSIS) and text.startswith(cut[: -len(parsing.ELLIPSIS)])


@pytest.mark.parametrize(("reader", "value"), [
    (parsing.mapping, "x"), (parsing.mapping, ["a"]), (parsing.sequence, "abc"), (parsing.sequence, {"a": 1}),
    (parsing.string, 5), (parsing.string, {}), (parsing.string_map, {"a": 1}), (parsing.string_map, ["a"]),
], ids=["object as string", "object as array", "array as string", "array as object", "string as number",
        "string as object", "a label as number", "labels as array"])
def test_wrong_json_types_are_invalid(reader: object, value: object) -> None:
    with pytest.raises(parsing.Invalid, match="must be"):
        reader(value, "field")  # type: ignore[operator]


def test_absent_fields_read_as_empty() -> None:
    assert parsing.mapping(None, "x") == {}
    assert parsing.sequence(None, "x") == ()
    assert parsing.string(None, "x", "dflt") == "dflt"
    assert parsing.string_map(None, "x") == {}


@pytest.mark.parametrize("text", ["²", "٣", "1e3", "-1", "9" * 40], ids=repr)
def test_the_demo_tour_reads_no_rank_from_hostile_text(text: str) -> None:
    from fabricsched.cluster import tour

    pod = {"metadata": {"labels": {tour.RANK_KEY: text}}}
    assert tour._rank(pod) is None

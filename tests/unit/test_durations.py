"""Durations in Go/Kubernetes syntax: what parses, what is refused, and round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.core.durations import format_duration, parse_duration
from crs_controller.core.errors import InvalidSpec


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("0s", 0.0),
        ("90s", 90.0),
        ("10m", 600.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("1100ms", 1.1),
        ("1.1s", 1.1),
        ("1m30.5s", 90.5),
        ("2h45m30s", 9930.0),
        ("250us", 0.00025),
        ("250µs", 0.00025),
        ("250μs", 0.00025),
        ("7ns", 7e-9),
        (".5s", 0.5),
        ("1.h", 3600.0),
        ("+5m", 300.0),
        ("-0", 0.0),
        ("1h1h", 7200.0),
    ],
)
def test_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds, abs=1e-12)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("-", "empty"),
        ("10", "missing unit"),
        ("1h30", "missing unit"),
        ("-1s", "negative"),
        ("-1h30m", "negative"),
        ("10min", "unknown unit 'min'"),
        ("5d", "unknown unit 'd'"),
        ("1h 30m", "unknown unit"),
        (" 1h", "expected a number"),
        ("h", "expected a number"),
        ("1..5s", "missing unit"),
        ("1e3s", "unknown unit 'e'"),
        ("3000000h", "too large"),
    ],
)
def test_parse_refuses(text: str, message: str) -> None:
    with pytest.raises(InvalidSpec, match=message) as info:
        parse_duration(text)
    assert repr(text) in str(info.value), "the message quotes the value the user wrote"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (90, "1m30s"),
        (600, "10m"),
        (3600, "1h"),
        (5400, "1h30m"),
        (3601, "1h1s"),
        (1.5, "1.5s"),
        (0.5, "500ms"),
        (0.0015, "1.5ms"),
        (2.5e-6, "2.5µs"),
        (7e-9, "7ns"),
        (-90, "-1m30s"),
    ],
)
def test_format(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_format_refuses_non_finite() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        format_duration(float("inf"))


@given(st.integers(min_value=0, max_value=10**9 * 3600 * 24 * 365))
def test_round_trip_exact_nanoseconds(ns: int) -> None:
    seconds = ns / 1e9
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, rel=1e-15, abs=1e-9)


@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.sampled_from(["h", "m", "s", "ms", "us", "ns"])),
        min_size=1,
        max_size=4,
    )
)
def test_format_of_parse_is_stable(parts: list[tuple[int, str]]) -> None:
    text = "".join(f"{n}{unit}" for n, unit in parts)
    formatted = format_duration(parse_duration(text))
    # Seconds are floats: beyond about 2**52 ns the last nanosecond may round.
    assert parse_duration(formatted) == pytest.approx(parse_duration(text), rel=1e-15, abs=2e-9)
    assert format_duration(parse_duration(formatted)) == formatted

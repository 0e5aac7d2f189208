"""Durations in Go/Kubernetes syntax: what parses and what is refused."""

from __future__ import annotations

import pytest

from crs_controller.core.durations import parse_duration
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
        ("\u0663s", "expected a number"),  # an Arabic-Indic three: Go reads ASCII digits only
        ("1\uff15m", "unknown unit"),  # a fullwidth five after an ASCII one
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

"""``core.text.safe``: control, line-separator and bidi characters from tenants are
escaped visibly, long text is cut with an ellipsis within the limit, the result is a
fixed point, and ordinary text (printable ASCII or not) passes unchanged; the log
processor makes every key and value of a log line safe."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.app.logs import VALUE_LIMIT, make_safe
from crs_controller.core.text import ELLIPSIS, safe, safe_all

BIDI = {chr(c) for c in [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]}


def unsafe(char: str) -> bool:
    category = unicodedata.category(char)
    return category in ("Cc", "Cs", "Zl", "Zp") or char in BIDI


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("cm-\x1b[31mred", "cm-\\x1b[31mred"),
        ("line\r\nInjected: yes", "line\\r\\nInjected: yes"),
        ("tab\there", "tab\\there"),
        ("nul\x00del\x7f", "nul\\x00del\\x7f"),
        ("c1\x9b31m", "c1\\x9b31m"),  # the one-byte CSI of the C1 set
        ("admin\u202egnp.exe", "admin\\u202egnp.exe"),
        ("iso\u2066late\u2069", "iso\\u2066late\\u2069"),
        ("para\u2028graph\u2029", "para\\u2028graph\\u2029"),
        ("lone \ud800 surrogate", "lone \\ud800 surrogate"),
        # What reads well already stays as it is.
        ("ConfigMap default/cni: 422 Invalid", "ConfigMap default/cni: 422 Invalid"),
        ("back\\slash \\x1b", "back\\slash \\x1b"),
        ("héllo wörld ✓ 日本", "héllo wörld ✓ 日本"),
        ("", ""),
    ],
)
def test_escapes(text: str, shown: str) -> None:
    assert safe(text, 1000) == shown


@pytest.mark.parametrize(
    ("text", "limit", "shown"),
    [
        ("abcdef", 6, "abcdef"),
        ("abcdefg", 6, "abcde" + ELLIPSIS),
        ("x", 1, "x"),
        ("xy", 1, ELLIPSIS),
        # An escape is never cut in two: it goes whole or not at all.
        ("ab\x1bcd", 6, "ab" + ELLIPSIS),
        ("ab\x1bcd", 7, "ab\\x1b" + ELLIPSIS),
        ("ab\x1bcd", 8, "ab\\x1bcd"),
    ],
)
def test_cuts_within_the_limit(text: str, limit: int, shown: str) -> None:
    assert safe(text, limit) == shown


def test_limit_must_leave_room() -> None:
    with pytest.raises(ValueError):
        safe("x", 0)


limits = st.integers(min_value=1, max_value=300)


@given(st.text(), limits)
def test_no_unsafe_character_survives(text: str, limit: int) -> None:
    assert not any(unsafe(c) for c in safe(text, limit))


@given(st.text(), limits)
def test_never_longer_than_the_limit(text: str, limit: int) -> None:
    assert len(safe(text, limit)) <= limit


@given(st.text(), limits)
def test_a_fixed_point(text: str, limit: int) -> None:
    once = safe(text, limit)
    assert safe(once, limit) == once


@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E)), limits)
def test_printable_ascii_passes_unchanged_when_it_fits(text: str, limit: int) -> None:
    shown = safe(text, limit)
    if len(text) <= limit:
        assert shown == text
    else:
        assert shown == text[: limit - 1] + ELLIPSIS


@given(st.text())
def test_a_prefix_of_the_escaped_text(text: str) -> None:
    # Cut or not, what is shown is the start of the whole escaped text: nothing is
    # reordered, dropped in the middle or made up.
    whole = safe(text, 10**6)
    for limit in (1, 7, 40):
        shown = safe(text, limit).removesuffix(ELLIPSIS)
        assert whole.startswith(shown)


def test_log_lines_are_made_safe_keys_and_values() -> None:
    line = make_safe(
        None,
        "warning",
        {
            "event": "apply failed",
            "object": 'ConfigMap default/x\x1b[31m\r\n{"level": "info"}',
            "count": 3,
            "ok": None,
            "names": ["a", "b\u202e"],
            "by\nkey": {"c\x07": "d\x1b"},
            "long": "x" * 10_000,
            "exception": "Traceback (most recent call last):\n  boom\x1b[2J\nValueError: v\r",
        },
    )
    assert line == {
        "event": "apply failed",
        "object": 'ConfigMap default/x\\x1b[31m\\r\\n{"level": "info"}',
        "count": 3,
        "ok": None,
        "names": ["a", "b\\u202e"],
        "by\\nkey": {"c\\x07": "d\\x1b"},
        "long": "x" * (VALUE_LIMIT - 1) + ELLIPSIS,
        # A traceback keeps its lines; what is inside them is made safe.
        "exception": "Traceback (most recent call last):\n  boom\\x1b[2J\nValueError: v\\r",
    }


@given(st.dictionaries(st.text(), st.text() | st.lists(st.text())))
def test_no_control_character_reaches_a_log_line(event: dict[str, object]) -> None:
    line = make_safe(None, "info", event)
    text = "".join(
        key + ("".join(value) if isinstance(value, list) else str(value))
        for key, value in line.items()
    )
    assert not any(unsafe(c) for c in text)


trees = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in [key, *_strings(item)]]
    return []


@given(trees)
def test_every_string_of_a_tree_is_made_safe_and_its_shape_kept(tree: object) -> None:
    shown = safe_all(tree, 50, 10)
    assert all(not any(unsafe(c) for c in s) for s in _strings(shown))
    assert all(len(s) <= 50 for s in _strings(shown))
    if isinstance(tree, dict):
        assert all(len(key) <= 10 for key in shown)
    if not isinstance(tree, str | list | dict):
        assert shown == tree

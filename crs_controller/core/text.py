"""Text from tenants made safe to show: no control characters, bounded length.

Names and messages that came from a manifest, a binding or a workload server end up
in conditions, Events, bindings, logs and the CLI's tables, where a raw ESC sequence
recolours or rewrites a terminal, a ``\\r\\n`` forges a log line and a bidi override
makes text read differently from what it is ("Trojan Source", CVE-2021-42574).
kubectl escapes the same characters before it prints a value (CVE-2021-25743).

``safe`` writes each such character as a visible escape (``\\x1b``, ``\\r``, ``\\n``,
``\\u202e``) and cuts what is too long with an ellipsis. Backslashes are left as
they are, so the result of ``safe`` is its own fixed point: ``safe(safe(x)) ==
safe(x)``. Printable text, ASCII or not, passes unchanged.
"""

from __future__ import annotations

import re
from typing import Any

ELLIPSIS = "…"

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
# C0 controls, DEL and C1 controls; the line and paragraph separators (Unicode's own
# line breaks); the bidi embeddings, overrides, isolates and marks; lone surrogates
# (they cannot be encoded as UTF-8, so an API request carrying one would fail).
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escape(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def safe(text: str, limit: int) -> str:
    """``text`` with every control, line-separator and bidi character escaped, at most
    ``limit`` characters long (cut with an ellipsis, never inside an escape)."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    if len(text) <= limit and _UNSAFE.search(text) is None:
        return text  # the common case: an ordinary name or message
    pieces = _pieces(text)
    if sum(map(len, pieces)) <= limit:
        return "".join(pieces)
    kept: list[str] = []
    room = limit - len(ELLIPSIS)
    for index, piece in enumerate(pieces):
        if len(piece) > room:
            # A safe run is cut where the room ends; an escape is never cut in two
            # (half of one would read as something else).
            kept.append(piece[:room] if index % 2 == 0 else "")
            break
        kept.append(piece)
        room -= len(piece)
    return "".join(kept) + ELLIPSIS


def safe_all(value: Any, limit: int, key_limit: int) -> Any:
    """``value`` with every string in it made safe: strings as ``safe`` makes them (at
    most ``limit``), the keys of each mapping too (at most ``key_limit``), lists and
    tuples as lists; numbers, booleans and None as they are."""
    if isinstance(value, str):
        return safe(value, limit)
    if isinstance(value, list | tuple):
        return [safe_all(item, limit, key_limit) for item in value]
    if isinstance(value, dict):
        return {
            safe(str(key), key_limit): safe_all(item, limit, key_limit)
            for key, item in value.items()
        }
    return value


def _pieces(text: str) -> list[str]:
    """Safe runs (even positions, maybe empty) alternating with the escape of one
    unsafe character (odd positions)."""
    pieces: list[str] = []
    start = 0
    for match in _UNSAFE.finditer(text):
        pieces += [text[start : match.start()], _escape(match.group())]
        start = match.end()
    return [*pieces, text[start:]]

"""Durations in Go/Kubernetes syntax (``90s``, ``10m``, ``1h30m``, ``1.5h``, ``500ms``).

The spec fields (``reapplyInterval``, ``driftCheckInterval``, ``uninstall.timeout``)
follow ``metav1.Duration``, so users write what they would write for any Kubernetes
object. Values are computed in integer nanoseconds, as Go does, so that ``1.1s``
and ``1100ms`` are the very same float.
"""

from __future__ import annotations

import re
from fractions import Fraction

from crs_controller.core.errors import InvalidSpec

__all__ = ["parse_duration"]

_NS_PER_UNIT = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 MICRO SIGN, what Go prints
    "μs": 1_000,  # U+03BC GREEK SMALL LETTER MU, which Go accepts too
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_NS_PER_SECOND = 1_000_000_000
_MAX_NS = 2**63 - 1  # Go's time.Duration is an int64 of nanoseconds (about 292 years)

# One "<number><unit>" component; the unit is anything up to the next digit or dot so
# that a typo ("10min", "5d") is reported as an unknown unit rather than a syntax error.
_COMPONENT = re.compile(r"(\d+\.?\d*|\.\d+)([^\d.]*)", re.ASCII)  # Go reads ASCII digits only


def parse_duration(text: str) -> float:
    """Return the duration ``text`` in seconds; raise InvalidSpec if it is not one."""
    if not isinstance(text, str):
        raise InvalidSpec(f"invalid duration {text!r}: expected a string such as '10m'")
    body = text[1:] if text[:1] in "+-" else text
    if not body:
        raise InvalidSpec(f"invalid duration {text!r}: empty")
    if body == "0":  # the only value Go accepts without a unit
        return 0.0
    total_ns = 0
    pos = 0
    while pos < len(body):
        match = _COMPONENT.match(body, pos)
        if match is None:
            raise InvalidSpec(f"invalid duration {text!r}: expected a number at {body[pos:]!r}")
        number, unit = match.groups()
        if not unit:
            raise InvalidSpec(f"invalid duration {text!r}: missing unit after {number!r}")
        if unit not in _NS_PER_UNIT:
            raise InvalidSpec(
                f"invalid duration {text!r}: unknown unit {unit!r} "
                "(valid units are ns, us, ms, s, m, h)"
            )
        # Fraction keeps "0.1h" exact; Go truncates to whole nanoseconds.
        total_ns += int(Fraction(number) * _NS_PER_UNIT[unit])
        pos = match.end()
        if total_ns > _MAX_NS:
            raise InvalidSpec(f"invalid duration {text!r}: too large")
    if text[0] == "-" and total_ns:
        raise InvalidSpec(f"invalid duration {text!r}: must not be negative")
    return total_ns / _NS_PER_SECOND

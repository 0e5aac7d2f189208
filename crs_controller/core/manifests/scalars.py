"""What a plain YAML scalar means to kubectl and Cluster API.

Both read manifests through sigs.k8s.io/yaml, which decodes with go-yaml v2 into
``interface{}`` values. go-yaml v2 resolves a plain (unquoted, untagged) scalar by
its own reading of the YAML 1.1 tables, which differs from PyYAML's:

* ``y``, ``Y``, ``n`` and ``N`` are booleans, besides yes/no, true/false, on/off;
* a float needs no dot: ``1e3`` and ``09`` are numbers (``09`` is no octal integer);
* integers are Go literals once ``_`` is dropped: ``0o17``, ``0X1F``, ``0B11``, a
  leading ``0`` for octal; past the 64-bit range a decimal one becomes a float, and a
  hexadecimal or binary one, or a float past the largest double, stays a string;
* timestamps and base-60 numbers (``10:30``) stay strings.

``resolve_plain`` returns the tag go-yaml gives such a scalar and the value it
decodes it to; the manifest reader follows it, and ``render -o manifests`` quotes
every string that would not read back as a string. ``json_key`` is the string
sigs.k8s.io/yaml makes of a mapping key that go-yaml read as a boolean or number.
"""

from __future__ import annotations

import math
import re
import struct
from typing import Any

__all__ = ["BOOL", "FLOAT", "INT", "MERGE", "NULL", "STR", "json_key", "resolve_plain"]

_PREFIX = "tag:yaml.org,2002:"
STR = _PREFIX + "str"
BOOL = _PREFIX + "bool"
INT = _PREFIX + "int"
FLOAT = _PREFIX + "float"
NULL = _PREFIX + "null"
MERGE = _PREFIX + "merge"


def _table(tag: str, value: Any, *spellings: str) -> dict[str, tuple[str, Any]]:
    return dict.fromkeys(spellings, (tag, value))


# go-yaml v2's resolve map: these exact spellings, whatever their first character.
_CONSTANTS: dict[str, tuple[str, Any]] = {
    **_table(BOOL, True, "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE"),
    **_table(BOOL, True, "on", "On", "ON"),
    **_table(BOOL, False, "n", "N", "no", "No", "NO", "false", "False", "FALSE"),
    **_table(BOOL, False, "off", "Off", "OFF"),
    **_table(NULL, None, "", "~", "null", "Null", "NULL"),
    **_table(FLOAT, math.nan, ".nan", ".NaN", ".NAN"),
    **_table(FLOAT, math.inf, ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"),
    **_table(FLOAT, -math.inf, "-.inf", "-.Inf", "-.INF"),
    **_table(MERGE, "<<", "<<"),
}

# Go's integer literals (strconv.ParseInt with base 0), underscores already dropped.
_GO_INT = re.compile(
    r"(?P<sign>[-+]?)(?:0[bB](?P<b2>[01]+)|0[oO](?P<b8>[0-7]+)|0[xX](?P<b16>[0-9a-fA-F]+)"
    r"|0(?P<octal>[0-7]*)|(?P<b10>[1-9][0-9]*))\Z"
)
_BASES = {"b2": 2, "b8": 8, "b16": 16, "octal": 8, "b10": 10}
# go-yaml's last try: a "0b" prefix and a signed binary number ("0b-1" is -1).
_SIGNED_BINARY = re.compile(r"0b([-+][01]+)\Z")
# go-yaml's own float pattern, tried once the integer readings failed.
_GO_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?\Z")
# Go's decimal float syntax for a scalar starting with a dot, which go-yaml hands to
# strconv.ParseFloat as it is: an underscore only between two digits.
_DOT_FLOAT = re.compile(r"\.[0-9](?:_?[0-9])*(?:[eE][-+]?[0-9](?:_?[0-9])*)?\Z")

_INT64 = 1 << 63
_UINT64 = 1 << 64


def resolve_plain(text: str) -> tuple[str, Any]:
    """The tag and value go-yaml v2 gives the plain scalar ``text``."""
    constant = _CONSTANTS.get(text)
    if constant is not None:
        return constant
    first = text[:1]
    if first == ".":
        return _float(text, _DOT_FLOAT)
    if first and first in "+-0123456789":
        return _number(text.replace("_", ""), text)
    return STR, text


def _number(plain: str, text: str) -> tuple[str, Any]:
    number = _integer(plain)
    if number is not None:
        return INT, number
    tag, value = _float(plain, _GO_FLOAT)
    return (tag, value) if tag == FLOAT else (STR, text)


def _integer(plain: str) -> int | None:
    """ParseInt(plain, 0, 64), else ParseUint(plain, 0, 64), as go-yaml tries them."""
    match = _GO_INT.match(plain)
    if match is None:
        binary = _SIGNED_BINARY.match(plain)
        number = int(binary[1], 2) if binary else _INT64
        return number if -_INT64 <= number < _INT64 else None
    group = next(name for name in _BASES if match[name] is not None)
    digits = match[group].lstrip("0") or "0"
    if len(digits) > 64:  # past 64 bits in any base, and too long for int() to be cheap
        return None
    number = int(digits, _BASES[group])
    if match["sign"] == "-":
        number = -number
    if -_INT64 <= number < _INT64 or (not match["sign"] and number < _UINT64):
        return number
    return None


def _float(text: str, pattern: re.Pattern[str]) -> tuple[str, Any]:
    if pattern.match(text) is None:
        return STR, text
    number = float(text.replace("_", ""))
    if math.isinf(number):  # ParseFloat's range error: go-yaml keeps the string
        return STR, text
    return FLOAT, number


def json_key(key: object) -> str | None:
    """A mapping key as JSON spells it after sigs.k8s.io/yaml, or None for the keys
    it refuses (null, an integer past the signed 64-bit range)."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key) if -_INT64 <= key < _INT64 else None
    if isinstance(key, float):
        return _float32_text(key)
    return None


def _float32_text(number: float) -> str:
    """Go's strconv.FormatFloat(number, 'g', -1, 32), which sigs.k8s.io/yaml uses."""
    try:
        single = struct.unpack("f", struct.pack("f", number))[0]
    except OverflowError:
        single = number
    if math.isinf(single):
        return ".inf" if single > 0 else "-.inf"
    if single == 0:
        return "-0" if math.copysign(1, single) < 0 else "0"
    digits, point = _shortest_float32(single)
    sign = "-" if single < 0 else ""
    exponent = point - 1
    # Go's %g for the shortest digits: %e below 1e-4 or from 1e6 (or past the digits).
    precision = len(digits) if point <= len(digits) < 6 else 6
    if exponent < -4 or exponent >= precision:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{exponent:+03d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    whole = digits[:point].ljust(point, "0")
    return sign + whole + ("." + digits[point:] if len(digits) > point else "")


def _shortest_float32(single: float) -> tuple[str, int]:
    """The fewest significant digits that read back as the same float32, and where
    the decimal point goes after the first ``point`` of them."""
    for precision in range(1, 10):
        text = f"{abs(single):.{precision - 1}e}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == abs(single):
            break
    mantissa, _, exponent = text.partition("e")
    digits = mantissa.replace(".", "").rstrip("0") or "0"
    return digits, int(exponent) + 1
